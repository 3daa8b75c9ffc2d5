// The reference's unit tests of the checkpoint store (docs/SPEC.md §9.4,
// U1–U31) against sbxdb serve, each on a fresh test store whose clock
// starts at 1000 with leases of 100 ms renewed after 25 (as the Go kit
// runs them), and the cases where sbxdb decides otherwise than TanStack's
// reference on purpose (SPEC §10), asserting sbxdb's behaviour.

import { describe, expect, inject, it } from 'vitest'
import { connect, SandboxCheckpointError } from '../../src/index.js'
import { Transport } from '../../src/transport.js'
import type {
  Sbxdb,
  SandboxCheckpoint,
  SandboxCheckpointStoreOptions,
  SandboxSnapshotArtifact,
  SandboxSnapshotEntry,
} from '../../src/index.js'
import { connectUnix } from '../helpers.js'
import { startServer } from '../server.js'
import { clockedStores, expectPlainError, useClient } from './harness.js'
import {
  appendChain,
  appendTo,
  artifact,
  artifactKey,
  checkpoint,
  deleteHeadOf,
  expectRefused,
  expectRefusedUnchanged,
  file,
  fileKey,
  filePrefix,
  idsOf,
  stateOf,
  untyped,
  writerFor,
} from './kit.js'
import type { MutableCheckpoint } from './kit.js'

const client = useClient(connectUnix)

/** A fresh store on the clock of the Go kit's cases. */
async function store() {
  return clockedStores(client())
}

