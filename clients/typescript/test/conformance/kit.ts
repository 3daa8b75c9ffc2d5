// The conformance suites of TanStack AI's sandbox persistence contracts,
// as vitest describe/it blocks that any store can be run through:
// runSandboxCheckpointStoreConformance (docs/SPEC.md §9.1, C1–C18),
// runSandboxCheckpointForkConformance (§9.2, F1–F10) and
// runSandboxInstanceStoreConformance (§9.3, I1–I7). They are laid out as
// TanStack's testkit lays its suites out: a factory makes a fresh store for
// each case. The helpers the other conformance files share live here too:
// the suite's helper checkpoint (§9), a writer cached per store and
// thread, and the "unchanged" snapshot (head, list, get and blob
// references equal before and after a refused call).

import { describe, expect, it } from 'vitest'
import { SandboxCheckpointError, isForkCapableSandboxCheckpointStore } from '../../src/index.js'
import type {
  ForkCapableSandboxCheckpointStore,
  MessageStore,
  ModelMessage,
  SandboxCheckpoint,
  SandboxCheckpointErrorCode,
  SandboxCheckpointForkInput,
  SandboxCheckpointStore,
  SandboxCheckpointStoreOptions,
  SandboxCheckpointWriter,
  SandboxCheckpointWriterLease,
  SandboxInstanceRecord,
  SandboxInstanceStore,
  SandboxSnapshotArtifact,
  SandboxSnapshotEntry,
} from '../../src/index.js'

// ---- the helper checkpoint and keys ----

/** The prefix of file blob keys. */
export const filePrefix = 'sandbox-files/sha256/'
/** The prefix of artifact blob keys. */
export const artifactPrefix = 'sandbox-artifacts/sha256/'

/** A valid file blob key: `n` in hex, left-padded to 64 digits. */
export function fileKey(n: number): string {
  return filePrefix + n.toString(16).padStart(64, '0')
}

/** A valid artifact blob key: `n` in hex, left-padded to 64 digits. */
export function artifactKey(n: number): string {
  return artifactPrefix + n.toString(16).padStart(64, '0')
}

/** The number the ASCII digits of `id` spell, or 1 when it has none. */
export function digitsOf(id: string): number {
  const n = Number(id.replace(/[^0-9]/g, ''))
  return Number.isSafeInteger(n) && n > 0 ? n : 1
}

/** The conversation message `{role: 'user', content}`. */
export function message(content: string): ModelMessage {
  return { role: 'user', content }
}

/** A checkpoint whose arrays a case may change in place. */
export type MutableCheckpoint = Omit<SandboxCheckpoint, 'files' | 'conversation' | 'artifacts'> & {
  files: Array<SandboxSnapshotEntry>
  conversation: Array<ModelMessage>
  artifacts: Array<SandboxSnapshotArtifact>
}

/** A file entry of size 1. */
export function file(path: string, blobKey: string): SandboxSnapshotEntry {
  return { path, kind: 'file', blobKey, size: 1 }
}

/** An artifact of size 1 named `<id>.txt`, created at 1. */
export function artifact(artifactId: string, blobKey: string): SandboxSnapshotArtifact {
  return { artifactId, name: `${artifactId}.txt`, mimeType: 'text/plain', size: 1, blobKey, createdAt: 1 }
}

/**
 * The suite's helper checkpoint (SPEC §9): id `id`, createdAt the digits
 * of the id (or 1), reason automatic, one file `<id>.txt` whose key is
 * those digits in hex, conversation `[{role: 'user', content: id}]`, no
 * artifacts.
 */
export function checkpoint(id: string, parentCheckpointId: string | null = null, threadId = 'thread-a'): MutableCheckpoint {
  const n = digitsOf(id)
  return {
    id,
    threadId,
    parentCheckpointId,
    createdAt: n,
    reason: 'automatic',
    files: [file(`${id}.txt`, fileKey(n))],
    conversation: [message(id)],
    artifacts: [],
  }
}

/**
 * `value` typed as T: for the cases that send what the types forbid (an
 * identifier that is a number, a missing member), as an untyped caller
 * would.
 */
export function untyped<T>(value: unknown): T {
  return value as T
}

// ---- writers ----

