// sbx.testStore(): a fresh store inside a `sbxdb serve --test` server,
// isolated from every other store, whose clock is the caller's now() and
// whose lease timings are the caller's; close() deletes it. A server
// without --test refuses, and options TanStack's constructor refuses are a
// plain Error before any request.

import http from 'node:http'
import { afterAll, beforeAll, describe, expect, inject, test } from 'vitest'
import {
  SandboxCheckpointError,
  SandboxCheckpointWriterConflictError,
  SandboxCheckpointWriterLostError,
  SbxdbError,
  SbxdbTransportError,
  connect,
} from '../src/index.js'
import type { Sbxdb, SbxdbStores, SbxdbTestStores } from '../src/index.js'
import type { SandboxCheckpoint, SandboxCheckpointStoreOptions } from '../src/types.js'
import { connectUnix } from './helpers.js'
import { startServer } from './server.js'

let sbx: Sbxdb

beforeAll(async () => {
  sbx = await connectUnix()
})
afterAll(async () => {
  await sbx.close()
})

/** A unique name, so that the run's main store never sees one twice. */
function unique(what: string): string {
  return `testmode-${what}-${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2)}`
}

function root(id: string, threadId: string, createdAt = 1): SandboxCheckpoint {
  return {
    id,
    threadId,
    parentCheckpointId: null,
    createdAt,
    reason: 'automatic',
    files: [],
    conversation: [],
    artifacts: [],
  }
}

/** Writes a checkpoint, a transcript, an instance and an artifact record under `tag`. */
async function fill(s: SbxdbStores, thread: string, tag: string): Promise<void> {
  const lease = await s.checkpoints.acquireWriter(thread)
  await s.checkpoints.append({ checkpoint: root(`${tag}-cp`, thread), expectedHeadId: null, writer: lease })
  await lease.release()
  await s.messages.saveThread(thread, [{ role: 'user', content: tag }])
  await s.instances.upsert({ key: thread, provider: tag, providerSandboxId: tag, threadId: thread, updatedAt: 1 })
  await s.artifacts.save({
    artifactId: `${tag}-art`,
    runId: thread,
    threadId: thread,
    name: tag,
    mimeType: 'text/plain',
    size: 1,
    createdAt: 1,
  })
}

/** Whether `s` holds anything of `fill(s, thread, tag)`. */
async function holds(s: SbxdbStores, thread: string, tag: string): Promise<Record<string, unknown>> {
  return {
    head: await s.checkpoints.getHead(thread),
    checkpoint: await s.checkpoints.get(`${tag}-cp`),
    list: await s.checkpoints.list(thread),
    messages: await s.messages.loadThread(thread),
    instance: await s.instances.get(thread),
    artifact: await s.artifacts.get(`${tag}-art`),
    artifacts: await s.artifacts.listForThread(thread),
  }
}

const nothing = {
  head: null,
  checkpoint: null,
  list: [],
  messages: [],
  instance: null,
  artifact: null,
  artifacts: [],
}

describe('isolation', () => {
  test('two test stores and the main store see none of each other’s writes', async () => {
    const a = await sbx.testStore()
    const b = await sbx.testStore()
    try {
      expect(a.id).not.toBe(b.id)
      const thread = unique('thread')
      await fill(a, thread, 'A')
      expect(await holds(a, thread, 'A')).toMatchObject({ head: 'A-cp', messages: [{ role: 'user', content: 'A' }] })
      expect(await holds(b, thread, 'A')).toEqual(nothing)
      expect(await holds(sbx, thread, 'A')).toEqual(nothing)

      // The same thread in b: its own lease (fence 1 again), its own chain.
      const lease = await b.checkpoints.acquireWriter(thread)
      expect(lease.fence).toBe(1)
      await lease.release()
      await fill(b, thread, 'B')
      expect(await holds(b, thread, 'B')).toMatchObject({ head: 'B-cp' })
      // a's copy of the thread is still a's own.
      expect(await a.checkpoints.get('B-cp')).toBeNull()
      expect(await a.artifacts.get('B-art')).toBeNull()
      expect(await holds(a, thread, 'A')).toMatchObject({
        head: 'A-cp',
        messages: [{ role: 'user', content: 'A' }],
        instance: { provider: 'A' },
        artifacts: [{ artifactId: 'A-art' }],
      })

      // The main store's writes stay out of the test stores.
      const mainThread = unique('main')
      await fill(sbx, mainThread, unique('M'))
      expect(await a.messages.loadThread(mainThread)).toEqual([])
      expect(await b.checkpoints.getHead(mainThread)).toBeNull()
      expect(await a.checkpoints.listBlobReferences()).toEqual([])
    } finally {
      await a.close()
      await b.close()
    }
  })
})

