// The artifact record store (sbx.artifacts): insert or overwrite by
// artifactId, lists of a run or a thread ordered by createdAt then
// artifactId in UTF-8 byte order, deletes that never fail on a missing
// record, and bad records refused with the contract's codes, changing
// nothing.

import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from 'vitest'
import {
  SandboxCheckpointError,
  SandboxCheckpointInvalidEntryError,
  SandboxCheckpointInvalidIdError,
} from '../src/index.js'
import type { ArtifactRecord, Sbxdb, SbxdbTestStores } from '../src/index.js'
import { connectUnix, freshStore } from './helpers.js'

let sbx: Sbxdb
let store: SbxdbTestStores

beforeAll(async () => {
  sbx = await connectUnix()
})
afterAll(async () => {
  await sbx.close()
})
beforeEach(async () => {
  store = await freshStore(sbx)
})
afterEach(async () => {
  await store.close()
})

const artifactKey = `sandbox-artifacts/sha256/${'ab'.repeat(32)}`

/** A valid record with no optional members, with `over` applied. */
function record(over: Partial<ArtifactRecord> = {}): ArtifactRecord {
  return {
    artifactId: 'a-1',
    runId: 'run-1',
    threadId: 'thread-1',
    name: 'report.pdf',
    mimeType: 'application/pdf',
    size: 1234,
    createdAt: 1000,
    ...over,
  }
}

const ids = (records: ReadonlyArray<ArtifactRecord>): Array<string> => records.map((r) => r.artifactId)

describe('save and get', () => {
  test('a record round-trips; absent optional members stay absent', async () => {
    const plain = record()
    await store.artifacts.save(plain)
    const got = await store.artifacts.get('a-1')
    expect(got).toStrictEqual(plain)
    expect(got).not.toHaveProperty('blobKey')
    expect(got).not.toHaveProperty('sourceUrl')
  })

  test('a record with every member round-trips', async () => {
    const full = record({
      artifactId: 'a-2',
      blobKey: artifactKey,
      sourceUrl: 'https://example.com/r?x=1#é',
      name: 'naïve 😀.txt',
      mimeType: 'text/plain; charset=utf-8',
      size: Number.MAX_SAFE_INTEGER,
      createdAt: -Number.MAX_SAFE_INTEGER,
    })
    await store.artifacts.save(full)
    expect(await store.artifacts.get('a-2')).toStrictEqual(full)
  })

  test('a plain object key is a valid blobKey', async () => {
    const r = record({ blobKey: 'reports/2026/summary.pdf' })
    await store.artifacts.save(r)
    expect(await store.artifacts.get('a-1')).toStrictEqual(r)
  })

  test('get of an unknown id is null', async () => {
    expect(await store.artifacts.get('nope')).toBeNull()
  })

  test('save overwrites by artifactId, moving the record between runs and threads', async () => {
    await store.artifacts.save(record())
    const moved = record({ runId: 'run-2', threadId: 'thread-2', name: 'v2', size: 1, blobKey: artifactKey })
    await store.artifacts.save(moved)
    expect(await store.artifacts.get('a-1')).toStrictEqual(moved)
    expect(await store.artifacts.list('run-1')).toEqual([])
    expect(await store.artifacts.listForThread('thread-1')).toEqual([])
    expect(await store.artifacts.list('run-2')).toStrictEqual([moved])
    expect(await store.artifacts.listForThread('thread-2')).toStrictEqual([moved])
    // Overwriting without the optional members clears them.
    await store.artifacts.save(record())
    expect(await store.artifacts.get('a-1')).not.toHaveProperty('blobKey')
  })
})

describe('list and listForThread', () => {
  test('[] when there are none', async () => {
    expect(await store.artifacts.list('no-run')).toEqual([])
    expect(await store.artifacts.listForThread('no-thread')).toEqual([])
  })

  test('ordered by createdAt, then artifactId in UTF-8 byte order', async () => {
    // U+FF61 sorts before U+1F600 in UTF-8 but after it in UTF-16, so
    // this order is not JavaScript's string order.
    const sameTime = ['😀', 'é', '\uff61', 'a', 'B']
    for (const artifactId of sameTime) await store.artifacts.save(record({ artifactId, createdAt: 50 }))
    await store.artifacts.save(record({ artifactId: 'z-early', createdAt: 10 }))
    await store.artifacts.save(record({ artifactId: 'A-late', createdAt: 90 }))
    await store.artifacts.save(record({ artifactId: 'neg', createdAt: -5 }))
    const want = ['neg', 'z-early', 'B', 'a', 'é', '\uff61', '😀', 'A-late']
    expect(ids(await store.artifacts.list('run-1'))).toEqual(want)
    expect(ids(await store.artifacts.listForThread('thread-1'))).toEqual(want)
    expect([...sameTime].sort()).not.toEqual(['B', 'a', 'é', '\uff61', '😀'])
  })

  test('a run and a thread select their own records', async () => {
    await store.artifacts.save(record({ artifactId: 'r1t1', runId: 'r1', threadId: 't1', createdAt: 1 }))
    await store.artifacts.save(record({ artifactId: 'r2t1', runId: 'r2', threadId: 't1', createdAt: 2 }))
    await store.artifacts.save(record({ artifactId: 'r3t2', runId: 'r3', threadId: 't2', createdAt: 3 }))
    expect(ids(await store.artifacts.list('r1'))).toEqual(['r1t1'])
    expect(ids(await store.artifacts.list('r2'))).toEqual(['r2t1'])
    expect(ids(await store.artifacts.listForThread('t1'))).toEqual(['r1t1', 'r2t1'])
    expect(ids(await store.artifacts.listForThread('t2'))).toEqual(['r3t2'])
    // A run id is not a thread id, nor the other way round.
    expect(await store.artifacts.list('t1')).toEqual([])
    expect(await store.artifacts.listForThread('r1')).toEqual([])
  })
})