const writers = new WeakMap<SandboxCheckpointStore, Map<string, Promise<SandboxCheckpointWriterLease>>>()

/**
 * The writer lease of `threadId` on `store`, acquired on first use and
 * never released, as the reference suite keeps one per store and thread.
 */
export function writerFor(store: SandboxCheckpointStore, threadId: string): Promise<SandboxCheckpointWriterLease> {
  let byThread = writers.get(store)
  if (byThread === undefined) {
    byThread = new Map()
    writers.set(store, byThread)
  }
  let writer = byThread.get(threadId)
  if (writer === undefined) {
    writer = store.acquireWriter(threadId)
    byThread.set(threadId, writer)
  }
  return writer
}

/** Appends `cp` with the cached writer of its thread. */
export async function appendTo(
  store: SandboxCheckpointStore,
  cp: SandboxCheckpoint,
  expectedHeadId: string | null,
): Promise<{ headId: string }> {
  return store.append({ checkpoint: cp, expectedHeadId, writer: await writerFor(store, cp.threadId) })
}

/** Appends a chain of helper checkpoints, each on the one before. */
export async function appendChain(store: SandboxCheckpointStore, threadId: string, ids: Array<string>): Promise<void> {
  let parent: string | null = null
  for (const id of ids) {
    await appendTo(store, checkpoint(id, parent, threadId), parent)
    parent = id
  }
}

/** Deletes the head `checkpointId` of `threadId` with the thread's cached writer. */
export async function deleteHeadOf(store: SandboxCheckpointStore, threadId: string, checkpointId: string): Promise<void> {
  await store.deleteHead({ threadId, checkpointId, writer: await writerFor(store, threadId) })
}

/** The three members of a writer, as a plain object (no renew, no release). */
export function writerOf(lease: SandboxCheckpointWriter): SandboxCheckpointWriter {
  return { threadId: lease.threadId, ownerToken: lease.ownerToken, fence: lease.fence }
}

// ---- refusals and "unchanged" ----

/**
 * Awaits `op`, which must reject with a SandboxCheckpointError of `code`;
 * returns the error.
 */
export async function expectRefused(
  op: Promise<unknown> | (() => Promise<unknown>),
  code: SandboxCheckpointErrorCode,
): Promise<SandboxCheckpointError> {
  let settled: { ok: true; value: unknown } | { ok: false; error: unknown }
  try {
    settled = { ok: true, value: await (typeof op === 'function' ? op() : op) }
  } catch (error) {
    settled = { ok: false, error }
  }
  if (settled.ok) {
    expect.fail(`resolved with ${JSON.stringify(settled.value)}, want a refusal with ${code}`)
  }
  const err = settled.error
  expect(err, `want ${code}`).toBeInstanceOf(SandboxCheckpointError)
  expect((err as SandboxCheckpointError).code).toBe(code)
  return err as SandboxCheckpointError
}

/** What a store says about some threads and checkpoint ids. */
export interface StoreState {
  heads: Record<string, string | null>
  lists: Record<string, Array<SandboxCheckpoint>>
  gets: Record<string, SandboxCheckpoint | null>
  references: Array<{ key: string; references: number }>
}

/** The threads and checkpoint ids a snapshot covers. */
export interface Scope {
  threads?: Array<string>
  ids?: Array<string>
}

/** getHead and list of each thread, get of each id, and listBlobReferences. */
export async function stateOf(store: SandboxCheckpointStore, scope: Scope): Promise<StoreState> {
  const state: StoreState = { heads: {}, lists: {}, gets: {}, references: [] }
  for (const th of scope.threads ?? []) {
    state.heads[th] = await store.getHead(th)
    state.lists[th] = await store.list(th)
  }
  for (const id of scope.ids ?? []) state.gets[id] = await store.get(id)
  state.references = await store.listBlobReferences()
  return state
}

/**
 * Runs `op`, which must be refused with `code` and leave the state of
 * `scope` unchanged.
 */
export async function expectRefusedUnchanged(
  store: SandboxCheckpointStore,
  scope: Scope,
  op: () => Promise<unknown>,
  code: SandboxCheckpointErrorCode,
): Promise<SandboxCheckpointError> {
  const before = await stateOf(store, scope)
  const err = await expectRefused(op, code)
  expect(await stateOf(store, scope), `state after a refusal with ${code}`).toEqual(before)
  return err
}