describe('the clock is now()', () => {
  test('lease 100/25: acquire at 1000 expires at 1100; at 1099 a second acquire conflicts; at 1100 it takes over with fence 2', async () => {
    let clock = 1000
    const s = await sbx.testStore({ now: () => clock, leaseDurationMs: 100, renewAfterMs: 25 })
    try {
      const first = await s.checkpoints.acquireWriter('t')
      expect(first).toMatchObject({ threadId: 't', fence: 1, expiresAt: 1100, renewAfterMs: 25 })

      clock = 1099
      const conflict = await s.checkpoints.acquireWriter('t').then(() => expect.fail('acquired a held lease'), (e: unknown) => e)
      expect(conflict).toBeInstanceOf(SandboxCheckpointWriterConflictError)
      expect((conflict as SandboxCheckpointError).code).toBe('SANDBOX_SNAPSHOT_WRITER_CONFLICT')
      // The holder can still write at 1099.
      await s.checkpoints.append({ checkpoint: root('c1', 't'), expectedHeadId: null, writer: first })

      clock = 1100
      const second = await s.checkpoints.acquireWriter('t')
      expect(second).toMatchObject({ threadId: 't', fence: 2, expiresAt: 1200 })
      expect(second.ownerToken).not.toBe(first.ownerToken)

      // The old lease is gone: its writes and renewal are WRITER_LOST.
      const lost = await s.checkpoints
        .append({ checkpoint: { ...root('c2', 't'), parentCheckpointId: 'c1' }, expectedHeadId: 'c1', writer: first })
        .then(() => expect.fail('a replaced writer appended'), (e: unknown) => e)
      expect(lost).toBeInstanceOf(SandboxCheckpointWriterLostError)
      await expect(first.renew()).rejects.toBeInstanceOf(SandboxCheckpointWriterLostError)
      expect(await s.checkpoints.getHead('t')).toBe('c1')

      // Renewal counts from now(), not from the old expiry.
      clock = 1101
      expect(await second.renew()).toEqual({ expiresAt: 1201 })
      expect(second.expiresAt).toBe(1201)
      clock = 1200
      await expect(s.checkpoints.acquireWriter('t')).rejects.toBeInstanceOf(SandboxCheckpointWriterConflictError)
    } finally {
      await s.close()
    }
  })

  test('now() is read at every request', async () => {
    let clock = 5000
    let reads = 0
    const s = await sbx.testStore({
      now: () => {
        reads++
        return clock
      },
      leaseDurationMs: 100,
      renewAfterMs: 25,
    })
    try {
      const before = reads
      const lease = await s.checkpoints.acquireWriter('t')
      expect(reads).toBeGreaterThan(before)
      expect(lease.expiresAt).toBe(5100)
      clock = -50 // any safe integer, negative too
      expect(await lease.renew()).toEqual({ expiresAt: 50 })
    } finally {
      await s.close()
    }
  })

  test('without now() the store reads the wall clock; the default lease is 120000/45000', async () => {
    const s = await sbx.testStore()
    try {
      const before = Date.now()
      const lease = await s.checkpoints.acquireWriter('t')
      const after = Date.now()
      expect(lease.renewAfterMs).toBe(45_000)
      expect(lease.expiresAt).toBeGreaterThanOrEqual(before + 120_000)
      expect(lease.expiresAt).toBeLessThanOrEqual(after + 120_000)
    } finally {
      await s.close()
    }
  })
})

describe('close', () => {
  test('close() deletes the store: a later call is SBXDB_NO_TEST_STORE, blob reads too; close again resolves', async () => {
    const s = await sbx.testStore()
    await s.messages.saveThread('t', [{ role: 'user', content: 'x' }])
    await s.close()
    const err = await s.messages.loadThread('t').then(() => expect.fail('a closed store answered'), (e: unknown) => e)
    expect(err).toBeInstanceOf(SbxdbError)
    expect(err).not.toBeInstanceOf(SandboxCheckpointError)
    expect(err).toMatchObject({ code: 'SBXDB_NO_TEST_STORE', status: 404 })
    expect((err as SbxdbError).message).toContain(s.id)
    await expect(s.checkpoints.getHead('t')).rejects.toMatchObject({ code: 'SBXDB_NO_TEST_STORE' })
    // A blob read of a deleted store is not "no such key": a missing store
    // is never taken for an empty one.
    const key = 'sandbox-files/sha256/' + '0'.repeat(64)
    await expect(s.blobs.head(key)).rejects.toMatchObject({ code: 'SBXDB_NO_TEST_STORE' })
    await expect(s.blobs.get(key)).rejects.toMatchObject({ code: 'SBXDB_NO_TEST_STORE' })
    await expect(s.blobs.delete(key)).rejects.toMatchObject({ code: 'SBXDB_NO_TEST_STORE' })
    await expect(s.close()).resolves.toBeUndefined()
    // The client itself still works.
    expect(await sbx.messages.loadThread(unique('after-close'))).toEqual([])
  })

  test('closing the client deletes the test stores it made', async () => {
    const other = await connectUnix()
    const s = await other.testStore()
    await s.messages.saveThread('t', [{ role: 'user', content: 'x' }])
    expect(await rawStatus(s.id)).toBe(200)
    await other.close()
    expect(await rawStatus(s.id)).toBe(404)
  })
})

