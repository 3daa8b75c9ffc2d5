// TanStack AI's persistence types, written out independently of the
// package (declarations only, nothing runs), so that test/types.test.ts can
// check the package's types against them in both directions.
//
// Where each shape comes from:
//   - the checkpoint types and the 13 error codes: TanStack/ai,
//     packages/ai-sandbox/src/checkpoint-store.ts (docs/SPEC.md §1–§3);
//   - the instance record and store: packages/ai-sandbox/src/instance-store.ts
//     (docs/SPEC.md §4);
//   - the message and artifact stores: as TanStack's persistence and
//     in-memory snapshot stores declare them (saveThread takes an Array);
//   - the blob store: R2's shape (a required size and etag, `uploaded` a
//     Date, a null body allowed), with the returned range of a get as
//     TanStack's in-memory store declares it;
//   - the persistence bundle: `{stores: {messages, artifacts, blobs}}`;
//   - what TanStack's snapshot layer reads from the persistence bundle
//     (createSandboxSnapshots' `persistence` input): its `SnapshotPersistence`.

import type { ModelMessage } from '@tanstack/ai'

// ---------------------------------------------------------------------------
// Checkpoints

/** A regular file in a checkpoint's manifest. */
export interface TanStackFileEntry {
  path: string
  kind: 'file'
  blobKey: string
  size: number
}

/** An empty directory in a checkpoint's manifest. */
export interface TanStackDirectoryEntry {
  path: string
  kind: 'dir'
}

/** One manifest entry. */
export type TanStackEntry = TanStackFileEntry | TanStackDirectoryEntry

/** A generated file carried by a checkpoint. */
export interface TanStackArtifact {
  artifactId: string
  name: string
  mimeType: string
  size: number
  blobKey: string
  createdAt: number
}

/** A checkpoint of a thread. */
export interface TanStackCheckpoint {
  id: string
  threadId: string
  parentCheckpointId: string | null
  createdAt: number
  reason: 'automatic' | 'named' | 'fork-root'
  label?: string
  sourceRunId?: string
  files: ReadonlyArray<TanStackEntry>
  conversation: ReadonlyArray<ModelMessage>
  artifacts: ReadonlyArray<TanStackArtifact>
}

/** The identity a write presents. */
export interface TanStackWriter {
  threadId: string
  ownerToken: string
  fence: number
}

/** A writer lease as acquireWriter hands it out. */
export interface TanStackWriterLease extends TanStackWriter {
  expiresAt: number
  renewAfterMs: number
  renew: () => Promise<{ expiresAt: number }>
  release: () => Promise<void>
}

/** forkFromCheckpoint's argument. */
export interface TanStackForkInput {
  sourceThreadId: string
  sourceCheckpointId: string
  destinationThreadId: string
  destinationCheckpointId: string
  createdAt: number
  writer: TanStackWriter
}

/** The fork capability a store may have. */
export interface TanStackForkCapability {
  forkFromCheckpoint: (input: TanStackForkInput) => Promise<{ checkpoint: TanStackCheckpoint }>
}

/** The checkpoint store contract; fork is optional. */
export interface TanStackCheckpointStore {
  get: (id: string) => Promise<TanStackCheckpoint | null>
  list: (threadId: string) => Promise<Array<TanStackCheckpoint>>
  getHead: (threadId: string) => Promise<string | null>
  append: (input: {
    checkpoint: TanStackCheckpoint
    expectedHeadId: string | null
    writer: TanStackWriter
  }) => Promise<{ headId: string }>
  deleteHead: (input: {
    threadId: string
    checkpointId: string
    writer: TanStackWriter
  }) => Promise<void>
  acquireWriter: (threadId: string) => Promise<TanStackWriterLease>
  listBlobReferences: () => Promise<Array<{ key: string; references: number }>>
  forkFromCheckpoint?: TanStackForkCapability['forkFromCheckpoint']
}

/** A checkpoint store that can fork. */
export type TanStackForkCapableStore = TanStackCheckpointStore & TanStackForkCapability

/** What a checkpoint store's constructor takes. */
export interface TanStackStoreOptions {
  now?: () => number
  leaseDurationMs?: number
  renewAfterMs?: number
}