/** The ids of `checkpoints`, in order. */
export function idsOf(checkpoints: ReadonlyArray<SandboxCheckpoint>): Array<string> {
  return checkpoints.map((c) => c.id)
}

// ---- §9.1: the checkpoint store ----

/**
 * Registers the checkpoint store cases C1–C18 of SPEC §9.1. `makeStore` is
 * called once per case with `options`; the cases that move the clock
 * (C15–C17) call it with `options` and a clock of their own starting at
 * 1000.
 */
export function runSandboxCheckpointStoreConformance(
  name: string,
  makeStore: (options?: SandboxCheckpointStoreOptions) => SandboxCheckpointStore | Promise<SandboxCheckpointStore>,
  options?: SandboxCheckpointStoreOptions,
): void {
  const leaseDurationMs = options?.leaseDurationMs ?? 120_000
  /** A store on a clock the case moves. */
  async function movable(): Promise<{ store: SandboxCheckpointStore; clock: { now: number } }> {
    const clock = { now: 1000 }
    const store = await makeStore({ ...options, now: () => clock.now })
    return { store, clock }
  }

  describe(`SandboxCheckpointStore conformance: ${name}`, () => {
    it('C1 an unknown thread has no checkpoints, head or list', async () => {
      const store = await makeStore(options)
      expect(await store.get('missing')).toBeNull()
      expect(await store.getHead('missing-thread')).toBeNull()
      expect(await store.list('missing-thread')).toEqual([])
    })

    it('C2 appends a root, then a child naming it', async () => {
      const store = await makeStore(options)
      const one = checkpoint('1')
      const two = checkpoint('2', '1')
      expect(await appendTo(store, one, null)).toEqual({ headId: '1' })
      expect(await appendTo(store, two, '1')).toEqual({ headId: '2' })
      expect(await store.getHead('thread-a')).toBe('2')
      expect(idsOf(await store.list('thread-a'))).toEqual(['1', '2'])
      expect(await store.get('1')).toEqual(one)
      expect(await store.get('2')).toEqual(two)
      expect(await store.listBlobReferences()).toEqual([
        { key: fileKey(1), references: 1 },
        { key: fileKey(2), references: 1 },
      ])
    })

    it('C3 a stale expected head is STALE_HEAD; a parent that is not the expected head is PARENT_MISMATCH', async () => {
      const store = await makeStore(options)
      await appendTo(store, checkpoint('1'), null)
      const scope = { threads: ['thread-a'], ids: ['1', '2', '3'] }
      await expectRefusedUnchanged(store, scope, () => appendTo(store, checkpoint('2'), null), 'SANDBOX_SNAPSHOT_STALE_HEAD')
      await expectRefusedUnchanged(store, scope, () => appendTo(store, checkpoint('3'), '1'), 'SANDBOX_SNAPSHOT_PARENT_MISMATCH')
    })

    it('C4 a checkpoint id already stored is DUPLICATE_ID, before the head and parent checks', async () => {
      const store = await makeStore(options)
      await appendTo(store, checkpoint('1'), null)
      await expectRefusedUnchanged(store, { threads: ['thread-a'], ids: ['1'] },
        () => appendTo(store, checkpoint('1'), '1'), 'SANDBOX_SNAPSHOT_DUPLICATE_ID')
    })

    it('C5 threads keep their own checkpoints and heads', async () => {
      const store = await makeStore(options)
      await appendTo(store, checkpoint('a', null, 'thread-a'), null)
      await appendTo(store, checkpoint('b', null, 'thread-b'), null)
      expect(await store.getHead('thread-a')).toBe('a')
      expect(await store.getHead('thread-b')).toBe('b')
      expect(idsOf(await store.list('thread-a'))).toEqual(['a'])
      expect(idsOf(await store.list('thread-b'))).toEqual(['b'])
    })

    it('C6 list orders by createdAt, then id, whatever the chain order', async () => {
      const store = await makeStore(options)
      await appendTo(store, { ...checkpoint('z'), createdAt: 2 }, null)
      await appendTo(store, { ...checkpoint('a', 'z'), createdAt: 1 }, 'z')
      await appendTo(store, { ...checkpoint('b', 'a'), createdAt: 1 }, 'a')
      expect(idsOf(await store.list('thread-a'))).toEqual(['a', 'b', 'z'])
    })

    it('C7 ids and blob keys are ordered by their UTF-8 bytes', async () => {
      const store = await makeStore(options)
      let parent: string | null = null
      for (const [i, id] of ['é', 'a', 'B', '😀'].entries()) {
        const cp = checkpoint(id, parent)
        cp.files = [file(`${id}.txt`, fileKey(i + 1))]
        await appendTo(store, cp, parent)
        parent = id
      }
      expect(idsOf(await store.list('thread-a'))).toEqual(['B', 'a', 'é', '😀'])
      expect((await store.listBlobReferences()).map((r) => r.key)).toEqual([fileKey(1), fileKey(2), fileKey(3), fileKey(4)])
    })

    it('C8 an unpaired surrogate is INVALID_ID in an id and INVALID_ENTRY in a blob key', async () => {
      const store = await makeStore(options)
      const scope = { threads: ['thread-a'], ids: ['root'] }
      await expectRefusedUnchanged(store, scope, () => appendTo(store, checkpoint('\uD800'), null), 'SANDBOX_SNAPSHOT_INVALID_ID')
      const cp = checkpoint('root')
      cp.files = [file('root.txt', `${filePrefix}\uD800${'0'.repeat(63)}`)]
      await expectRefusedUnchanged(store, scope, () => appendTo(store, cp, null), 'SANDBOX_SNAPSHOT_INVALID_ENTRY')
      expect(await store.getHead('thread-a')).toBeNull()
      expect(await store.listBlobReferences()).toEqual([])
    })

    it.each([
      ['C9', Number.NaN],
      ['C10', Number.POSITIVE_INFINITY],
      ['C11', Number.NEGATIVE_INFINITY],
    ])('%s createdAt %s is INVALID_ENTRY and changes nothing', async (_case, createdAt) => {
      const store = await makeStore(options)
      await expectRefusedUnchanged(store, { threads: ['thread-a'], ids: ['invalid'] },
        () => appendTo(store, { ...checkpoint('invalid'), createdAt }, null), 'SANDBOX_SNAPSHOT_INVALID_ENTRY')
    })

    it('C12 stored checkpoints never share objects with inputs or results; a key used twice counts once', async () => {
      const store = await makeStore(options)
      const input = checkpoint('1')
      input.files.push(file('same.txt', fileKey(1)))
      const want = structuredClone(input)
      await appendTo(store, input, null)
      const first = input.files[0]!
      first.path = 'input-mutated'
      input.conversation.push(message('input-mutated'))
      const loaded = await store.get('1')
      expect(loaded).not.toBe(input)
      expect(loaded).toEqual(want)
      loaded!.files[0]!.path = 'get-mutated'
      expect((await store.get('1'))?.files[0]?.path).toBe('1.txt')
      const listed = await store.list('thread-a')
      listed[0]!.files[0]!.path = 'list-mutated'
      expect(await store.list('thread-a')).toEqual([want])
      expect(await store.listBlobReferences()).toEqual([{ key: fileKey(1), references: 1 }])
    })

    it('C13 a key shared by two checkpoints counts 2, and 1 after deleting one', async () => {
      const store = await makeStore(options)
      const shared = filePrefix + 'f'.repeat(64)
      await appendTo(store, { ...checkpoint('1'), files: [file('a', shared)] }, null)
      await appendTo(store, { ...checkpoint('2', '1'), files: [file('b', shared)] }, '1')
      expect(await store.listBlobReferences()).toEqual([{ key: shared, references: 2 }])
      await deleteHeadOf(store, 'thread-a', '2')
      expect(await store.listBlobReferences()).toEqual([{ key: shared, references: 1 }])
    })

    it('C14 one writer per thread, refused at once, free again after release', async () => {
      const store = await makeStore(options)
      const a = await store.acquireWriter('thread-a')
      await expectRefused(store.acquireWriter('thread-a'), 'SANDBOX_SNAPSHOT_WRITER_CONFLICT')
      const b = await store.acquireWriter('thread-b')
      expect(b.threadId).toBe('thread-b')
      await a.release()
      await b.release()
      const again = await store.acquireWriter('thread-a')
      expect(again.fence).toBeGreaterThan(a.fence)
      await again.release()
    })

    it('C15 renew extends the lease from now, and expiresAt reads the new expiry', async () => {
      const { store, clock } = await movable()
      const lease = await store.acquireWriter('thread-a')
      const first = lease.expiresAt
      expect(first).toBe(clock.now + leaseDurationMs)
      clock.now += lease.renewAfterMs
      expect(await lease.renew()).toEqual({ expiresAt: clock.now + leaseDurationMs })
      expect(lease.expiresAt).toBe(clock.now + leaseDurationMs)
      expect(lease.expiresAt).toBeGreaterThan(first)
      await lease.release()
    })

    it('C16 a stale holder releasing does not free the replacement lease', async () => {
      const { store, clock } = await movable()
      const old = await store.acquireWriter('thread-a')
      clock.now += leaseDurationMs + 1
      const replacement = await store.acquireWriter('thread-a')
      expect(replacement.fence).toBeGreaterThan(old.fence)
      await old.release()
      await expectRefused(store.acquireWriter('thread-a'), 'SANDBOX_SNAPSHOT_WRITER_CONFLICT')
      await replacement.release()
      const next = await store.acquireWriter('thread-a')
      await next.release()
    })

    it('C17 an expired writer is lost before and after a takeover, and changes nothing', async () => {
      const { store, clock } = await movable()
      const old = await store.acquireWriter('thread-a')
      await store.append({ checkpoint: checkpoint('root'), expectedHeadId: null, writer: old })
      clock.now += leaseDurationMs + 1
      const scope = { threads: ['thread-a'], ids: ['root', 'stale'] }
      const stale = async (): Promise<void> => {
        await expectRefusedUnchanged(store, scope, () => old.renew(), 'SANDBOX_SNAPSHOT_WRITER_LOST')
        await expectRefusedUnchanged(store, scope,
          () => store.append({ checkpoint: checkpoint('stale', 'root'), expectedHeadId: 'root', writer: old }),
          'SANDBOX_SNAPSHOT_WRITER_LOST')
        expect(await store.get('stale')).toBeNull()
        await expectRefusedUnchanged(store, scope,
          () => store.deleteHead({ threadId: 'thread-a', checkpointId: 'root', writer: old }),
          'SANDBOX_SNAPSHOT_WRITER_LOST')
      }
      await stale()
      const next = await store.acquireWriter('thread-a')
      expect(next.fence).toBeGreaterThan(old.fence)
      await stale()
      const before = await stateOf(store, scope)
      await old.release()
      expect(await stateOf(store, scope)).toEqual(before)
      // The stale release left the replacement in place.
      await expectRefused(store.acquireWriter('thread-a'), 'SANDBOX_SNAPSHOT_WRITER_CONFLICT')
      await next.release()
    })

    it('C18 deleteHead deletes only the head, walking back to an empty thread', async () => {
      const store = await makeStore(options)
      await appendChain(store, 'thread-a', ['1', '2'])
      await expectRefusedUnchanged(store, { threads: ['thread-a'], ids: ['1', '2'] },
        () => deleteHeadOf(store, 'thread-a', '1'), 'SANDBOX_SNAPSHOT_NOT_HEAD')
      await deleteHeadOf(store, 'thread-a', '2')
      expect(await store.getHead('thread-a')).toBe('1')
      expect(await store.get('2')).toBeNull()
      await deleteHeadOf(store, 'thread-a', '1')
      expect(await store.getHead('thread-a')).toBeNull()
      expect(await store.list('thread-a')).toEqual([])
      expect(await store.listBlobReferences()).toEqual([])
    })
  })
}

