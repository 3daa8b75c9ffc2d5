// The shapes of TanStack AI's sandbox persistence contracts, declared here
// member for member, so that a value of this package is accepted wherever
// TanStack expects its own type and the other way round
// (test/types.test.ts checks both directions). sbxdb's additions
// (deleteCheckpoints, sweepSandboxBlobs) are optional members, as TanStack
// feature-detects them.

import type { ModelMessage } from '@tanstack/ai'

export type { ModelMessage }

/** A regular file of a checkpoint's manifest; its bytes are the blob `blobKey`. */
export interface SandboxSnapshotFileEntry {
  path: string
  kind: 'file'
  /** `sandbox-files/sha256/<hex>`: the sha256 of the file's bytes. */
  blobKey: string
  size: number
}

/** An empty directory of a checkpoint's manifest. */
export interface SandboxSnapshotDirectoryEntry {
  path: string
  kind: 'dir'
}

export type SandboxSnapshotEntry =
  | SandboxSnapshotFileEntry
  | SandboxSnapshotDirectoryEntry

/** A generated file a checkpoint carries; its bytes are the blob `blobKey`. */
export interface SandboxSnapshotArtifact {
  artifactId: string
  name: string
  mimeType: string
  size: number
  /** `sandbox-artifacts/sha256/<hex>`. */
  blobKey: string
  createdAt: number
}

/**
 * One checkpoint of a thread's chain. Stored checkpoints never change. sbxdb
 * stores an empty `label` or `sourceRunId` as absent, and refuses a
 * `createdAt` that is not a safe integer (epoch milliseconds).
 */
export interface SandboxCheckpoint {
  id: string
  threadId: string
  parentCheckpointId: string | null
  createdAt: number
  reason: 'automatic' | 'named' | 'fork-root'
  label?: string
  sourceRunId?: string
  files: ReadonlyArray<SandboxSnapshotEntry>
  conversation: ReadonlyArray<ModelMessage>
  artifacts: ReadonlyArray<SandboxSnapshotArtifact>
}

/** What every write of a thread presents: its lease's identity. */
export interface SandboxCheckpointWriter {
  threadId: string
  ownerToken: string
  fence: number
}

/**
 * A thread's writer lease. `expiresAt` is live: after `renew()` it reads the
 * new expiry.
 */
export interface SandboxCheckpointWriterLease extends SandboxCheckpointWriter {
  expiresAt: number
  renewAfterMs: number
  renew: () => Promise<{ expiresAt: number }>
  release: () => Promise<void>
}

export interface SandboxCheckpointForkInput {
  sourceThreadId: string
  sourceCheckpointId: string
  destinationThreadId: string
  destinationCheckpointId: string
  createdAt: number
  writer: SandboxCheckpointWriter
}

export interface SandboxCheckpointForkCapability {
  forkFromCheckpoint: (
    input: SandboxCheckpointForkInput,
  ) => Promise<{ checkpoint: SandboxCheckpoint }>
}

/** TanStack AI's checkpoint store contract. */
export interface SandboxCheckpointStore {
  get: (id: string) => Promise<SandboxCheckpoint | null>
  list: (threadId: string) => Promise<Array<SandboxCheckpoint>>
  getHead: (threadId: string) => Promise<string | null>
  append: (input: {
    checkpoint: SandboxCheckpoint
    expectedHeadId: string | null
    writer: SandboxCheckpointWriter
  }) => Promise<{ headId: string }>
  deleteHead: (input: {
    threadId: string
    checkpointId: string
    writer: SandboxCheckpointWriter
  }) => Promise<void>
  acquireWriter: (threadId: string) => Promise<SandboxCheckpointWriterLease>
  listBlobReferences: () => Promise<Array<{ key: string; references: number }>>
  /** Optional atomic fork capability. Stores without this method cannot fork. */
  forkFromCheckpoint?: SandboxCheckpointForkCapability['forkFromCheckpoint']
}

export type ForkCapableSandboxCheckpointStore = SandboxCheckpointStore &
  SandboxCheckpointForkCapability

/** Options of a checkpoint store; sbxdb takes them in test mode only. */
export interface SandboxCheckpointStoreOptions {
  now?: () => number
  leaseDurationMs?: number
  renewAfterMs?: number
}

/** The result of a sweep of unreferenced blobs. */
export interface SweepResult {
  /** The distinct keys listed under the two content-addressed prefixes. */
  examined: number
  /** Of those, how many something holds: a checkpoint, a plain object or an artifact record. */
  referenced: number
  /** The keys deleted (or, in a dry run, that would be), in UTF-8 byte order. */
  deleted: Array<string>
  /** The stored (compressed) bytes of the deleted keys. */
  bytes: number
}

/**
 * sbxdb's checkpoint store: TanStack's contract with fork, plus retention
 * (`deleteCheckpoints`) and garbage collection (`sweepSandboxBlobs`).
 */
export interface SbxdbCheckpointStore extends ForkCapableSandboxCheckpointStore {
  /**
   * Deletes every checkpoint of the thread but the newest `keep` along the
   * head's chain (the head always stays). Needs the thread's writer lease.
   */
  deleteCheckpoints: (input: {
    threadId: string
    keep: number
    writer: SandboxCheckpointWriter
  }) => Promise<{ deleted: Array<string> }>
  /**
   * Deletes the blobs no checkpoint, object, artifact record or capture in
   * flight uses, uploaded more than `olderThan` milliseconds ago.
   */
  sweepSandboxBlobs: (options: {
    olderThan: number
    dryRun?: boolean
  }) => Promise<SweepResult>
}

