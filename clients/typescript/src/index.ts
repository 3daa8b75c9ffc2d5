/**
 * `@sbxdb/tanstack-ai`: TanStack AI's sandbox checkpoint, transcript,
 * artifact, instance and blob stores on an sbxdb server (`sbxdb serve`):
 * durable, with fenced writer leases, deduplicated compressed blobs and
 * garbage collection.
 *
 * ```ts
 * import { open } from '@sbxdb/tanstack-ai'
 * const sbx = await open({ dir: '/var/lib/agent/.sbxdb' }) // or connect({ socketPath }) to a running server
 * sbx.checkpoints // SandboxCheckpointStore, with forkFromCheckpoint
 * sbx.persistence // { stores: { messages, artifacts, blobs } }
 * await sbx.close()
 * ```
 *
 * @packageDocumentation
 */

export { connect } from './connect.js'
export { open, platformPackage, serverBinary } from './open.js'
export type { OpenOptions } from './open.js'
export type { Sbxdb, SbxdbTestStores, ServerInfo } from './connect.js'
export type { ConnectOptions } from './transport.js'
export {
  SandboxCheckpointError,
  SandboxCheckpointConflictError,
  SandboxCheckpointDuplicateIdError,
  SandboxCheckpointInvalidIdError,
  SandboxCheckpointInvalidEntryError,
  SandboxCheckpointParentMismatchError,
  SandboxCheckpointNotHeadError,
  SandboxCheckpointWriterConflictError,
  SandboxCheckpointWriterLostError,
  SbxdbError,
  SbxdbTransportError,
  isSandboxCheckpointErrorCode,
} from './errors.js'
export type { SandboxCheckpointErrorCode, SbxdbTransportFailure } from './errors.js'
export { isForkCapableSandboxCheckpointStore } from './fork.js'
export type * from './types.js'
