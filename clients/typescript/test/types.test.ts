// The package's types are TanStack AI's, structurally: each is assignable to
// the shape TanStack declares (test/tanstack-shapes.ts) and back, so a
// value of this package goes wherever TanStack expects its own type, and a
// TanStack-typed store goes wherever this package's type is asked for.
//
// These are compile-time assertions. vitest type-checks this file (the
// `typecheck` section of vitest.config.ts runs tsc over it) and fails the
// run on any type error; `npm run typecheck` checks it too.

import { describe, expectTypeOf, test } from 'vitest'
import type {
  ArtifactRecord,
  ArtifactStore,
  BlobBody,
  BlobObject,
  BlobRecord,
  BlobStore,
  ForkCapableSandboxCheckpointStore,
  MessageStore,
  SandboxCheckpoint,
  SandboxCheckpointError,
  SandboxCheckpointErrorCode,
  SandboxCheckpointForkCapability,
  SandboxCheckpointForkInput,
  SandboxCheckpointStore,
  SandboxCheckpointStoreOptions,
  SandboxCheckpointWriter,
  SandboxCheckpointWriterLease,
  SandboxInstanceRecord,
  SandboxInstanceStore,
  SandboxSnapshotArtifact,
  SandboxSnapshotDirectoryEntry,
  SandboxSnapshotEntry,
  SandboxSnapshotFileEntry,
  Sbxdb,
  SbxdbCheckpointStore,
  SbxdbPersistence,
  SbxdbTestStores,
} from '../src/index.js'
import type {
  SandboxCheckpointConflictError,
  SandboxCheckpointWriterLostError,
} from '../src/index.js'
import type {
  TanStackArtifact,
  TanStackArtifactRecord,
  TanStackArtifactStore,
  TanStackBlobBody,
  TanStackBlobObject,
  TanStackBlobRecord,
  TanStackBlobStore,
  TanStackCheckpoint,
  TanStackCheckpointErrorCode,
  TanStackCheckpointStore,
  TanStackDirectoryEntry,
  TanStackEntry,
  TanStackFileEntry,
  TanStackForkCapability,
  TanStackForkCapableStore,
  TanStackForkInput,
  TanStackInstanceRecord,
  TanStackInstanceStore,
  TanStackMessageStore,
  TanStackPersistence,
  TanStackSnapshotPersistence,
  TanStackStoreOptions,
  TanStackWriter,
  TanStackWriterLease,
} from './tanstack-shapes.js'

describe('checkpoint types are TanStack’s, both ways', () => {
  test('manifest entries and artifacts', () => {
    expectTypeOf<SandboxSnapshotFileEntry>().toExtend<TanStackFileEntry>()
    expectTypeOf<TanStackFileEntry>().toExtend<SandboxSnapshotFileEntry>()
    expectTypeOf<SandboxSnapshotDirectoryEntry>().toExtend<TanStackDirectoryEntry>()
    expectTypeOf<TanStackDirectoryEntry>().toExtend<SandboxSnapshotDirectoryEntry>()
    expectTypeOf<SandboxSnapshotEntry>().toExtend<TanStackEntry>()
    expectTypeOf<TanStackEntry>().toExtend<SandboxSnapshotEntry>()
    expectTypeOf<SandboxSnapshotArtifact>().toExtend<TanStackArtifact>()
    expectTypeOf<TanStackArtifact>().toExtend<SandboxSnapshotArtifact>()
  })

  test('checkpoint, writer, lease', () => {
    expectTypeOf<SandboxCheckpoint>().toExtend<TanStackCheckpoint>()
    expectTypeOf<TanStackCheckpoint>().toExtend<SandboxCheckpoint>()
    expectTypeOf<SandboxCheckpointWriter>().toExtend<TanStackWriter>()
    expectTypeOf<TanStackWriter>().toExtend<SandboxCheckpointWriter>()
    expectTypeOf<SandboxCheckpointWriterLease>().toExtend<TanStackWriterLease>()
    expectTypeOf<TanStackWriterLease>().toExtend<SandboxCheckpointWriterLease>()
    expectTypeOf<SandboxCheckpointStoreOptions>().toExtend<TanStackStoreOptions>()
    expectTypeOf<TanStackStoreOptions>().toExtend<SandboxCheckpointStoreOptions>()
  })

  test('the store, fork input and fork capability', () => {
    expectTypeOf<SandboxCheckpointStore>().toExtend<TanStackCheckpointStore>()
    expectTypeOf<TanStackCheckpointStore>().toExtend<SandboxCheckpointStore>()
    expectTypeOf<SandboxCheckpointForkInput>().toExtend<TanStackForkInput>()
    expectTypeOf<TanStackForkInput>().toExtend<SandboxCheckpointForkInput>()
    expectTypeOf<SandboxCheckpointForkCapability>().toExtend<TanStackForkCapability>()
    expectTypeOf<TanStackForkCapability>().toExtend<SandboxCheckpointForkCapability>()
    expectTypeOf<ForkCapableSandboxCheckpointStore>().toExtend<TanStackForkCapableStore>()
    expectTypeOf<TanStackForkCapableStore>().toExtend<ForkCapableSandboxCheckpointStore>()
  })

  test('sbxdb’s checkpoint store is TanStack’s store with fork', () => {
    expectTypeOf<SbxdbCheckpointStore>().toExtend<TanStackForkCapableStore>()
    expectTypeOf<Sbxdb['checkpoints']>().toExtend<TanStackForkCapableStore>()
    expectTypeOf<SbxdbTestStores['checkpoints']>().toExtend<TanStackForkCapableStore>()
    // A value, as a host passes it: compiles only if the store fits.
    const useAsTanStack = (store: TanStackForkCapableStore): TanStackForkCapableStore => store
    const pass = (sbx: Sbxdb): TanStackForkCapableStore => useAsTanStack(sbx.checkpoints)
    expectTypeOf(pass).returns.toExtend<TanStackCheckpointStore>()
  })

  test('the error code is TanStack’s 13-code union, exactly', () => {
    expectTypeOf<SandboxCheckpointError['code']>().toEqualTypeOf<TanStackCheckpointErrorCode>()
    expectTypeOf<SandboxCheckpointErrorCode>().toEqualTypeOf<TanStackCheckpointErrorCode>()
    expectTypeOf<SandboxCheckpointConflictError>().toExtend<SandboxCheckpointError>()
    expectTypeOf<SandboxCheckpointWriterLostError['code']>().toEqualTypeOf<TanStackCheckpointErrorCode>()
  })
})

