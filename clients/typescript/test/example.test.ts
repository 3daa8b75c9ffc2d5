// examples/tanstack-host runs against the run's server: it captures a
// workspace (uploading only the blobs the store lacks), restores the head
// into a new directory byte-exact, and refuses bad arguments before
// storing anything.

import { spawn, spawnSync } from 'node:child_process'
import { randomBytes, randomUUID } from 'node:crypto'
import { appendFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import type { Sbxdb } from '../src/index.js'
import { connectUnix } from './helpers.js'

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const host = join(pkg, 'examples', 'tanstack-host', 'host.mjs')

let sbx: Sbxdb
let tmp: string
beforeAll(() => {
  // The example imports the package by its name, which resolves to dist/.
  const r = spawnSync(process.execPath, [join(pkg, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json'], {
    cwd: pkg,
    encoding: 'utf8',
  })
  if (r.status !== 0) throw new Error(`the package does not build: ${r.stdout}${r.stderr}`)
  tmp = mkdtempSync(join(tmpdir(), 'sbxts-example-'))
})
beforeAll(async () => {
  sbx = await connectUnix()
})
afterAll(async () => {
  await sbx.close()
  rmSync(tmp, { recursive: true, force: true })
})

interface Run {
  code: number | null
  stdout: string
  stderr: string
}

function runHost(args: Array<string>): Promise<Run> {
  return new Promise((res, rej) => {
    const child = spawn(process.execPath, [host, ...args], { cwd: pkg, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d))
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d))
    child.on('error', rej)
    child.on('close', (code) => res({ code, stdout, stderr }))
  })
}

/** The counts the example prints about blobs. */
function blobCounts(out: string): { distinct: number; uploaded: number; present: number } {
  const m = /^blobs: (\d+) distinct, (\d+) uploaded, (\d+) already stored$/m.exec(out)
  if (m === null) throw new Error(`no blob counts in:\n${out}`)
  return { distinct: Number(m[1]), uploaded: Number(m[2]), present: Number(m[3]) }
}

const leftOut = (name: string): boolean => name === 'node_modules' || name === '.git' || name.startsWith('.env')

/** A tree's regular files (with their bytes) and empty directories, by relative path. */
function tree(root: string): Map<string, Buffer | 'dir'> {
  const out = new Map<string, Buffer | 'dir'>()
  const visit = (rel: string): void => {
    const names = readdirSync(join(root, rel)).filter((n) => !leftOut(n))
    if (names.length === 0 && rel !== '') out.set(rel, 'dir')
    for (const n of names) {
      const path = rel === '' ? n : `${rel}/${n}`
      if (statSync(join(root, path)).isDirectory()) visit(path)
      else out.set(path, readFileSync(join(root, path)))
    }
  }
  visit('')
  return out
}

/**
 * Asserts two trees hold the same paths, empty directories and bytes
 * (compared with Buffer.equals: a deep equality walks a 5 MiB buffer byte
 * by byte, slowly).
 */
function expectSameTree(got: Map<string, Buffer | 'dir'>, want: Map<string, Buffer | 'dir'>): void {
  expect([...got.keys()].sort()).toEqual([...want.keys()].sort())
  for (const [path, w] of want) {
    const g = got.get(path)!
    if (w === 'dir') expect(g, path).toBe('dir')
    else expect(g !== 'dir' && g.equals(w), `${path} differs`).toBe(true)
  }
}

/** A workspace of nested directories, an empty one, binary and duplicate files, and a 5 MiB file. */
function makeWorkspace(dir: string, salt: string): void {
  const put = (rel: string, bytes: Uint8Array | string): void => {
    mkdirSync(dirname(join(dir, rel)), { recursive: true })
    writeFileSync(join(dir, rel), bytes)
  }
  put('README.md', `# workspace ${salt}\n`)
  put('src/app/main.ts', `export const salt = '${salt}'\n`)
  put('src/app/deep/er/still/leaf.txt', `leaf ${salt}\n`)
  put('src/copy-of-main.ts', `export const salt = '${salt}'\n`)
  put('bin/all-bytes.bin', Buffer.concat([Buffer.from(salt), Buffer.from(Array.from({ length: 256 }, (_, i) => i))]))
  put('bin/random.bin', randomBytes(70_000))
  put('bin/five-mib.bin', Buffer.concat([Buffer.from(salt), randomBytes(5 << 20)]))
  put('données/é😀.txt', `unicode ${salt}\n`)
  put('empty-file', '')
  mkdirSync(join(dir, 'empty-dir'))
  mkdirSync(join(dir, 'nested/empty'), { recursive: true })
  // Left out of the snapshot: dependencies, git's directory, secrets.
  put('node_modules/dep/index.js', 'module.exports = 1\n')
  put('.git/HEAD', 'ref: refs/heads/main\n')
  put('.env', 'SECRET=1\n')
  put('config/.env.local', 'SECRET=2\n')
}