/** A thread's transcript: saved as a whole, loaded as a whole. */
export interface MessageStore {
  /** The thread's messages; `[]` for a thread never saved. */
  loadThread: (threadId: string) => Promise<Array<ModelMessage>>
  /**
   * Replaces the thread's messages. The array type is TanStack's (`Array`),
   * so that TanStack's own message stores fit this type too.
   */
  saveThread: (threadId: string, messages: Array<ModelMessage>) => Promise<void>
}

/** Which provider sandbox to resume for a compound sandbox key. */
export interface SandboxInstanceRecord {
  key: string
  provider: string
  providerSandboxId: string
  latestSnapshotId?: string
  threadId: string
  latestRunId?: string
  updatedAt: number
}

export interface SandboxInstanceStore {
  /** The record, or null; a missing key never throws. */
  get: (key: string) => Promise<SandboxInstanceRecord | null>
  /** Inserts or fully replaces the record of `record.key`. */
  upsert: (record: SandboxInstanceRecord) => Promise<void>
  /** Removes the record; a missing key is not an error. */
  delete: (key: string) => Promise<void>
}

/** The metadata a host keeps beside a generated file. */
export interface ArtifactRecord {
  artifactId: string
  runId: string
  threadId: string
  /** The blob or object holding the bytes; the collector keeps it while the record exists. */
  blobKey?: string
  name: string
  mimeType: string
  size: number
  sourceUrl?: string
  createdAt: number
}

export interface ArtifactStore {
  /** Inserts or overwrites the record of `record.artifactId`. */
  save: (record: ArtifactRecord) => Promise<void>
  get: (artifactId: string) => Promise<ArtifactRecord | null>
  /** A run's records by `createdAt`, then `artifactId` in UTF-8 byte order. */
  list: (runId: string) => Promise<Array<ArtifactRecord>>
  /** A thread's records, in the same order. */
  listForThread: (threadId: string) => Promise<Array<ArtifactRecord>>
  /** Removes the record; a missing id is not an error. */
  delete: (artifactId: string) => Promise<void>
  /** Removes every record of the run. */
  deleteForRun: (runId: string) => Promise<void>
}

/** The bytes `BlobStore.put` takes. */
export type BlobBody =
  | ReadableStream<Uint8Array>
  | ArrayBuffer
  | ArrayBufferView
  | string
  | Blob
  | null

export interface BlobPutOptions {
  /** A plain object's content type (content-addressed blobs have none). */
  contentType?: string
  /** A plain object's metadata: any names, string values, at most 8 KiB of UTF-8 together. */
  customMetadata?: Record<string, string>
  /** The body's length, when it is a stream; refused if the body differs. */
  expectedLength?: number
}

/** What the store knows of a blob or object. */
export interface BlobRecord {
  key: string
  size: number
  /** The sha256 of the bytes, in hex. */
  etag: string
  /** When the bytes were last uploaded or found present. */
  uploaded: Date
  contentType?: string
  customMetadata?: Record<string, string>
}

/** The part of a blob a ranged `get` returns. */
export interface BlobRange {
  offset: number
  length?: number
}

/** A blob's bytes with its record. The body can be read once. */
export interface BlobObject extends BlobRecord {
  body: ReadableStream<Uint8Array>
  arrayBuffer: () => Promise<ArrayBuffer>
  text: () => Promise<string>
  /** The range returned, when one was asked for. */
  range?: { offset: number; length: number }
}

export interface BlobListResult {
  objects: Array<BlobRecord>
  /** Where the next page starts, when `truncated`. */
  cursor?: string
  truncated: boolean
}

/**
 * An R2-shaped blob store. Keys under `sandbox-files/sha256/` and
 * `sandbox-artifacts/sha256/` are content-addressed (the hex is the
 * sha256 of the bytes, checked on put and on every read); any other key is
 * a plain object with a content type and custom metadata.
 */
export interface BlobStore {
  put: (
    key: string,
    body: BlobBody,
    options?: BlobPutOptions,
  ) => Promise<BlobRecord>
  /** The bytes, or null when the key is not stored. */
  get: (
    key: string,
    options?: { range?: BlobRange },
  ) => Promise<BlobObject | null>
  /** The record, or null. A head of a content-addressed blob refreshes its upload time. */
  head: (key: string) => Promise<BlobRecord | null>
  /** Deletes the key; a missing key is not an error. */
  delete: (key: string) => Promise<void>
  list: (options?: {
    prefix?: string
    cursor?: string
    limit?: number
  }) => Promise<BlobListResult>
}

/** What TanStack's createSandboxSnapshots and withPersistence take. */
export interface SbxdbPersistence {
  stores: {
    messages: MessageStore
    artifacts: ArtifactStore
    blobs: BlobStore
  }
}

/** The stores of one sbxdb store. */
export interface SbxdbStores {
  checkpoints: SbxdbCheckpointStore
  messages: MessageStore
  instances: SandboxInstanceStore
  blobs: BlobStore
  artifacts: ArtifactStore
  persistence: SbxdbPersistence
}
