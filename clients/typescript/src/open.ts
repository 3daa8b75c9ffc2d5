// open({ dir }): the stores of the sbxdb store in `dir` without a daemon
// to manage. It connects to the server of `dir` (dir/sbxdb.sock) when one
// answers for that store, and otherwise starts one from the sbxdb binary
// of this platform's package (@sbxdb/server-<platform>-<arch>, an optional
// dependency) or $SBXDB_BINARY: detached, shared by every process that
// opens the same `dir`, and exiting once no client has been connected for
// `idleExitMs` (sbxdb serve --idle-exit). Two processes that start a
// server at once both end up on the one that won: the other's serve finds
// the store busy or the socket live and exits, and its opener connects.

import { spawn } from 'node:child_process'
import { closeSync, mkdirSync, openSync, readFileSync, realpathSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { createHash } from 'node:crypto'
import { connectWith } from './connect.js'
import type { Sbxdb } from './connect.js'
import { SbxdbTransportError } from './errors.js'

export interface OpenOptions {
  /** The store's directory; created (with the store) when missing. */
  dir: string
  /**
   * The sbxdb binary to start when no server runs. Default: $SBXDB_BINARY,
   * else the binary of the installed @sbxdb/server-<platform>-<arch>.
   */
  binary?: string
  /** How long a server this call starts stays up with no client connected. Default 30 000 ms. */
  idleExitMs?: number
  /** How long open waits for a server to answer. Default 30 000 ms. */
  startTimeoutMs?: number
  /** The client's idle timeout per request (ConnectOptions.timeoutMs). */
  timeoutMs?: number
}

/** The socket a store's server listens on (sbxdb serve's default). */
const socketName = 'sbxdb.sock'

/** The platforms and archs a server package exists for (scripts/build-platform.mjs). */
const platforms = new Set(['linux', 'darwin'])
const archs = new Set(['x64', 'arm64'])

/** The name of this platform's server package. */
export function platformPackage(platform: string = process.platform, arch: string = process.arch): string {
  return `@sbxdb/server-${platform}-${arch}`
}

/**
 * The sbxdb binary open starts: `given`, else $SBXDB_BINARY, else the one
 * in this platform's package. Throws an Error saying what to install when
 * there is none.
 */
export function serverBinary(given?: string): string {
  if (given !== undefined && given !== '') return given
  const env = process.env.SBXDB_BINARY
  if (env !== undefined && env !== '') return env
  const pkg = platformPackage()
  if (!platforms.has(process.platform) || !archs.has(process.arch)) {
    throw new Error(`@sbxdb/tanstack-ai: no sbxdb server package for ${process.platform}-${process.arch}; ` +
      'build sbxdb (go build ./cmd/sbxdb) and set SBXDB_BINARY, or run `sbxdb serve` and use connect()')
  }
  try {
    const manifest = createRequire(import.meta.url).resolve(`${pkg}/package.json`)
    return join(dirname(manifest), 'bin', 'sbxdb')
  } catch {
    throw new Error(`@sbxdb/tanstack-ai: ${pkg} is not installed (an optional dependency; ` +
      'npm skips it with --no-optional or on another platform); install it, or set SBXDB_BINARY to an sbxdb binary')
  }
}

/** Whether `err` says no server is there (no socket, or nothing accepting on it). */
function noServer(err: unknown): boolean {
  return err instanceof SbxdbTransportError && (err.failure === 'socket-missing' || err.failure === 'connection-refused')
}

const sleep = (ms: number): Promise<void> => new Promise((res) => setTimeout(res, ms))

/** A started serve that has exited, and how. */
interface Exit {
  code: number | null
  log: string
}

/**
 * Connects to the server of the store in `options.dir`, starting one when
 * none runs; returns what connect() returns. Closing the client does not
 * stop the server: it exits `idleExitMs` after its last client is gone.
 */
export async function open(options: OpenOptions): Promise<Sbxdb> {
  if (typeof options?.dir !== 'string' || options.dir === '') throw new TypeError('open: dir must be a directory path')
  const dir = resolve(options.dir)
  const idleExitMs = options.idleExitMs ?? 30_000
  const startTimeoutMs = options.startTimeoutMs ?? 30_000
  if (!Number.isSafeInteger(idleExitMs) || idleExitMs < 1) throw new TypeError('open: idleExitMs must be a whole number of ms >= 1')
  mkdirSync(dir, { recursive: true })
  const real = realpathSync(dir)
  const socketPath = join(dir, socketName)
  const connectOptions = options.timeoutMs === undefined ? { socketPath } : { socketPath, timeoutMs: options.timeoutMs }
  // Well inside the server's idle wait, and the pool's 60 s idle close.
  const presenceMs = Math.max(50, Math.min(Math.floor(idleExitMs / 3), 20_000))
  const deadline = Date.now() + startTimeoutMs
  let started: Promise<Exit> | undefined
  let exited: Exit | undefined
  let lastError: unknown
  for (let attempt = 0; ; attempt++) {
    try {
      const sbx = await connectWith(connectOptions, { presenceMs })
      let store = sbx.server.store
      try {
        store = realpathSync(store)
      } catch {
        // a store path this machine cannot resolve is compared as it is
      }
      if (store !== real) {
        await sbx.close()
        throw new Error(`open: the server on ${socketPath} serves the store ${sbx.server.store}, not ${dir}`)
      }
      return sbx
    } catch (err) {
      if (!noServer(err)) throw err
      lastError = err
    }
    if (started === undefined) {
      started = startServer(serverBinary(options.binary), dir, idleExitMs)
      started.then((e) => {
        exited = e
      }, (e: unknown) => {
        exited = { code: null, log: String(e) }
      })
    } else if (exited !== undefined) {
      // Ours exited. The store busy (exit 11) or the socket live (another
      // opener's server, starting): connect to that one. Anything else is
      // a failure to report.
      const busy = exited.code === 11 || /another server is listening on the socket/.test(exited.log)
      if (!busy) {
        throw new Error(`open: sbxdb serve --db ${dir} exited with ${exited.code}: ${exited.log.trim().slice(-2000)}`)
      }
    }
    if (Date.now() > deadline) {
      throw new Error(`open: no sbxdb server answered on ${socketPath} within ${startTimeoutMs} ms` +
        (exited === undefined ? '' : `; sbxdb serve exited with ${exited.code}: ${exited.log.trim().slice(-2000)}`), { cause: lastError })
    }
    await sleep(Math.min(25 * (attempt + 1), 200))
  }
}

/**
 * Starts `bin serve --db dir --idle-exit MS` detached from this process
 * (it outlives it), its output in a log file under the temporary
 * directory; resolves when it exits, with its log.
 */
function startServer(bin: string, dir: string, idleExitMs: number): Promise<Exit> {
  const logPath = join(tmpdir(), `sbxdb-serve-${createHash('sha256').update(dir).digest('hex').slice(0, 16)}.log`)
  const fd = openSync(logPath, 'a')
  try {
    const child = spawn(bin, ['serve', '--db', dir, '--idle-exit', `${idleExitMs}ms`], {
      detached: true,
      stdio: ['ignore', 'ignore', fd],
    })
    const done = new Promise<Exit>((res) => {
      const log = (): string => {
        try {
          return readFileSync(logPath, 'utf8')
        } catch {
          return ''
        }
      }
      child.on('error', (err) => res({ code: null, log: `cannot run ${bin}: ${err.message}` }))
      child.on('exit', (code) => res({ code, log: log() }))
    })
    child.unref()
    return done
  } finally {
    closeSync(fd)
  }
}