// ---- §9.2: the fork ----

/** What the fork suite needs: a transcript store and a fork-capable checkpoint store over the same data. */
export interface SandboxCheckpointForkConformanceInput {
  persistence: { stores: { messages: MessageStore } }
  checkpoints: ForkCapableSandboxCheckpointStore
}

/** Makes a fresh pair of stores for one case. */
export type SandboxCheckpointForkConformanceFactory = () =>
  | SandboxCheckpointForkConformanceInput
  | Promise<SandboxCheckpointForkConformanceInput>

/** The fork fixture's source checkpoint (SPEC §9.2). */
export function sourceCheckpoint(): MutableCheckpoint {
  return {
    id: 'source-root',
    threadId: 'source',
    parentCheckpointId: null,
    createdAt: 10,
    reason: 'named',
    label: 'source label',
    sourceRunId: 'run-1',
    files: [file('a.txt', filePrefix + 'a'.repeat(64))],
    conversation: [message('checkpoint conversation')],
    artifacts: [],
  }
}

/** Appends the fixture's source-root with the source thread's writer. */
export async function appendSource(checkpoints: SandboxCheckpointStore): Promise<SandboxCheckpoint> {
  const source = sourceCheckpoint()
  await appendTo(checkpoints, source, null)
  return source
}

/** The default fork (source/source-root to destination/fork-root at 20) by `writer`, with `overrides`. */
export function forkInput(
  writer: SandboxCheckpointWriter,
  overrides: Partial<Omit<SandboxCheckpointForkInput, 'writer'>> = {},
): SandboxCheckpointForkInput {
  return {
    sourceThreadId: 'source',
    sourceCheckpointId: 'source-root',
    destinationThreadId: 'destination',
    destinationCheckpointId: 'fork-root',
    createdAt: 20,
    writer: writerOf(writer),
    ...overrides,
  }
}

