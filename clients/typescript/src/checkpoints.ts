// The checkpoint store on sbxdb serve: TanStack's SandboxCheckpointStore
// with fork, plus deleteCheckpoints and sweepSandboxBlobs. Each method is
// one request (docs/API.md, "Checkpoints", "Writer leases"); the server's
// engine decides every refusal in the contract's order, after this file
// refused the identifiers that JSON could not carry faithfully.

import { read } from './transport.js'
import type { Transport } from './transport.js'
import type {
  SandboxCheckpoint,
  SandboxCheckpointForkInput,
  SandboxCheckpointWriter,
  SandboxCheckpointWriterLease,
  SbxdbCheckpointStore,
  SweepResult,
} from './types.js'
import { SandboxCheckpointInvalidEntryError } from './errors.js'
import { assertId, assertOptionalId, objectOf } from './validate.js'

/**
 * Refuses a dir entry that has an own blobKey or size member, as the
 * contract does, even when its value is undefined: JSON drops such a
 * member, so the server would never see it. Entries are checked after the
 * identifiers and before the writer, so INVALID_ENTRY here is the code
 * the server gives for any bad entry.
 */
function assertNoDirFileFields(files: unknown): void {
  if (!Array.isArray(files)) return
  for (const entry of files as ReadonlyArray<unknown>) {
    const e = objectOf(entry)
    if (e !== undefined && e.kind === 'dir' && (Object.hasOwn(e, 'blobKey') || Object.hasOwn(e, 'size'))) {
      throw new SandboxCheckpointInvalidEntryError('directory entries cannot contain file fields (blobKey, size)')
    }
  }
}

/** The three members of a writer that travel; each read once. */
function writerOf(writer: unknown): unknown {
  const w = objectOf(writer)
  if (w === undefined) return writer
  return { threadId: w.threadId, ownerToken: w.ownerToken, fence: w.fence }
}

interface WireLease {
  threadId: string
  ownerToken: string
  fence: number
  expiresAt: number
  renewAfterMs: number
}

/** A lease whose renew and release are requests; `expiresAt` is live. */
function leaseOf(t: Transport, wire: WireLease): SandboxCheckpointWriterLease {
  let expiresAt = wire.expiresAt
  const writer = { threadId: wire.threadId, ownerToken: wire.ownerToken, fence: wire.fence }
  return {
    threadId: wire.threadId,
    ownerToken: wire.ownerToken,
    fence: wire.fence,
    get expiresAt() {
      return expiresAt
    },
    renewAfterMs: wire.renewAfterMs,
    async renew() {
      const r = await t.call<{ expiresAt: number }>('POST', '/v1/leases/renew', { writer })
      expiresAt = r.expiresAt
      return { expiresAt: r.expiresAt }
    },
    async release() {
      await t.call('POST', '/v1/leases/release', { writer })
    },
  }
}