describe('checkpoint store unit cases (SPEC §9.4)', () => {
  it('U1 a first lease: the thread, a token, fence 1, renewal due before expiry; a second acquire conflicts', async () => {
    const { stores, clock } = await store()
    const lease = await stores.checkpoints.acquireWriter('thread-a')
    expect(lease.threadId).toBe('thread-a')
    expect(typeof lease.ownerToken).toBe('string')
    expect(lease.ownerToken).not.toBe('')
    expect(lease.fence).toBe(1)
    expect(lease.renewAfterMs).toBe(25)
    expect(lease.expiresAt - clock.now).toBe(100)
    expect(lease.renewAfterMs).toBeLessThan(lease.expiresAt - clock.now)
    await expectRefused(stores.checkpoints.acquireWriter('thread-a'), 'SANDBOX_SNAPSHOT_WRITER_CONFLICT')
  })

  // U2–U6: TanStack's store constructor refuses these options with a plain
  // Error. sbxdb's testStore refuses them the same way, before sending
  // anything: a server of this case's own shows no test store request.
  it('U2–U6 lease options the constructor refuses reject with a plain Error, and no store is created', async () => {
    const server = await startServer(inject('sbxdbBin'), { test: true })
    let sbx: Sbxdb | undefined
    try {
      sbx = await connect({ socketPath: server.socketPath })
      const bad: Array<SandboxCheckpointStoreOptions> = [
        { leaseDurationMs: 0 },
        { leaseDurationMs: Number.NaN },
        { renewAfterMs: 0 },
        { renewAfterMs: Number.NaN },
        { leaseDurationMs: 100, renewAfterMs: 100 },
        { leaseDurationMs: 100, renewAfterMs: 200 },
        // The default renewAfterMs (45 000) is not below it.
        { leaseDurationMs: 30_000 },
      ]
      for (const options of bad) {
        const err = await expectPlainError(() => sbx!.testStore(options))
        expect(err, JSON.stringify(options)).not.toBeInstanceOf(SandboxCheckpointError)
        expect(err.constructor).toBe(Error)
      }
      const routes = async (): Promise<Array<string>> => {
        const res = await fetchMetrics(server.socketPath)
        return res.split('\n').filter((l) => l.startsWith('sbxdb_http_requests_total{') && l.includes('/v1/test/stores'))
      }
      expect(await routes()).toEqual([])

      // The server refuses them too, for a client that sends them anyway.
      for (const body of [{ leaseDurationMs: 0 }, { renewAfterMs: 0 }, { leaseDurationMs: 100, renewAfterMs: 100 }, { leaseDurationMs: 30_000 }]) {
        const res = await postJSON(server.socketPath, '/v1/test/stores', body)
        expect(res.status, JSON.stringify(body)).toBe(400)
        expect(JSON.parse(res.text)).toMatchObject({ code: 'SBXDB_BAD_REQUEST', message: expect.stringMatching(/^sbxdb: invalid options:/) })
      }
      expect(await routes()).toEqual(['sbxdb_http_requests_total{code="400",route="POST /v1/test/stores"} 4'])
      // No test store was ever opened: the server makes their directory with the first.
      expect(server.log()).not.toMatch(/msg="test stores"/)
    } finally {
      await sbx?.close()
      expect(await server.stop()).toBe(0)
    }
  })

  it('U7 a writer of thread-a cannot append to or delete the head of thread-b', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    await appendTo(cps, checkpoint('b1', null, 'thread-b'), null)
    const wa = await writerFor(cps, 'thread-a')
    const scope = { threads: ['thread-a', 'thread-b'], ids: ['b1', 'b2'] }
    await expectRefusedUnchanged(cps, scope,
      () => cps.append({ checkpoint: checkpoint('b2', 'b1', 'thread-b'), expectedHeadId: 'b1', writer: wa }), 'SANDBOX_SNAPSHOT_WRITER_LOST')
    await expectRefusedUnchanged(cps, scope,
      () => cps.deleteHead({ threadId: 'thread-b', checkpointId: 'b1', writer: wa }), 'SANDBOX_SNAPSHOT_WRITER_LOST')
  })

  it('U8 an append counts its file and artifact keys (artifact key first); a wrong expected head is STALE_HEAD', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    await appendTo(cps, { ...checkpoint('1'), artifacts: [artifact('art-1', artifactKey(1))] }, null)
    expect(await cps.listBlobReferences()).toEqual([
      { key: artifactKey(1), references: 1 },
      { key: fileKey(1), references: 1 },
    ])
    await expectRefusedUnchanged(cps, { threads: ['thread-a'], ids: ['1', '2'] },
      () => appendTo(cps, checkpoint('2', 'other'), 'other'), 'SANDBOX_SNAPSHOT_STALE_HEAD')
  })

  it('U9 a parent other than the expected head is PARENT_MISMATCH', async () => {
    const { stores } = await store()
    await appendTo(stores.checkpoints, checkpoint('1'), null)
    await expectRefusedUnchanged(stores.checkpoints, { threads: ['thread-a'], ids: ['1', '2'] },
      () => appendTo(stores.checkpoints, checkpoint('2', 'other'), '1'), 'SANDBOX_SNAPSHOT_PARENT_MISMATCH')
  })

  it('U10 an id is unique across threads: DUPLICATE_ID in the same and in another thread', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    await appendTo(cps, checkpoint('1'), null)
    const scope = { threads: ['thread-a', 'thread-b'], ids: ['1'] }
    await expectRefusedUnchanged(cps, scope, () => appendTo(cps, checkpoint('1', '1'), '1'), 'SANDBOX_SNAPSHOT_DUPLICATE_ID')
    await expectRefusedUnchanged(cps, scope, () => appendTo(cps, checkpoint('1', null, 'thread-b'), null), 'SANDBOX_SNAPSHOT_DUPLICATE_ID')
  })

  it('U11 an empty checkpoint id, parent id or expected head id is INVALID_ID', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    await appendTo(cps, checkpoint('1'), null)
    const scope = { threads: ['thread-a'], ids: ['1', '2'] }
    await expectRefusedUnchanged(cps, scope, () => appendTo(cps, checkpoint('', '1'), '1'), 'SANDBOX_SNAPSHOT_INVALID_ID')
    await expectRefusedUnchanged(cps, scope, () => appendTo(cps, checkpoint('2', ''), '1'), 'SANDBOX_SNAPSHOT_INVALID_ID')
    await expectRefusedUnchanged(cps, scope, () => appendTo(cps, checkpoint('2', '1'), ''), 'SANDBOX_SNAPSHOT_INVALID_ID')
  })

  it('U12 an unpaired surrogate is INVALID_ID in an id and INVALID_ENTRY in a blob key; nothing is stored', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    const scope = { threads: ['thread-a'], ids: ['1'] }
    for (const id of ['\uD800', '\uDC00', 'a\uD800b', '\uDC00\uD800']) {
      await expectRefusedUnchanged(cps, scope, () => appendTo(cps, checkpoint(id), null), 'SANDBOX_SNAPSHOT_INVALID_ID')
    }
    const cp = checkpoint('1')
    cp.files = [file('1.txt', filePrefix + '0'.repeat(63) + '\uD800')]
    await expectRefusedUnchanged(cps, scope, () => appendTo(cps, cp, null), 'SANDBOX_SNAPSHOT_INVALID_ENTRY')
    expect(await cps.getHead('thread-a')).toBeNull()
    expect(await cps.listBlobReferences()).toEqual([])
    // A surrogate pair is well formed.
    await appendTo(cps, checkpoint('😀'), null)
    expect(await cps.getHead('thread-a')).toBe('😀')
  })

  it('U13 every method refuses an empty or non-string identifier with INVALID_ID', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    await appendTo(cps, checkpoint('1'), null)
    const w = await writerFor(cps, 'thread-a')
    const scope = { threads: ['thread-a'], ids: ['1', '2'] }
    const ops: Array<[string, () => Promise<unknown>]> = [
      ["acquireWriter('')", () => cps.acquireWriter('')],
      ['list({})', () => cps.list(untyped<string>({}))],
      ["getHead('')", () => cps.getHead('')],
      ["get('')", () => cps.get('')],
      ['get(7)', () => cps.get(untyped<string>(7))],
      ['append with threadId 7', () => cps.append({ checkpoint: { ...checkpoint('2', '1'), threadId: untyped<string>(7) }, expectedHeadId: '1', writer: w })],
      ['append with id 7', () => cps.append({ checkpoint: { ...checkpoint('2', '1'), id: untyped<string>(7) }, expectedHeadId: '1', writer: w })],
      ['append with writer threadId 7', () => cps.append({ checkpoint: checkpoint('2', '1'), expectedHeadId: '1', writer: { ...w, threadId: untyped<string>(7) } })],
      ["deleteHead threadId ''", () => cps.deleteHead({ threadId: '', checkpointId: '1', writer: w })],
      ["deleteHead checkpointId ''", () => cps.deleteHead({ threadId: 'thread-a', checkpointId: '', writer: w })],
      ["deleteHead writer threadId ''", () => cps.deleteHead({ threadId: 'thread-a', checkpointId: '1', writer: { ...w, threadId: '' } })],
    ]
    for (const [what, op] of ops) {
      await expect.soft(expectRefusedUnchanged(cps, scope, op, 'SANDBOX_SNAPSHOT_INVALID_ID'), what).resolves.toBeInstanceOf(SandboxCheckpointError)
    }
  })

  it.each([
    ['U14', Number.NaN],
    ['U15', Number.POSITIVE_INFINITY],
    ['U16', Number.NEGATIVE_INFINITY],
  ])('%s createdAt %s with an explicit writer is INVALID_ENTRY and changes nothing', async (_case, createdAt) => {
    const { stores } = await store()
    const cps = stores.checkpoints
    const writer = await cps.acquireWriter('thread-a')
    await cps.append({ checkpoint: checkpoint('1'), expectedHeadId: null, writer })
    await expectRefusedUnchanged(cps, { threads: ['thread-a'], ids: ['1', '2'] },
      () => cps.append({ checkpoint: { ...checkpoint('2', '1'), createdAt }, expectedHeadId: '1', writer }), 'SANDBOX_SNAPSHOT_INVALID_ENTRY')
  })

  it('U17 an absent parentCheckpointId is stored and read as null', async () => {
    const { stores } = await store()
    const { parentCheckpointId: _omitted, ...rest } = checkpoint('1')
    expect(rest).not.toHaveProperty('parentCheckpointId')
    await appendTo(stores.checkpoints, untyped<SandboxCheckpoint>(rest), null)
    const got = await stores.checkpoints.get('1')
    expect(got).toHaveProperty('parentCheckpointId', null)
    expect(await stores.checkpoints.list('thread-a')).toEqual([got])
  })

  it('U18 a file entry without blobKey and size, or a dir entry with a blobKey, is INVALID_ENTRY', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    const scope = { threads: ['thread-a'], ids: ['1'] }
    for (const entry of [
      { path: 'f', kind: 'file' },
      { path: 'f', kind: 'file', size: 1 },
      { path: 'f', kind: 'file', blobKey: fileKey(1) },
      { path: 'd', kind: 'dir', blobKey: fileKey(1) },
      { path: 'd', kind: 'dir', size: 1 },
      { path: 'd', kind: 'dir', blobKey: null },
      // Own members whose value is undefined, which JSON would drop: the
      // reference refuses a dir entry that has them at all.
      { path: 'd', kind: 'dir', blobKey: undefined },
      { path: 'd', kind: 'dir', size: undefined },
    ]) {
      const cp = { ...checkpoint('1'), files: [untyped<SandboxSnapshotEntry>(entry)] }
      await expect.soft(expectRefusedUnchanged(cps, scope, () => appendTo(cps, cp, null), 'SANDBOX_SNAPSHOT_INVALID_ENTRY'),
        JSON.stringify(entry)).resolves.toBeInstanceOf(SandboxCheckpointError)
    }
  })

  it('U19–U20 a file size that is missing, fractional, negative or not a safe integer is INVALID_ENTRY', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    await appendTo(cps, checkpoint('1'), null)
    const scope = { threads: ['thread-a'], ids: ['1', '2'] }
    for (const size of [undefined, 1.5, -1, 2 ** 53, '1']) {
      const entry = { path: 'f', kind: 'file', blobKey: fileKey(2), size }
      const cp = { ...checkpoint('2', '1'), files: [untyped<SandboxSnapshotEntry>(entry)] }
      await expect.soft(expectRefusedUnchanged(cps, scope, () => appendTo(cps, cp, '1'), 'SANDBOX_SNAPSHOT_INVALID_ENTRY'),
        `size ${String(size)}`).resolves.toBeInstanceOf(SandboxCheckpointError)
    }
  })

  /** Appends root 1, then refuses a checkpoint 2 with a file at each of `paths`. */
  async function refusesPaths(paths: Array<string>): Promise<MutableCheckpoint> {
    const { stores } = await store()
    const cps = stores.checkpoints
    await appendTo(cps, checkpoint('1'), null)
    const scope = { threads: ['thread-a'], ids: ['1', '2'] }
    for (const path of paths) {
      const cp = { ...checkpoint('2', '1'), files: [file(path, fileKey(2))] }
      await expect.soft(expectRefusedUnchanged(cps, scope, () => appendTo(cps, cp, '1'), 'SANDBOX_SNAPSHOT_INVALID_ENTRY'),
        JSON.stringify(path)).resolves.toBeInstanceOf(SandboxCheckpointError)
    }
    // Control: a plain relative path is accepted; so is "C:foo", which is
    // no drive path for the store.
    const ok = { ...checkpoint('2', '1'), files: [file('nested/ok.txt', fileKey(2)), file('C:foo', fileKey(2))] }
    await appendTo(cps, ok, '1')
    expect(await cps.get('2')).toEqual(ok)
    return ok
  }

  it('U21 malformed paths are INVALID_ENTRY', async () => {
    await refusesPaths(['bad\0name', 'nested/../bad', 'nested//bad', '/absolute', 'C:/absolute'])
  })

  it('U22 malformed file blob keys are INVALID_ENTRY', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    await appendTo(cps, checkpoint('1'), null)
    const scope = { threads: ['thread-a'], ids: ['1', '2'] }
    for (const key of [
      'bad',
      `${filePrefix}not-hex`,
      filePrefix + 'a'.repeat(63),
      filePrefix + 'a'.repeat(65),
      filePrefix + 'A'.repeat(64),
      artifactKey(1),
      '',
    ]) {
      const cp = { ...checkpoint('2', '1'), files: [file('f', key)] }
      await expect.soft(expectRefusedUnchanged(cps, scope, () => appendTo(cps, cp, '1'), 'SANDBOX_SNAPSHOT_INVALID_ENTRY'),
        JSON.stringify(key)).resolves.toBeInstanceOf(SandboxCheckpointError)
    }
  })

  it('U23 escaping and non-canonical paths are INVALID_ENTRY', async () => {
    await refusesPaths([
      '/absolute.txt', '\\absolute.txt', 'C:/absolute.txt', 'C:\\absolute.txt', 'C:', '../outside.txt',
      'nested/../../outside.txt', 'nested//file.txt', './file.txt', 'nested/', '', 'nested\\file.txt',
      'nested/.', 'nested/..',
    ])
  })

  it('U24 a duplicate path, or an entry beneath a file, is INVALID_ENTRY; a dir may have entries beneath it', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    await appendTo(cps, checkpoint('1'), null)
    const k = fileKey(2)
    const dir = (path: string): SandboxSnapshotEntry => ({ path, kind: 'dir' })
    const scope = { threads: ['thread-a'], ids: ['1', '2'] }
    for (const [what, files] of [
      ['file same + dir same', [file('same', k), dir('same')]],
      ['file same + file same', [file('same', k), file('same', k)]],
      ['file a, then file a/b', [file('a', k), file('a/b', k)]],
      ['file a/b, then file a', [file('a/b', k), file('a', k)]],
      ['file a, then dir a/b/c', [file('a', k), dir('a/b/c')]],
      ['file a/b/c, then file a', [file('a/b/c', k), file('a', k)]],
    ] as Array<[string, Array<SandboxSnapshotEntry>]>) {
      await expect.soft(expectRefusedUnchanged(cps, scope, () => appendTo(cps, { ...checkpoint('2', '1'), files }, '1'),
        'SANDBOX_SNAPSHOT_INVALID_ENTRY'), what).resolves.toBeInstanceOf(SandboxCheckpointError)
    }
    expect(await cps.list('thread-a')).toHaveLength(1)
    expect(await cps.getHead('thread-a')).toBe('1')
    expect(await cps.listBlobReferences()).toEqual([{ key: fileKey(1), references: 1 }])
    const ok = { ...checkpoint('2', '1'), files: [dir('a'), file('a/b', k), file('c/d', k), dir('c')] }
    await appendTo(cps, ok, '1')
    expect(await cps.get('2')).toEqual(ok)
  })

  it('U25 an artifact with invalid fields is INVALID_ENTRY; duplicate artifact ids are not', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    await appendTo(cps, checkpoint('1'), null)
    const good = artifact('art', artifactKey(1))
    const scope = { threads: ['thread-a'], ids: ['1', '2'] }
    for (const [what, edit] of [
      ['empty artifactId and bad key', { artifactId: '', blobKey: `${artifactKey(1).slice(0, 25)}bad` }],
      ['empty artifactId', { artifactId: '' }],
      ['unpaired surrogate in artifactId', { artifactId: '\uD800' }],
      ['empty name', { name: '' }],
      ['empty mimeType', { mimeType: '' }],
      ['bad key', { blobKey: 'sandbox-artifacts/sha256/bad' }],
      ['file-namespace key', { blobKey: fileKey(1) }],
      ['size -1', { size: -1 }],
      ['size 1.5', { size: 1.5 }],
      ['createdAt NaN', { createdAt: Number.NaN }],
    ] as Array<[string, Partial<SandboxSnapshotArtifact>]>) {
      const cp = { ...checkpoint('2', '1'), artifacts: [good, { ...good, ...edit }] }
      await expect.soft(expectRefusedUnchanged(cps, scope, () => appendTo(cps, cp, '1'), 'SANDBOX_SNAPSHOT_INVALID_ENTRY'),
        what).resolves.toBeInstanceOf(SandboxCheckpointError)
    }
    await appendTo(cps, { ...checkpoint('2', '1'), artifacts: [good, good] }, '1')
    expect(await cps.listBlobReferences()).toEqual([
      { key: artifactKey(1), references: 1 },
      { key: fileKey(1), references: 1 },
      { key: fileKey(2), references: 1 },
    ])
  })

  it('U26 the stored copy is independent of the input; list equals [get]', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    const input: MutableCheckpoint = {
      ...checkpoint('1'), reason: 'named', label: 'label', sourceRunId: 'run', artifacts: [artifact('art', artifactKey(1))],
    }
    const want = structuredClone(input)
    await appendTo(cps, input, null)
    input.id = 'mutated'
    input.label = 'mutated'
    input.files[0]!.path = 'mutated'
    input.artifacts[0]!.name = 'mutated'
    input.conversation.push({ role: 'user', content: 'mutated' })
    const got = await cps.get('1')
    expect(got).toStrictEqual(want)
    expect(await cps.list('thread-a')).toStrictEqual([got])
  })

  it('U27 a second lease is refused at once; another thread is independent; release frees the thread', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    const first = await cps.acquireWriter('thread-a')
    await expectRefused(cps.acquireWriter('thread-a'), 'SANDBOX_SNAPSHOT_WRITER_CONFLICT')
    const other = await cps.acquireWriter('other-thread')
    expect(other.fence).toBe(1)
    await first.release()
    await first.release()
    const again = await cps.acquireWriter('thread-a')
    expect(again.fence).toBe(2)
    expect(again.ownerToken).not.toBe(first.ownerToken)
  })

  it('U28 a takeover fences the stale writer out; renew runs from now; expiry is exclusive', async () => {
    const { stores, clock } = await store()
    const cps = stores.checkpoints
    const first = await cps.acquireWriter('thread-a')
    await cps.append({ checkpoint: checkpoint('1'), expectedHeadId: null, writer: first })
    clock.now = 1101
    const second = await cps.acquireWriter('thread-a')
    expect(second.fence).toBeGreaterThan(first.fence)
    const scope = { threads: ['thread-a'], ids: ['1', '2'] }
    await expectRefusedUnchanged(cps, scope, () => first.renew(), 'SANDBOX_SNAPSHOT_WRITER_LOST')
    await expectRefusedUnchanged(cps, scope,
      () => cps.append({ checkpoint: checkpoint('2', '1'), expectedHeadId: '1', writer: first }), 'SANDBOX_SNAPSHOT_WRITER_LOST')
    await expectRefusedUnchanged(cps, scope,
      () => cps.deleteHead({ threadId: 'thread-a', checkpointId: '1', writer: first }), 'SANDBOX_SNAPSHOT_WRITER_LOST')
    const before = await stateOf(cps, scope)
    await first.release()
    expect(await stateOf(cps, scope)).toEqual(before)
    expect(await second.renew()).toEqual({ expiresAt: 1201 })
    expect(second.expiresAt).toBe(1201)
    clock.now = 1200
    await expectRefused(cps.acquireWriter('thread-a'), 'SANDBOX_SNAPSHOT_WRITER_CONFLICT')
    clock.now = 1201
    const third = await cps.acquireWriter('thread-a')
    expect(third.fence).toBe(second.fence + 1)
  })

  it('U29 deleteHead of anything but the head is NOT_HEAD; of the head it moves to the parent', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    await appendChain(cps, 'thread-a', ['1', '2', '3'])
    const scope = { threads: ['thread-a', 'empty'], ids: ['1', '2', '3'] }
    await expectRefusedUnchanged(cps, scope, () => deleteHeadOf(cps, 'thread-a', '1'), 'SANDBOX_SNAPSHOT_NOT_HEAD')
    await expectRefusedUnchanged(cps, scope, () => deleteHeadOf(cps, 'thread-a', 'missing'), 'SANDBOX_SNAPSHOT_NOT_HEAD')
    await expectRefusedUnchanged(cps, scope, () => deleteHeadOf(cps, 'empty', '3'), 'SANDBOX_SNAPSHOT_NOT_HEAD')
    await deleteHeadOf(cps, 'thread-a', '3')
    expect(await cps.getHead('thread-a')).toBe('2')
    expect(await cps.get('3')).toBeNull()
    expect(await cps.listBlobReferences()).toEqual([
      { key: fileKey(1), references: 1 },
      { key: fileKey(2), references: 1 },
    ])
  })

  it('U30 deleting a root empties the thread', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    await appendTo(cps, checkpoint('1'), null)
    await deleteHeadOf(cps, 'thread-a', '1')
    expect(await cps.getHead('thread-a')).toBeNull()
    expect(await cps.list('thread-a')).toEqual([])
    expect(await cps.listBlobReferences()).toEqual([])
    // The id is free again.
    await appendTo(cps, checkpoint('1'), null)
  })

  it('U31 of appends racing on one expected head, one wins and the others are STALE_HEAD', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    await appendTo(cps, checkpoint('1'), null)
    const writer = await writerFor(cps, 'thread-a')
    const ids = ['2', '3', '4', '5', '6', '7', '8', '9']
    const results = await Promise.allSettled(ids.map((id) => cps.append({ checkpoint: checkpoint(id, '1'), expectedHeadId: '1', writer })))
    const winners = ids.filter((_, i) => results[i]!.status === 'fulfilled')
    expect(winners).toHaveLength(1)
    const winner = winners[0]!
    for (const [i, r] of results.entries()) {
      if (r.status === 'rejected') await expectRefused(Promise.reject(r.reason), 'SANDBOX_SNAPSHOT_STALE_HEAD')
      else expect(r.value).toEqual({ headId: ids[i] })
    }
    expect(await cps.getHead('thread-a')).toBe(winner)
    expect(idsOf(await cps.list('thread-a'))).toEqual(['1', winner])
    expect(await cps.listBlobReferences()).toEqual([
      { key: fileKey(1), references: 1 },
      { key: fileKey(Number(winner)), references: 1 },
    ])
    for (const id of ids) if (id !== winner) expect(await cps.get(id)).toBeNull()
  })
})