/** A thread's transcript, head, list and the global references (and get of `ids`). */
export async function threadState(
  input: SandboxCheckpointForkConformanceInput,
  threadId: string,
  ids: Array<string> = [],
): Promise<unknown> {
  const { persistence, checkpoints } = input
  return {
    transcript: await persistence.stores.messages.loadThread(threadId),
    state: await stateOf(checkpoints, { threads: [threadId], ids }),
  }
}

/** Runs `op`, which must be refused with `code` and leave the destination unchanged. */
export async function expectForkRefused(
  input: SandboxCheckpointForkConformanceInput,
  op: () => Promise<unknown>,
  code: SandboxCheckpointErrorCode,
): Promise<void> {
  const before = await threadState(input, 'destination', ['fork-root'])
  await expectRefused(op, code)
  expect(await threadState(input, 'destination', ['fork-root']), 'the destination after the refused fork').toEqual(before)
}

/** The checkpoint a fork of `source` by `input` must create (no label, no run id). */
export function forkRootOf(source: SandboxCheckpoint, input: SandboxCheckpointForkInput): SandboxCheckpoint {
  return {
    id: input.destinationCheckpointId,
    threadId: input.destinationThreadId,
    parentCheckpointId: null,
    createdAt: input.createdAt,
    reason: 'fork-root',
    files: source.files,
    conversation: source.conversation,
    artifacts: source.artifacts,
  }
}