/** The checkpoint store of the server (or test store) behind `t`. */
export function createCheckpointStore(t: Transport): SbxdbCheckpointStore {
  return {
    async get(id: string): Promise<SandboxCheckpoint | null> {
      assertId(id, 'checkpoint id')
      const r = await t.call<{ checkpoint: SandboxCheckpoint | null }>('POST', '/v1/checkpoints/get', { id }, read)
      return r.checkpoint
    },

    async list(threadId: string): Promise<Array<SandboxCheckpoint>> {
      assertId(threadId, 'thread id')
      const r = await t.call<{ checkpoints: Array<SandboxCheckpoint> }>('POST', '/v1/checkpoints/list', { threadId }, read)
      return r.checkpoints
    },

    async getHead(threadId: string): Promise<string | null> {
      assertId(threadId, 'thread id')
      const r = await t.call<{ headId: string | null }>('POST', '/v1/checkpoints/head', { threadId }, read)
      return r.headId
    },

    async append(input): Promise<{ headId: string }> {
      // One shallow copy of each object: every member is read once, and a
      // caller changing its objects after this call changes nothing.
      const { checkpoint, expectedHeadId, writer } = { ...objectOf(input) }
      const cp = objectOf(checkpoint)
      const body = {
        checkpoint: cp === undefined ? checkpoint : { ...cp },
        // undefined is refused below as TanStack refuses it; JSON would drop it.
        expectedHeadId,
        writer: writerOf(writer),
      }
      const w = objectOf(body.writer)
      if (cp !== undefined && w !== undefined) {
        const c = body.checkpoint as Record<string, unknown>
        assertId(c.id, 'checkpoint id')
        assertId(c.threadId, 'checkpoint thread id')
        assertId(w.threadId, 'writer thread id')
        if (body.expectedHeadId !== null) assertId(body.expectedHeadId, 'expected head id')
        assertOptionalId(c.parentCheckpointId, 'parent checkpoint id')
        assertNoDirFileFields(c.files)
      }
      return t.call<{ headId: string }>('POST', '/v1/checkpoints/append', body)
    },

    async deleteHead(input): Promise<void> {
      const { threadId, checkpointId, writer } = { ...objectOf(input) }
      const body = { threadId, checkpointId, writer: writerOf(writer) }
      const w = objectOf(body.writer)
      assertId(body.threadId, 'thread id')
      assertId(body.checkpointId, 'checkpoint id')
      if (w !== undefined) assertId(w.threadId, 'writer thread id')
      await t.call('POST', '/v1/checkpoints/delete-head', body)
    },

    async acquireWriter(threadId: string): Promise<SandboxCheckpointWriterLease> {
      assertId(threadId, 'thread id')
      const wire = await t.call<WireLease>('POST', '/v1/leases/acquire', { threadId })
      return leaseOf(t, wire)
    },

    async listBlobReferences(): Promise<Array<{ key: string; references: number }>> {
      const r = await t.call<{ references: Array<{ key: string; references: number }> }>('GET', '/v1/blob-references')
      return r.references
    },

    async forkFromCheckpoint(input: SandboxCheckpointForkInput): Promise<{ checkpoint: SandboxCheckpoint }> {
      const i = { ...objectOf(input) }
      const body = {
        sourceThreadId: i.sourceThreadId,
        sourceCheckpointId: i.sourceCheckpointId,
        destinationThreadId: i.destinationThreadId,
        destinationCheckpointId: i.destinationCheckpointId,
        createdAt: i.createdAt,
        writer: writerOf(i.writer),
      }
      assertId(body.sourceThreadId, 'source thread id')
      assertId(body.sourceCheckpointId, 'source checkpoint id')
      assertId(body.destinationThreadId, 'destination thread id')
      assertId(body.destinationCheckpointId, 'destination checkpoint id')
      const w = objectOf(body.writer)
      if (w !== undefined) assertId(w.threadId, 'writer thread id')
      return t.call<{ checkpoint: SandboxCheckpoint }>('POST', '/v1/checkpoints/fork', body)
    },

    async deleteCheckpoints(input: {
      threadId: string
      keep: number
      writer: SandboxCheckpointWriter
    }): Promise<{ deleted: Array<string> }> {
      const { threadId, keep, writer } = { ...objectOf(input) }
      const body = { threadId, keep, writer: writerOf(writer) }
      assertId(body.threadId, 'thread id')
      const w = objectOf(body.writer)
      if (w !== undefined) assertId(w.threadId, 'writer thread id')
      return t.call<{ deleted: Array<string> }>('POST', '/v1/checkpoints/delete', body)
    },

    async sweepSandboxBlobs(options: { olderThan: number; dryRun?: boolean }): Promise<SweepResult> {
      const { olderThan, dryRun } = { ...objectOf(options) }
      if (typeof olderThan !== 'number' || !Number.isSafeInteger(olderThan) || olderThan < 0) {
        throw new RangeError('sweepSandboxBlobs: olderThan must be a whole number of milliseconds >= 0')
      }
      if (dryRun !== undefined && typeof dryRun !== 'boolean') {
        throw new TypeError('sweepSandboxBlobs: dryRun must be a boolean')
      }
      // olderThan 0 is asked for explicitly here; the server wants that said.
      // A sweep answers only when done: no idle timeout.
      return t.call<SweepResult>('POST', '/v1/sweep', {
        olderThanMs: olderThan,
        immediate: olderThan === 0,
        dryRun: dryRun ?? false,
      }, { timeoutMs: 0 })
    },
  }
}