// sbxdb's decisions where they differ from TanStack's reference (SPEC §10).
describe('sbxdb decisions (SPEC §10)', () => {
  it('Q13 createdAt is a safe integer: a fraction or 2^53 is INVALID_ENTRY (the reference accepts a fraction); a negative one is accepted', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    const scope = { threads: ['thread-a'], ids: ['1'] }
    for (const createdAt of [1.5, 2 ** 53, -(2 ** 53)]) {
      await expectRefusedUnchanged(cps, scope, () => appendTo(cps, { ...checkpoint('1'), createdAt }, null), 'SANDBOX_SNAPSHOT_INVALID_ENTRY')
    }
    await appendTo(cps, { ...checkpoint('1'), createdAt: -5 }, null)
    expect((await cps.get('1'))?.createdAt).toBe(-5)
  })

  it('Q10 NUL in an identifier is INVALID_ID (the reference accepts it; its SQLite example does not)', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    const scope = { threads: ['thread-a'], ids: ['1'] }
    const ops: Array<() => Promise<unknown>> = [
      () => appendTo(cps, checkpoint('a\0b'), null),
      async () => cps.append({ checkpoint: checkpoint('1', null, 'thread\0'), expectedHeadId: null, writer: await writerFor(cps, 'thread-a') }),
      () => cps.acquireWriter('a\0b'),
      () => cps.getHead('a\0b'),
      () => cps.list('a\0b'),
      () => cps.get('a\0b'),
    ]
    for (const op of ops) await expectRefusedUnchanged(cps, scope, op, 'SANDBOX_SNAPSHOT_INVALID_ID')
  })

  it('Q12 an identifier is at most 4096 bytes of UTF-8', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    await expectRefusedUnchanged(cps, { threads: ['thread-a'] }, () => appendTo(cps, checkpoint('é'.repeat(2049)), null), 'SANDBOX_SNAPSHOT_INVALID_ID')
    const longest = 'é'.repeat(2048)
    await appendTo(cps, checkpoint(longest), null)
    expect(await cps.getHead('thread-a')).toBe(longest)
  })

  it('Q9 reason must be automatic, named or fork-root, and conversation an array (the reference checks neither)', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    const scope = { threads: ['thread-a'], ids: ['1'] }
    for (const edit of [{ reason: 'other' }, { reason: undefined }, { conversation: 'hello' }, { conversation: null }]) {
      const cp = untyped<SandboxCheckpoint>({ ...checkpoint('1'), ...edit })
      await expect.soft(expectRefusedUnchanged(cps, scope, () => appendTo(cps, cp, null), 'SANDBOX_SNAPSHOT_INVALID_ENTRY'),
        JSON.stringify(edit)).resolves.toBeInstanceOf(SandboxCheckpointError)
    }
  })

  it('Q23 an empty label or sourceRunId is stored as absent', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    await appendTo(cps, { ...checkpoint('1'), reason: 'named', label: '', sourceRunId: '' }, null)
    const got = await cps.get('1')
    expect(got).not.toHaveProperty('label')
    expect(got).not.toHaveProperty('sourceRunId')
    expect(got).toStrictEqual({ ...checkpoint('1'), reason: 'named' })
  })

  // The reference checks the writer's thread before the entries; sbxdb
  // follows the newer documented order: ids, entries and createdAt,
  // writer, duplicate id, expected head, parent.
  it('Q6 append checks ids, then entries, then the writer, then duplicate, head and parent', async () => {
    const { stores, clock } = await store()
    const cps = stores.checkpoints
    const w = await cps.acquireWriter('thread-a')
    await cps.append({ checkpoint: checkpoint('1'), expectedHeadId: null, writer: w })
    const other = await cps.acquireWriter('thread-b')
    const badEntry = { ...checkpoint('2', '1'), files: [file('/abs', fileKey(2))] }
    const scope = { threads: ['thread-a', 'thread-b'], ids: ['1', '2'] }
    const cases: Array<[string, () => Promise<unknown>, Parameters<typeof expectRefused>[1]]> = [
      ['invalid id beats a bad entry', () => cps.append({ checkpoint: { ...badEntry, id: '' }, expectedHeadId: '1', writer: w }), 'SANDBOX_SNAPSHOT_INVALID_ID'],
      // The SQLite example checks expectedHeadId after the entries.
      ["expectedHeadId '' beats a bad entry", () => cps.append({ checkpoint: badEntry, expectedHeadId: '', writer: w }), 'SANDBOX_SNAPSHOT_INVALID_ID'],
      // The reference says WRITER_LOST here.
      ['a bad entry beats a writer of another thread', () => cps.append({ checkpoint: badEntry, expectedHeadId: '1', writer: other }), 'SANDBOX_SNAPSHOT_INVALID_ENTRY'],
      ['a bad createdAt beats a writer of another thread', () => cps.append({ checkpoint: { ...checkpoint('2', '1'), createdAt: 0.5 }, expectedHeadId: '1', writer: other }), 'SANDBOX_SNAPSHOT_INVALID_ENTRY'],
      ['a writer of another thread beats a duplicate id', () => cps.append({ checkpoint: checkpoint('1', '1'), expectedHeadId: '1', writer: other }), 'SANDBOX_SNAPSHOT_WRITER_LOST'],
      ['a duplicate id beats a stale head and a wrong parent', () => cps.append({ checkpoint: checkpoint('1', 'x'), expectedHeadId: 'y', writer: w }), 'SANDBOX_SNAPSHOT_DUPLICATE_ID'],
      ['a stale head beats a wrong parent', () => cps.append({ checkpoint: checkpoint('2', 'x'), expectedHeadId: 'y', writer: w }), 'SANDBOX_SNAPSHOT_STALE_HEAD'],
    ]
    for (const [what, op, code] of cases) {
      await expect.soft(expectRefusedUnchanged(cps, scope, op, code), what).resolves.toBeInstanceOf(SandboxCheckpointError)
    }
    // An expired writer is lost even when the id is a duplicate.
    clock.now += 100
    await expectRefusedUnchanged(cps, scope, () => cps.append({ checkpoint: checkpoint('1', '1'), expectedHeadId: '1', writer: w }),
      'SANDBOX_SNAPSHOT_WRITER_LOST')
  })
})