describe('delete and deleteForRun', () => {
  test('delete removes one record; a missing id resolves', async () => {
    await store.artifacts.save(record({ artifactId: 'x' }))
    await store.artifacts.save(record({ artifactId: 'y' }))
    await store.artifacts.delete('x')
    expect(await store.artifacts.get('x')).toBeNull()
    expect(ids(await store.artifacts.list('run-1'))).toEqual(['y'])
    await expect(store.artifacts.delete('x')).resolves.toBeUndefined()
    await expect(store.artifacts.delete('never-there')).resolves.toBeUndefined()
    expect(ids(await store.artifacts.list('run-1'))).toEqual(['y'])
  })

  test('deleteForRun removes the run’s records only; an unknown run resolves', async () => {
    await store.artifacts.save(record({ artifactId: 'k1', runId: 'keep', createdAt: 1 }))
    await store.artifacts.save(record({ artifactId: 'g1', runId: 'gone', createdAt: 2 }))
    await store.artifacts.save(record({ artifactId: 'g2', runId: 'gone', createdAt: 3 }))
    await expect(store.artifacts.deleteForRun('gone')).resolves.toBeUndefined()
    expect(await store.artifacts.list('gone')).toEqual([])
    expect(await store.artifacts.get('g1')).toBeNull()
    expect(await store.artifacts.get('g2')).toBeNull()
    expect(ids(await store.artifacts.listForThread('thread-1'))).toEqual(['k1'])
    await expect(store.artifacts.deleteForRun('gone')).resolves.toBeUndefined()
    await expect(store.artifacts.deleteForRun('never')).resolves.toBeUndefined()
  })
})

describe('bad records are refused and change nothing', () => {
  const badIds: Array<[string, Partial<ArtifactRecord>]> = [
    ['empty artifactId', { artifactId: '' }],
    ['lone-surrogate artifactId', { artifactId: 'a\ud800' }],
    ['NUL in runId', { runId: 'r\0' }],
    ['empty runId', { runId: '' }],
    ['lone-surrogate threadId', { threadId: '\udc00' }],
    ['numeric threadId', { threadId: 7 as unknown as string }],
    ['missing runId', { runId: undefined as unknown as string }],
  ]
  const badEntries: Array<[string, Partial<ArtifactRecord>]> = [
    ['empty name', { name: '' }],
    ['empty mimeType', { mimeType: '' }],
    ['size -1', { size: -1 }],
    ['size 1.5', { size: 1.5 }],
    ['size over 2^53-1', { size: 2 ** 53 }],
    ['size a string', { size: '5' as unknown as number }],
    ['createdAt 1.5', { createdAt: 1.5 }],
    ['createdAt NaN', { createdAt: Number.NaN }],
    ['createdAt missing', { createdAt: undefined as unknown as number }],
    ['a blobKey of the wrong shape', { blobKey: 'sandbox-artifacts/sha256/XYZ' }],
    ['a blobKey with an empty segment', { blobKey: 'a//b' }],
    ['a name with NUL', { name: 'a\0b' }],
    ['a name over 64 KiB', { name: 'n'.repeat(64 * 1024 + 1) }],
  ]

  /** Saves `bad` over the stored record a-1 and checks it stayed as it was. */
  async function refused(bad: ArtifactRecord, want: 'SANDBOX_SNAPSHOT_INVALID_ID' | 'SANDBOX_SNAPSHOT_INVALID_ENTRY') {
    const original = record({ blobKey: artifactKey })
    await store.artifacts.save(original)
    const err = await store.artifacts.save(bad).then(() => expect.fail('saved'), (e: unknown) => e)
    expect(err).toBeInstanceOf(SandboxCheckpointError)
    expect(err).toBeInstanceOf(
      want === 'SANDBOX_SNAPSHOT_INVALID_ID' ? SandboxCheckpointInvalidIdError : SandboxCheckpointInvalidEntryError,
    )
    expect((err as SandboxCheckpointError).code).toBe(want)
    expect(await store.artifacts.get('a-1')).toStrictEqual(original)
    expect(await store.artifacts.list('run-1')).toStrictEqual([original])
    expect(await store.artifacts.listForThread('thread-1')).toStrictEqual([original])
    for (const other of ['run-2', 'r']) expect(await store.artifacts.list(other)).toEqual([])
  }

  test.each(badIds)('%s is INVALID_ID', async (_, over) => {
    await refused(record({ runId: 'run-2', name: 'bad', ...over }), 'SANDBOX_SNAPSHOT_INVALID_ID')
  })

  test.each(badEntries)('%s is INVALID_ENTRY', async (_, over) => {
    await refused(record({ runId: 'run-2', ...over }), 'SANDBOX_SNAPSHOT_INVALID_ENTRY')
  })

  test('identifiers are checked before the entry: a bad id and a bad size is INVALID_ID', async () => {
    await refused(record({ threadId: '', size: -1 }), 'SANDBOX_SNAPSHOT_INVALID_ID')
  })

  test('bad ids to the readers and deleters are INVALID_ID', async () => {
    await store.artifacts.save(record())
    for (const bad of ['', '\ud800', 'a\0b', 7 as unknown as string]) {
      for (const call of [
        () => store.artifacts.get(bad),
        () => store.artifacts.list(bad),
        () => store.artifacts.listForThread(bad),
        () => store.artifacts.delete(bad),
        () => store.artifacts.deleteForRun(bad),
      ]) {
        await expect(call()).rejects.toBeInstanceOf(SandboxCheckpointInvalidIdError)
      }
    }
    expect(await store.artifacts.get('a-1')).toStrictEqual(record())
  })
})