/** The `code` of TanStack's SandboxCheckpointError. */
export type TanStackCheckpointErrorCode =
  | 'SANDBOX_SNAPSHOT_STALE_HEAD'
  | 'SANDBOX_SNAPSHOT_PARENT_MISMATCH'
  | 'SANDBOX_SNAPSHOT_DUPLICATE_ID'
  | 'SANDBOX_SNAPSHOT_NOT_HEAD'
  | 'SANDBOX_SNAPSHOT_WRITER_CONFLICT'
  | 'SANDBOX_SNAPSHOT_WRITER_LOST'
  | 'SANDBOX_SNAPSHOT_INVALID_ID'
  | 'SANDBOX_SNAPSHOT_INVALID_ENTRY'
  | 'SANDBOX_SNAPSHOT_CHECKPOINT_NOT_FOUND'
  | 'SANDBOX_SNAPSHOT_ATOMIC_FORK_REQUIRED'
  | 'SANDBOX_SNAPSHOT_FORK_SOURCE_NOT_FOUND'
  | 'SANDBOX_SNAPSHOT_FORK_SOURCE_THREAD_MISMATCH'
  | 'SANDBOX_SNAPSHOT_FORK_DESTINATION_NOT_EMPTY'

// ---------------------------------------------------------------------------
// Instances

/** Which provider sandbox a compound key resumes. */
export interface TanStackInstanceRecord {
  key: string
  provider: string
  providerSandboxId: string
  latestSnapshotId?: string
  threadId: string
  latestRunId?: string
  updatedAt: number
}

/** The instance store contract. */
export interface TanStackInstanceStore {
  get: (key: string) => Promise<TanStackInstanceRecord | null>
  upsert: (record: TanStackInstanceRecord) => Promise<void>
  delete: (key: string) => Promise<void>
}

// ---------------------------------------------------------------------------
// Transcripts, artifact records, blobs

/** A thread's transcript, replaced and loaded whole. */
export interface TanStackMessageStore {
  loadThread: (threadId: string) => Promise<Array<ModelMessage>>
  saveThread: (threadId: string, messages: Array<ModelMessage>) => Promise<void>
}

/** Metadata kept beside a generated file. */
export interface TanStackArtifactRecord {
  artifactId: string
  runId: string
  threadId: string
  blobKey?: string
  name: string
  mimeType: string
  size: number
  sourceUrl?: string
  createdAt: number
}

/** The artifact record store. */
export interface TanStackArtifactStore {
  save: (record: TanStackArtifactRecord) => Promise<void>
  get: (artifactId: string) => Promise<TanStackArtifactRecord | null>
  list: (runId: string) => Promise<Array<TanStackArtifactRecord>>
  listForThread: (threadId: string) => Promise<Array<TanStackArtifactRecord>>
  delete: (artifactId: string) => Promise<void>
  deleteForRun: (runId: string) => Promise<void>
}

/** The bodies an R2-shaped put takes. */
export type TanStackBlobBody =
  | ReadableStream<Uint8Array>
  | ArrayBuffer
  | ArrayBufferView
  | string
  | Blob
  | null

/** What the store says about a stored key. */
export interface TanStackBlobRecord {
  key: string
  size: number
  etag: string
  uploaded: Date
  contentType?: string
  customMetadata?: Record<string, string>
}

/** A stored key with its bytes. */
export interface TanStackBlobObject extends TanStackBlobRecord {
  body: ReadableStream<Uint8Array>
  arrayBuffer: () => Promise<ArrayBuffer>
  text: () => Promise<string>
  range?: { offset: number; length: number }
}

/** An R2-shaped blob store. */
export interface TanStackBlobStore {
  put: (
    key: string,
    body: TanStackBlobBody,
    options?: {
      contentType?: string
      customMetadata?: Record<string, string>
      expectedLength?: number
    },
  ) => Promise<TanStackBlobRecord>
  get: (
    key: string,
    options?: { range?: { offset: number; length?: number } },
  ) => Promise<TanStackBlobObject | null>
  head: (key: string) => Promise<TanStackBlobRecord | null>
  delete: (key: string) => Promise<void>
  list: (options?: { prefix?: string; cursor?: string; limit?: number }) => Promise<{
    objects: Array<TanStackBlobRecord>
    cursor?: string
    truncated: boolean
  }>
}

/** The persistence bundle: the three stores the snapshot layer needs. */
export interface TanStackPersistence {
  stores: {
    messages: TanStackMessageStore
    artifacts: TanStackArtifactStore
    blobs: TanStackBlobStore
  }
}

/**
 * What createSandboxSnapshots reads from its `persistence` input: less than
 * the bundle, with looser results. A value of the package must fit it.
 */
export interface TanStackSnapshotPersistence {
  stores: {
    messages: {
      loadThread: (threadId: string) => Promise<ReadonlyArray<ModelMessage>>
    }
    artifacts: {
      listForThread: (threadId: string) => Promise<ReadonlyArray<TanStackArtifactRecord>>
    }
    blobs: {
      get: (key: string) => Promise<{ arrayBuffer: () => Promise<ArrayBuffer> } | null>
      head: (key: string) => Promise<unknown>
      put: (key: string, body: Uint8Array) => Promise<unknown>
    }
  }
}
