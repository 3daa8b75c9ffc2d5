// connect(): a client of one sbxdb server, and its stores; testStore():
// the same stores on a fresh, isolated store of a server started with
// `sbxdb serve --test`, whose clock the caller drives.

import { createArtifactStore } from './artifacts.js'
import { createBlobStore } from './blobs.js'
import { createCheckpointStore } from './checkpoints.js'
import { SbxdbTransportError } from './errors.js'
import { createInstanceStore } from './instances.js'
import { createMessageStore } from './messages.js'
import { Transport } from './transport.js'
import type { ConnectOptions } from './transport.js'
import type { SandboxCheckpointStoreOptions, SbxdbStores } from './types.js'

/** What GET /v1/health answers. */
export interface ServerInfo {
  /** The server's version. */
  version: string
  /** The store's format number. */
  format: number
  /** The store's directory on the server's machine. */
  store: string
}

/** The stores of a test store, and the call that discards it. */
export interface SbxdbTestStores extends SbxdbStores {
  /** The test store's id on its server. */
  readonly id: string
  /** Deletes the test store and everything in it. */
  close: () => Promise<void>
}

/** A client of one sbxdb server. */
export interface Sbxdb extends SbxdbStores {
  /** The server's health answer, read by connect. */
  readonly server: ServerInfo
  /**
   * The stores on a fresh, isolated store inside a server started with
   * `sbxdb serve --test`; its clock is `now()`, sent with each request. The
   * options are checked as TanStack's store constructor checks them (a
   * plain Error). A server without `--test` refuses (SbxdbError
   * `SBXDB_FORBIDDEN`).
   */
  testStore: (options?: SandboxCheckpointStoreOptions) => Promise<SbxdbTestStores>
  /**
   * Ends the client's requests still running (they fail with a `closed`
   * SbxdbTransportError), deletes the test stores it made, and closes its
   * connections.
   */
  close: () => Promise<void>
}

/** The stores on the server (or test store) behind `t`. */
function storesOn(t: Transport): SbxdbStores {
  const messages = createMessageStore(t)
  const artifacts = createArtifactStore(t)
  const blobs = createBlobStore(t)
  return {
    checkpoints: createCheckpointStore(t),
    messages,
    instances: createInstanceStore(t),
    blobs,
    artifacts,
    persistence: { stores: { messages, artifacts, blobs } },
  }
}

const defaultLeaseDurationMs = 120_000
const defaultRenewAfterMs = 45_000

/** Throws a plain Error for options TanStack's constructor refuses. */
function checkStoreOptions(options: SandboxCheckpointStoreOptions): void {
  const lease = options.leaseDurationMs ?? defaultLeaseDurationMs
  const renew = options.renewAfterMs ?? defaultRenewAfterMs
  if (typeof lease !== 'number' || !Number.isFinite(lease) || lease <= 0) {
    throw new Error('leaseDurationMs must be finite and positive')
  }
  if (typeof renew !== 'number' || !Number.isFinite(renew) || renew <= 0 || renew >= lease) {
    throw new Error('renewAfterMs must be finite, positive, and less than leaseDurationMs')
  }
  if (!Number.isSafeInteger(lease) || !Number.isSafeInteger(renew)) {
    throw new Error('leaseDurationMs and renewAfterMs must be whole milliseconds')
  }
  if (options.now !== undefined && typeof options.now !== 'function') {
    throw new Error('now must be a function returning epoch milliseconds')
  }
}

/**
 * Connects to the sbxdb server at `options.socketPath` (a unix socket) or
 * `options.url` (TCP, with `options.token`), and checks that it answers as
 * an sbxdb server. Fails with SbxdbTransportError when it cannot.
 */
export function connect(options: ConnectOptions): Promise<Sbxdb> {
  return connectWith(options, {})
}

/** What open() adds to a connection. */
export interface ConnectExtras {
  /**
   * Sends GET /v1/health this often while the client is open (a timer that
   * does not keep the process alive), so that its kept-alive connection
   * stays open and a server started with --idle-exit sees a client.
   */
  presenceMs?: number
}

/** connect, with the additions of `extras`. */
export async function connectWith(options: ConnectOptions, extras: ConnectExtras): Promise<Sbxdb> {
  const t = Transport.open(options)
  let health: { ok?: unknown; version?: unknown; format?: unknown; store?: unknown }
  try {
    health = await t.call('GET', '/v1/health')
  } catch (err) {
    t.close()
    throw err
  }
  if (health.ok !== true) {
    t.close()
    throw new SbxdbTransportError('bad-response', t.address, `${t.address} does not answer as an sbxdb server`)
  }
  const server: ServerInfo = {
    version: String(health.version),
    format: Number(health.format),
    store: String(health.store),
  }
  const tests = new Set<SbxdbTestStores>()
  let presence: NodeJS.Timeout | undefined
  if (extras.presenceMs !== undefined) {
    presence = setInterval(() => {
      t.call('GET', '/v1/health').catch(() => undefined)
    }, extras.presenceMs)
    presence.unref()
  }
  return {
    ...storesOn(t),
    server,
    async testStore(storeOptions: SandboxCheckpointStoreOptions = {}): Promise<SbxdbTestStores> {
      checkStoreOptions(storeOptions)
      const { now } = storeOptions
      const { store: id } = await t.call<{ store: string }>('POST', '/v1/test/stores', {
        leaseDurationMs: storeOptions.leaseDurationMs ?? null,
        renewAfterMs: storeOptions.renewAfterMs ?? null,
      })
      const scoped = t.withHeaders(() => {
        const h: Record<string, string> = { 'x-sbxdb-test-store': id }
        if (now !== undefined) h['x-sbxdb-now'] = String(Math.floor(now()))
        return h
      })
      let closed = false
      const stores: SbxdbTestStores = {
        ...storesOn(scoped),
        id,
        async close() {
          if (closed) return
          // The server deletes a store once its requests have ended: end
          // this store's exchanges first (a blob body nobody reads would
          // hold the delete until the idle timeout).
          scoped.abort()
          const ex = await t.exchange('DELETE', `/v1/test/stores/${encodeURIComponent(id)}`)
          if (ex.status >= 300) throw await t.errorOf(ex, 'DELETE test store')
          ex.body.resume()
          closed = true
          tests.delete(stores)
        },
      }
      tests.add(stores)
      return stores
    },
    async close() {
      clearInterval(presence)
      const pending = [...tests].map((s) => s.close().catch(() => undefined))
      await Promise.all(pending)
      t.close()
    },
  }
}