// Values a JavaScript caller can pass that JSON cannot carry as they are.
describe('JavaScript inputs JSON has no form for', () => {
  it('an undefined expectedHeadId is INVALID_ID, as the reference refuses it (JSON would drop it and mean null)', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    const w = await writerFor(cps, 'thread-a')
    await expectRefusedUnchanged(cps, { threads: ['thread-a'], ids: ['1'] },
      () => cps.append(untyped({ checkpoint: checkpoint('1'), expectedHeadId: undefined, writer: w })), 'SANDBOX_SNAPSHOT_INVALID_ID')
  })

  it('a BigInt is refused with the code of its member, never a TypeError: createdAt INVALID_ENTRY, fence WRITER_LOST', async () => {
    const { stores } = await store()
    const cps = stores.checkpoints
    const w = await writerFor(cps, 'thread-a')
    const scope = { threads: ['thread-a'], ids: ['1'] }
    await expectRefusedUnchanged(cps, scope,
      () => cps.append({ checkpoint: untyped({ ...checkpoint('1'), createdAt: 1n }), expectedHeadId: null, writer: w }), 'SANDBOX_SNAPSHOT_INVALID_ENTRY')
    await expectRefusedUnchanged(cps, scope,
      () => cps.append({ checkpoint: checkpoint('1'), expectedHeadId: null, writer: untyped({ threadId: 'thread-a', ownerToken: w.ownerToken, fence: BigInt(w.fence) }) }),
      'SANDBOX_SNAPSHOT_WRITER_LOST')
  })
})

/** GET /metrics of the server at `socketPath`. */
async function fetchMetrics(socketPath: string): Promise<string> {
  const t = Transport.open({ socketPath })
  try {
    const ex = await t.exchange('GET', '/metrics', {})
    expect(ex.status).toBe(200)
    return await t.readText(ex, 'GET /metrics')
  } finally {
    t.close()
  }
}

/** A POST of `body` as JSON to the server at `socketPath`, whatever its answer. */
async function postJSON(socketPath: string, path: string, body: unknown): Promise<{ status: number; text: string }> {
  const t = Transport.open({ socketPath })
  try {
    const ex = await t.exchange('POST', path, { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
    return { status: ex.status, text: await t.readText(ex, `POST ${path}`) }
  } finally {
    t.close()
  }
}