/**
 * Registers the fork cases F1–F10 of SPEC §9.2. F2 is about the store
 * under test: the reference's plain store has no fork member; sbxdb's has
 * one, and TanStack's capability check detects it.
 */
export function runSandboxCheckpointForkConformance(name: string, makeSnapshots: SandboxCheckpointForkConformanceFactory): void {
  describe(`Sandbox checkpoint fork conformance: ${name}`, () => {
    it('F1 copies the selected historical checkpoint into an exact fork root', async () => {
      const input = await makeSnapshots()
      const { persistence, checkpoints } = input
      const source = await appendSource(checkpoints)
      await appendTo(checkpoints, {
        id: 'source-head',
        threadId: 'source',
        parentCheckpointId: 'source-root',
        createdAt: 11,
        reason: 'automatic',
        files: [],
        conversation: [message('newer conversation')],
        artifacts: [],
      }, 'source-root')
      await persistence.stores.messages.saveThread('source', [message('current source message')])
      const destination = await checkpoints.acquireWriter('destination')
      const fork = forkInput(destination)
      const result = await checkpoints.forkFromCheckpoint(fork)
      // Exactly these members: no label, no sourceRunId.
      expect(result.checkpoint).toStrictEqual(forkRootOf(source, fork))
      expect(await checkpoints.get('fork-root')).toStrictEqual(forkRootOf(source, fork))
      expect(await persistence.stores.messages.loadThread('destination')).toEqual(source.conversation)
      expect(await checkpoints.getHead('destination')).toBe('fork-root')
      expect(await checkpoints.getHead('source')).toBe('source-head')
      expect(await persistence.stores.messages.loadThread('source')).toEqual([message('current source message')])
      expect(await checkpoints.listBlobReferences()).toEqual([{ key: filePrefix + 'a'.repeat(64), references: 2 }])
      // The fork leaves the destination lease to its holder.
      await expectRefused(checkpoints.acquireWriter('destination'), 'SANDBOX_SNAPSHOT_WRITER_CONFLICT')
    })

    it('F2 the store has forkFromCheckpoint, and the capability check finds it', async () => {
      const { checkpoints } = await makeSnapshots()
      expect(typeof checkpoints.forkFromCheckpoint).toBe('function')
      expect(isForkCapableSandboxCheckpointStore(checkpoints)).toBe(true)
    })

    it('F3 a missing source is FORK_SOURCE_NOT_FOUND', async () => {
      const input = await makeSnapshots()
      const writer = await input.checkpoints.acquireWriter('destination')
      await expectForkRefused(input, () => input.checkpoints.forkFromCheckpoint(forkInput(writer)),
        'SANDBOX_SNAPSHOT_FORK_SOURCE_NOT_FOUND')
    })

    it('F4 a source checkpoint of another thread is FORK_SOURCE_THREAD_MISMATCH', async () => {
      const input = await makeSnapshots()
      await appendSource(input.checkpoints)
      const writer = await input.checkpoints.acquireWriter('destination')
      await expectForkRefused(input,
        () => input.checkpoints.forkFromCheckpoint(forkInput(writer, { sourceThreadId: 'another-source' })),
        'SANDBOX_SNAPSHOT_FORK_SOURCE_THREAD_MISMATCH')
    })

    it('F5 the source thread as destination is FORK_SOURCE_THREAD_MISMATCH and the source stays', async () => {
      const input = await makeSnapshots()
      const { persistence, checkpoints } = input
      const source = await appendSource(checkpoints)
      await persistence.stores.messages.saveThread('source', [message('source transcript')])
      const before = await threadState(input, 'source', ['source-root', 'fork-root'])
      await expectRefused(
        checkpoints.forkFromCheckpoint(forkInput(await writerFor(checkpoints, 'source'), { destinationThreadId: source.threadId })),
        'SANDBOX_SNAPSHOT_FORK_SOURCE_THREAD_MISMATCH')
      expect(await threadState(input, 'source', ['source-root', 'fork-root'])).toEqual(before)
    })

    it('F6 a fabricated destination writer with no lease is WRITER_LOST', async () => {
      const input = await makeSnapshots()
      await appendSource(input.checkpoints)
      const missing = { threadId: 'destination', ownerToken: 'missing-owner', fence: 1 }
      await expectForkRefused(input, () => input.checkpoints.forkFromCheckpoint(forkInput(missing)),
        'SANDBOX_SNAPSHOT_WRITER_LOST')
    })

    it('F7 a writer leased for another thread is WRITER_LOST', async () => {
      const input = await makeSnapshots()
      await appendSource(input.checkpoints)
      const other = await input.checkpoints.acquireWriter('another-thread')
      await expectForkRefused(input, () => input.checkpoints.forkFromCheckpoint(forkInput(other)),
        'SANDBOX_SNAPSHOT_WRITER_LOST')
    })

    it('F8 a released destination writer is WRITER_LOST', async () => {
      const input = await makeSnapshots()
      await appendSource(input.checkpoints)
      const released = await input.checkpoints.acquireWriter('destination')
      await released.release()
      await expectForkRefused(input, () => input.checkpoints.forkFromCheckpoint(forkInput(released)),
        'SANDBOX_SNAPSHOT_WRITER_LOST')
    })

    it('F9 a saved destination transcript is FORK_DESTINATION_NOT_EMPTY', async () => {
      const input = await makeSnapshots()
      await appendSource(input.checkpoints)
      await input.persistence.stores.messages.saveThread('destination', [message('already here')])
      const writer = await input.checkpoints.acquireWriter('destination')
      await expectForkRefused(input, () => input.checkpoints.forkFromCheckpoint(forkInput(writer)),
        'SANDBOX_SNAPSHOT_FORK_DESTINATION_NOT_EMPTY')
    })

    it('F10 a destination checkpoint id used in another thread is FORK_DESTINATION_NOT_EMPTY, not DUPLICATE_ID', async () => {
      const input = await makeSnapshots()
      const source = await appendSource(input.checkpoints)
      await appendTo(input.checkpoints,
        { ...source, id: 'orphaned-id', threadId: 'orphan-thread', parentCheckpointId: null, createdAt: 11 }, null)
      const writer = await input.checkpoints.acquireWriter('destination')
      await expectForkRefused(input,
        () => input.checkpoints.forkFromCheckpoint(forkInput(writer, { destinationCheckpointId: 'orphaned-id' })),
        'SANDBOX_SNAPSHOT_FORK_DESTINATION_NOT_EMPTY')
    })
  })
}

