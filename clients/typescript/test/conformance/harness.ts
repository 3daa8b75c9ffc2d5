// sbxdb's side of the conformance suites: a client per file (over the
// unix socket or TCP), a fresh test store per case that is closed when the
// case ends, a clock the case moves, and the blob calls of the sweep
// cases.

import { createHash } from 'node:crypto'
import { afterAll, beforeAll, expect, onTestFinished } from 'vitest'
import type { BlobRecord, Sbxdb, SbxdbTestStores } from '../../src/index.js'
import type { SandboxCheckpointStoreOptions } from '../../src/types.js'

/**
 * Connects with `open` before the file's cases and closes the client after
 * them; the returned function gives the client to a case.
 */
export function useClient(open: () => Promise<Sbxdb>): () => Sbxdb {
  let client: Sbxdb | undefined
  beforeAll(async () => {
    client = await open()
  })
  afterAll(async () => {
    await client?.close()
  })
  return () => {
    if (client === undefined) throw new Error('the client is not connected yet')
    return client
  }
}

/** A fresh test store on `sbx`, deleted when the running case ends. */
export async function freshStores(sbx: Sbxdb, options?: SandboxCheckpointStoreOptions): Promise<SbxdbTestStores> {
  const stores = await sbx.testStore(options)
  onTestFinished(() => stores.close())
  return stores
}

/** A clock a case moves; `read` is what a test store's `now` calls. */
export interface TestClock {
  now: number
  read: () => number
}

/** A clock reading `start`. */
export function testClock(start = 1000): TestClock {
  const clock: TestClock = { now: start, read: () => clock.now }
  return clock
}

/**
 * A fresh test store on a clock starting at 1000 with the conformance
 * lease timings (100 ms, renewed after 25 ms), as the Go kit's cases run.
 */
export async function clockedStores(sbx: Sbxdb): Promise<{ stores: SbxdbTestStores; clock: TestClock }> {
  const clock = testClock()
  const stores = await freshStores(sbx, { now: clock.read, leaseDurationMs: 100, renewAfterMs: 25 })
  return { stores, clock }
}

/** The content-addressed key of `bytes` under `prefix`. */
export function contentKey(prefix: string, bytes: Uint8Array): string {
  return prefix + createHash('sha256').update(bytes).digest('hex')
}

/** The blob calls the sweep cases need, on one test store. */
export interface SweepBlobs {
  /** A put of `bytes` under `key`; a plain object's type in `contentType`. */
  put: (key: string, bytes: Uint8Array, contentType?: string) => Promise<BlobRecord>
  /** Every stored key under `prefix`, in the server's order, through every page. */
  keys: (prefix?: string) => Promise<Array<string>>
}

/** The blob calls of `stores`, through the package's blob store. */
export function blobsOf(stores: SbxdbTestStores): SweepBlobs {
  return {
    put: (key, bytes, contentType) => stores.blobs.put(key, bytes, contentType === undefined ? {} : { contentType }),
    async keys(prefix = '') {
      const keys: Array<string> = []
      let cursor: string | undefined
      do {
        const page = await stores.blobs.list(cursor === undefined ? { prefix } : { prefix, cursor })
        keys.push(...page.objects.map((o) => o.key))
        cursor = page.truncated ? page.cursor : undefined
      } while (cursor !== undefined)
      return keys
    },
  }
}

/** Expects `op` to reject with an error that is not one of the contract's, and returns it. */
export async function expectPlainError(op: () => Promise<unknown>): Promise<Error> {
  let error: unknown
  let resolved = false
  try {
    await op()
    resolved = true
  } catch (err) {
    error = err
  }
  expect(resolved, 'the call resolved; want a rejection').toBe(false)
  expect(error).toBeInstanceOf(Error)
  return error as Error
}