describe('instance, transcript, artifact and blob types are TanStack’s, both ways', () => {
  test('instances', () => {
    expectTypeOf<SandboxInstanceRecord>().toExtend<TanStackInstanceRecord>()
    expectTypeOf<TanStackInstanceRecord>().toExtend<SandboxInstanceRecord>()
    expectTypeOf<SandboxInstanceStore>().toExtend<TanStackInstanceStore>()
    expectTypeOf<TanStackInstanceStore>().toExtend<SandboxInstanceStore>()
    expectTypeOf<Sbxdb['instances']>().toExtend<TanStackInstanceStore>()
  })

  test('transcripts', () => {
    expectTypeOf<MessageStore>().toExtend<TanStackMessageStore>()
    expectTypeOf<TanStackMessageStore>().toExtend<MessageStore>()
    expectTypeOf<Sbxdb['messages']>().toExtend<TanStackMessageStore>()
  })

  test('artifact records', () => {
    expectTypeOf<ArtifactRecord>().toExtend<TanStackArtifactRecord>()
    expectTypeOf<TanStackArtifactRecord>().toExtend<ArtifactRecord>()
    expectTypeOf<ArtifactStore>().toExtend<TanStackArtifactStore>()
    expectTypeOf<TanStackArtifactStore>().toExtend<ArtifactStore>()
    expectTypeOf<Sbxdb['artifacts']>().toExtend<TanStackArtifactStore>()
  })

  test('blobs', () => {
    expectTypeOf<BlobBody>().toExtend<TanStackBlobBody>()
    expectTypeOf<TanStackBlobBody>().toExtend<BlobBody>()
    expectTypeOf<BlobRecord>().toExtend<TanStackBlobRecord>()
    expectTypeOf<TanStackBlobRecord>().toExtend<BlobRecord>()
    expectTypeOf<BlobObject>().toExtend<TanStackBlobObject>()
    expectTypeOf<TanStackBlobObject>().toExtend<BlobObject>()
    expectTypeOf<BlobStore>().toExtend<TanStackBlobStore>()
    expectTypeOf<TanStackBlobStore>().toExtend<BlobStore>()
    expectTypeOf<Sbxdb['blobs']>().toExtend<TanStackBlobStore>()
  })

  test('the persistence bundle', () => {
    expectTypeOf<SbxdbPersistence>().toExtend<TanStackPersistence>()
    expectTypeOf<TanStackPersistence>().toExtend<SbxdbPersistence>()
    expectTypeOf<Sbxdb['persistence']>().toExtend<TanStackPersistence>()
    expectTypeOf<SbxdbTestStores['persistence']>().toExtend<TanStackPersistence>()
    // What createSandboxSnapshots reads from it.
    expectTypeOf<Sbxdb['persistence']>().toExtend<TanStackSnapshotPersistence>()
  })
})

describe('a shape that differs is refused', () => {
  test('a store without append is not a checkpoint store', () => {
    // @ts-expect-error append is missing
    expectTypeOf<Omit<SbxdbCheckpointStore, 'append'>>().toExtend<TanStackCheckpointStore>()
    expectTypeOf<Omit<SbxdbCheckpointStore, 'append'>>().not.toExtend<TanStackCheckpointStore>()
  })

  test('a store without fork is not fork-capable', () => {
    // @ts-expect-error forkFromCheckpoint is optional in SandboxCheckpointStore
    expectTypeOf<SandboxCheckpointStore>().toExtend<TanStackForkCapableStore>()
  })

  test('a wider error code or a narrower one is not the union', () => {
    // @ts-expect-error a 14th code
    expectTypeOf<SandboxCheckpointErrorCode | 'SANDBOX_SNAPSHOT_OTHER'>().toEqualTypeOf<TanStackCheckpointErrorCode>()
    // @ts-expect-error a code missing
    expectTypeOf<Exclude<SandboxCheckpointErrorCode, 'SANDBOX_SNAPSHOT_NOT_HEAD'>>().toEqualTypeOf<TanStackCheckpointErrorCode>()
  })

  test('a blob record whose upload time is a number is not TanStack’s', () => {
    type NumericUploaded = Omit<BlobRecord, 'uploaded'> & { uploaded: number }
    // @ts-expect-error uploaded must be a Date
    expectTypeOf<NumericUploaded>().toExtend<TanStackBlobRecord>()
  })
})