// ---- §9.3: the instance store ----

/** The instance suite's base record (SPEC §9.3). */
export function baseRecord(): SandboxInstanceRecord {
  return { key: 'thread-1', provider: 'fake', providerSandboxId: 'sb-1', threadId: 'thread-1', updatedAt: 1 }
}

/** Registers the instance store cases I1–I7 of SPEC §9.3. */
export function runSandboxInstanceStoreConformance(
  name: string,
  makeStore: () => SandboxInstanceStore | Promise<SandboxInstanceStore>,
): void {
  describe(`SandboxInstanceStore conformance: ${name}`, () => {
    it('I1 get of an absent key is null', async () => {
      const store = await makeStore()
      expect(await store.get('absent')).toBeNull()
    })

    it('I2 upsert with the optional members round-trips', async () => {
      const store = await makeStore()
      const rec = { ...baseRecord(), latestSnapshotId: 'snap-1', latestRunId: 'run-1' }
      await store.upsert(rec)
      expect(await store.get('thread-1')).toStrictEqual(rec)
    })

    it('I3 upsert without the optional members reads back without them', async () => {
      const store = await makeStore()
      await store.upsert(baseRecord())
      const got = await store.get('thread-1')
      expect(got).toStrictEqual(baseRecord())
      expect(got).not.toHaveProperty('latestSnapshotId')
      expect(got).not.toHaveProperty('latestRunId')
    })

    it('I4 upsert replaces the whole record: an optional member left out is cleared', async () => {
      const store = await makeStore()
      await store.upsert({ ...baseRecord(), latestSnapshotId: 'snap-1', latestRunId: 'run-1' })
      await store.upsert({ ...baseRecord(), providerSandboxId: 'sb-2', updatedAt: 2 })
      const got = await store.get('thread-1')
      expect(got).toStrictEqual({ ...baseRecord(), providerSandboxId: 'sb-2', updatedAt: 2 })
      expect(got).not.toHaveProperty('latestSnapshotId')
      expect(got).not.toHaveProperty('latestRunId')
    })

    it('I5 keys are independent', async () => {
      const store = await makeStore()
      const a = { ...baseRecord(), key: 'a' }
      const b = { ...baseRecord(), key: 'b', providerSandboxId: 'sb-b' }
      await store.upsert(a)
      await store.upsert(b)
      expect(await store.get('a')).toStrictEqual(a)
      expect(await store.get('b')).toStrictEqual(b)
      await store.delete('a')
      expect(await store.get('a')).toBeNull()
      expect(await store.get('b')).toStrictEqual(b)
    })

    it('I6 delete removes the record', async () => {
      const store = await makeStore()
      await store.upsert(baseRecord())
      await store.delete('thread-1')
      expect(await store.get('thread-1')).toBeNull()
    })

    it('I7 delete of an absent key resolves', async () => {
      const store = await makeStore()
      await expect(store.delete('absent')).resolves.toBeUndefined()
      await expect(store.delete('absent')).resolves.toBeUndefined()
      expect(await store.get('absent')).toBeNull()
    })
  })
}
