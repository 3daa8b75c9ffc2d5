// Builds sbxdb from this repository and runs `sbxdb serve` for the tests:
// the real server, never a stand-in. Used by global-setup.ts (one server
// for the whole run) and by tests that need a server of their own.

import { spawn, spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import type { ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const here = dirname(fileURLToPath(import.meta.url))
/** The repository's root, where go.mod is. */
export const repoRoot = resolve(here, '..', '..', '..')

/**
 * The sbxdb binary: $SBXDB_BIN when set, else built with `go build` from
 * this repository into .test-bin/. A failed build fails the run.
 */
export function buildSbxdb(): string {
  const given = process.env.SBXDB_BIN
  if (given !== undefined && given !== '') return given
  const out = resolve(here, '..', '.test-bin', 'sbxdb')
  const r = spawnSync('go', ['build', '-o', out, './cmd/sbxdb'], { cwd: repoRoot, encoding: 'utf8' })
  if (r.error !== undefined || r.status !== 0) {
    throw new Error(
      `cannot build sbxdb with "go build ./cmd/sbxdb" in ${repoRoot} ` +
        `(set SBXDB_BIN to a built binary to use that instead): ${r.error?.message ?? r.stderr}`,
    )
  }
  return out
}

/** A running `sbxdb serve`. */
export interface RunningServer {
  socketPath: string
  /** The TCP listener's origin, when one was asked for. */
  url?: string
  token?: string
  dir: string
  process: ChildProcess
  /** Everything the server logged on standard error so far. */
  log: () => string
  /** SIGTERM, wait for the exit, remove the directory. Resolves with the exit code. */
  stop: () => Promise<number | null>
}

/**
 * Starts `sbxdb serve` on a fresh store in a new temporary directory, on a
 * unix socket and, with `tcp`, a loopback port with a token.
 */
export async function startServer(
  bin: string,
  opts: { test?: boolean; tcp?: boolean; args?: Array<string> } = {},
): Promise<RunningServer> {
  const dir = mkdtempSync(join(tmpdir(), 'sbxts-'))
  const socketPath = join(dir, 's.sock')
  const args = ['serve', '--db', join(dir, 'store'), '--listen', `unix:${socketPath}`, '--grace', '5s']
  let token: string | undefined
  if (opts.tcp) {
    token = randomBytes(32).toString('hex') // serve takes 32 bytes at least
    writeFileSync(join(dir, 'token'), token, { mode: 0o600 })
    args.push('--listen', 'tcp:127.0.0.1:0', '--token-file', join(dir, 'token'))
  }
  if (opts.test) args.push('--test')
  args.push(...(opts.args ?? []))
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr!.setEncoding('utf8')
  child.stderr!.on('data', (d: string) => {
    stderr += d
  })
  const exited = new Promise<number | null>((res) => child.on('exit', (code) => res(code)))
  const want = opts.tcp ? 2 : 1
  const lines: Array<string> = []
  const listening = new Promise<void>((res, rej) => {
    let out = ''
    child.stdout!.setEncoding('utf8')
    child.stdout!.on('data', (d: string) => {
      out += d
      const done = out.split('\n').filter((l) => l.startsWith('listening on '))
      if (done.length >= want) {
        lines.push(...done)
        res()
      }
    })
    child.on('exit', (code) => rej(new Error(`sbxdb serve exited with ${code} before listening: ${stderr}`)))
    child.on('error', rej)
  })
  try {
    await listening
  } catch (err) {
    child.kill('SIGKILL')
    rmSync(dir, { recursive: true, force: true })
    throw err
  }
  let url: string | undefined
  for (const l of lines) {
    const addr = l.slice('listening on '.length)
    if (addr.startsWith('tcp:')) url = `http://${addr.slice(4)}`
  }
  return {
    socketPath,
    url,
    token,
    dir,
    process: child,
    log: () => stderr,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
      const code = await exited
      rmSync(dir, { recursive: true, force: true })
      return code
    },
  }
}