describe('refusals', () => {
  test('a server without --test refuses testStore() with SBXDB_FORBIDDEN and its store is untouched', async () => {
    const plain = await startServer(inject('sbxdbBin'), { test: false })
    const client = await connect({ socketPath: plain.socketPath })
    try {
      const err = await client.testStore().then(() => expect.fail('a test store without --test'), (e: unknown) => e)
      expect(err).toBeInstanceOf(SbxdbError)
      expect(err).toMatchObject({ code: 'SBXDB_FORBIDDEN', status: 403 })
      await expect(client.testStore({ now: () => 1, leaseDurationMs: 100, renewAfterMs: 25 })).rejects.toMatchObject({
        code: 'SBXDB_FORBIDDEN',
      })
      expect(await client.messages.loadThread('t')).toEqual([])
      expect(await client.checkpoints.listBlobReferences()).toEqual([])
    } finally {
      await client.close()
      expect(await plain.stop()).toBe(0)
    }
  })

  const invalid: Array<[string, SandboxCheckpointStoreOptions]> = [
    ['leaseDurationMs 0', { leaseDurationMs: 0 }],
    ['leaseDurationMs NaN', { leaseDurationMs: Number.NaN }],
    ['leaseDurationMs negative', { leaseDurationMs: -100, renewAfterMs: 25 }],
    ['leaseDurationMs Infinity', { leaseDurationMs: Number.POSITIVE_INFINITY }],
    ['renewAfterMs 0', { renewAfterMs: 0 }],
    ['renewAfterMs NaN', { renewAfterMs: Number.NaN }],
    ['renewAfterMs equal to the lease', { leaseDurationMs: 100, renewAfterMs: 100 }],
    ['renewAfterMs above the lease', { leaseDurationMs: 100, renewAfterMs: 101 }],
    ['a lease below the default renewAfterMs', { leaseDurationMs: 30_000 }],
    ['a fractional lease', { leaseDurationMs: 100.5, renewAfterMs: 25 }],
    ['a string lease', { leaseDurationMs: '100' as unknown as number, renewAfterMs: 25 }],
    ['now not a function', { now: 1000 as unknown as () => number }],
  ]

  test.each(invalid)('%s is a plain Error before any request', async (_, options) => {
    // A closed client fails any request with a transport error, so a plain
    // Error here was thrown before the request.
    const closed = await connectUnix()
    await closed.close()
    const err = await closed.testStore(options).then(() => expect.fail('accepted'), (e: unknown) => e)
    expect(err).toBeInstanceOf(Error)
    expect(Object.getPrototypeOf(err)).toBe(Error.prototype)
    expect(err).not.toBeInstanceOf(SbxdbTransportError)
    expect(err).not.toBeInstanceOf(SandboxCheckpointError)
    // An open client refuses it the same way.
    await expect(sbx.testStore(options)).rejects.toThrow(Error)
  })

  test('valid options at the edges are accepted', async () => {
    const stores: Array<SbxdbTestStores> = []
    try {
      stores.push(await sbx.testStore({ leaseDurationMs: 2, renewAfterMs: 1 }))
      stores.push(await sbx.testStore({ leaseDurationMs: 45_001 }))
      stores.push(await sbx.testStore({ renewAfterMs: 119_999 }))
      const lease = await stores[0]!.checkpoints.acquireWriter('t')
      expect(lease.renewAfterMs).toBe(1)
    } finally {
      for (const s of stores) await s.close()
    }
  })
})

/** The status of a head read on test store `id` of the run's server, sent by hand. */
function rawStatus(id: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ threadId: 't' })
    const req = http.request(
      {
        socketPath: inject('socketPath'),
        method: 'POST',
        path: '/v1/checkpoints/head',
        headers: {
          'content-type': 'application/json',
          'content-length': String(Buffer.byteLength(body)),
          'x-sbxdb-test-store': id,
        },
      },
      (res) => {
        res.resume()
        res.on('end', () => resolve(res.statusCode ?? 0))
      },
    )
    req.on('error', reject)
    req.end(body)
  })
}