describe('examples/tanstack-host', () => {
  it('captures a workspace, restores it byte-exact, and uploads only what changed', { timeout: 120_000 }, async () => {
    const thread = `example-${randomUUID()}`
    const ws = join(tmp, 'ws')
    makeWorkspace(ws, thread)

    const first = await runHost(['--socket', inject('socketPath'), '--thread', thread, ws, join(tmp, 'restore-1')])
    expect(first.stderr).toBe('')
    expect(first.code).toBe(0)
    const want = tree(ws)
    expect(want.get('config')).toBe('dir') // only a secret inside: restored empty
    expectSameTree(tree(join(tmp, 'restore-1')), want)
    for (const hidden of ['node_modules', '.git', '.env', 'config/.env.local']) {
      expect(() => statSync(join(tmp, 'restore-1', hidden))).toThrow()
    }
    const files = [...want.values()].filter((v) => v !== 'dir').length
    const c1 = blobCounts(first.stdout)
    expect(c1.distinct).toBe(files - 1) // the copy of main.ts is one blob
    expect(c1.uploaded + c1.present).toBe(c1.distinct)
    expect(c1.uploaded).toBeGreaterThanOrEqual(c1.distinct - 1) // the empty file's blob may be stored already
    expect(first.stdout).toMatch(/parent none\)$/m)
    expect(first.stdout).toMatch(/: byte-exact$/m)

    // One file edited: one new blob; over TCP this time.
    appendFileSync(join(ws, 'bin', 'five-mib.bin'), 'one more line\n')
    const second = await runHost(['--url', inject('url'), '--token', inject('token'), '--thread', thread, ws, join(tmp, 'restore-2')])
    expect(second.stderr).toBe('')
    expect(second.code).toBe(0)
    expect(blobCounts(second.stdout)).toEqual({ distinct: c1.distinct, uploaded: 1, present: c1.distinct - 1 })
    expectSameTree(tree(join(tmp, 'restore-2')), tree(ws))

    const chain = await sbx.checkpoints.list(thread)
    expect(chain).toHaveLength(2)
    const [root, head] = chain[0]!.parentCheckpointId === null ? [chain[0]!, chain[1]!] : [chain[1]!, chain[0]!]
    expect(head.parentCheckpointId).toBe(root.id)
    expect(await sbx.checkpoints.getHead(thread)).toBe(head.id)
    expect(head.files.map((f) => f.path)).toEqual([...head.files.map((f) => f.path)].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b))))
  })

  it('refuses bad arguments and a restore directory in use before storing anything', async () => {
    const thread = `example-${randomUUID()}`
    const ws = join(tmp, 'ws-refused')
    makeWorkspace(ws, thread)
    const used = join(tmp, 'used')
    mkdirSync(used)
    writeFileSync(join(used, 'x'), 'x')
    const sock = inject('socketPath')
    const cases: Array<Array<string>> = [
      ['--socket', sock, ws, join(tmp, 'r-a')], // no thread
      ['--socket', sock, '--thread', thread, ws], // no restore directory
      ['--socket', sock, '--url', inject('url'), '--thread', thread, ws, join(tmp, 'r-b')], // two servers
      ['--thread', thread, ws, join(tmp, 'r-c')], // no server
      ['--socket', sock, '--thread', thread, '--bogus', ws, join(tmp, 'r-d')],
      ['--socket', sock, '--thread', thread, ws, used],
    ]
    for (const args of cases) {
      const r = await runHost(args)
      expect(r.code, args.join(' ')).toBe(2)
      expect(r.stderr).toMatch(/usage: host\.mjs/)
      expect(r.stdout).toBe('')
    }
    expect(await sbx.checkpoints.getHead(thread)).toBeNull()
    expect(readdirSync(used)).toEqual(['x'])
  })

  it('fails with a non-zero status when the server is not there', async () => {
    const r = await runHost(['--socket', join(tmp, 'no-such.sock'), '--thread', 't', join(tmp, 'ws'), join(tmp, 'r-none')])
    expect(r.code).toBe(2)
    expect(r.stderr).toMatch(/SbxdbTransportError: .*no sbxdb server socket/)
  })
})
