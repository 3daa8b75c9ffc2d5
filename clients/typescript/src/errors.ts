// The three kinds of failure a caller tells apart:
//
//   - SandboxCheckpointError (and its subclasses, named as TanStack names
//     them): the contract refused the call; `code` is one of the 13 codes.
//   - SbxdbError: the server refused or failed the request for a reason the
//     contract has no code for (a blob that does not match its key, a bad
//     request, a damaged store); `code` is the server's (docs/API.md).
//   - SbxdbTransportError: the request never got an answer (no socket,
//     nothing listening, a timeout, a dropped connection). Never a contract
//     code: the call may or may not have taken effect.

/** The codes of TanStack's SandboxCheckpointError. */
export type SandboxCheckpointErrorCode =
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

const checkpointCodes: ReadonlySet<string> = new Set<SandboxCheckpointErrorCode>([
  'SANDBOX_SNAPSHOT_STALE_HEAD',
  'SANDBOX_SNAPSHOT_PARENT_MISMATCH',
  'SANDBOX_SNAPSHOT_DUPLICATE_ID',
  'SANDBOX_SNAPSHOT_NOT_HEAD',
  'SANDBOX_SNAPSHOT_WRITER_CONFLICT',
  'SANDBOX_SNAPSHOT_WRITER_LOST',
  'SANDBOX_SNAPSHOT_INVALID_ID',
  'SANDBOX_SNAPSHOT_INVALID_ENTRY',
  'SANDBOX_SNAPSHOT_CHECKPOINT_NOT_FOUND',
  'SANDBOX_SNAPSHOT_ATOMIC_FORK_REQUIRED',
  'SANDBOX_SNAPSHOT_FORK_SOURCE_NOT_FOUND',
  'SANDBOX_SNAPSHOT_FORK_SOURCE_THREAD_MISMATCH',
  'SANDBOX_SNAPSHOT_FORK_DESTINATION_NOT_EMPTY',
])

/** Whether `code` is one of the contract's 13 codes. */
export function isSandboxCheckpointErrorCode(
  code: string,
): code is SandboxCheckpointErrorCode {
  return checkpointCodes.has(code)
}

/** A refusal by the checkpoint contract. */
export class SandboxCheckpointError extends Error {
  readonly code: SandboxCheckpointErrorCode

  constructor(code: SandboxCheckpointErrorCode, message: string) {
    super(message)
    this.name = 'SandboxCheckpointError'
    this.code = code
  }
}

/** `SANDBOX_SNAPSHOT_STALE_HEAD`: the thread's head moved. */
export class SandboxCheckpointConflictError extends SandboxCheckpointError {
  constructor(message: string) {
    super('SANDBOX_SNAPSHOT_STALE_HEAD', message)
    this.name = 'SandboxCheckpointConflictError'
  }
}

/** `SANDBOX_SNAPSHOT_DUPLICATE_ID`. */
export class SandboxCheckpointDuplicateIdError extends SandboxCheckpointError {
  constructor(message: string) {
    super('SANDBOX_SNAPSHOT_DUPLICATE_ID', message)
    this.name = 'SandboxCheckpointDuplicateIdError'
  }
}

/** `SANDBOX_SNAPSHOT_INVALID_ID`. */
export class SandboxCheckpointInvalidIdError extends SandboxCheckpointError {
  constructor(message: string) {
    super('SANDBOX_SNAPSHOT_INVALID_ID', message)
    this.name = 'SandboxCheckpointInvalidIdError'
  }
}

/** `SANDBOX_SNAPSHOT_INVALID_ENTRY`. */
export class SandboxCheckpointInvalidEntryError extends SandboxCheckpointError {
  constructor(message: string) {
    super('SANDBOX_SNAPSHOT_INVALID_ENTRY', message)
    this.name = 'SandboxCheckpointInvalidEntryError'
  }
}

/** `SANDBOX_SNAPSHOT_PARENT_MISMATCH`. */
export class SandboxCheckpointParentMismatchError extends SandboxCheckpointError {
  constructor(message: string) {
    super('SANDBOX_SNAPSHOT_PARENT_MISMATCH', message)
    this.name = 'SandboxCheckpointParentMismatchError'
  }
}

/** `SANDBOX_SNAPSHOT_NOT_HEAD`. */
export class SandboxCheckpointNotHeadError extends SandboxCheckpointError {
  constructor(message: string) {
    super('SANDBOX_SNAPSHOT_NOT_HEAD', message)
    this.name = 'SandboxCheckpointNotHeadError'
  }
}

/** `SANDBOX_SNAPSHOT_WRITER_CONFLICT`: another writer holds a live lease. */
export class SandboxCheckpointWriterConflictError extends SandboxCheckpointError {
  constructor(message: string) {
    super('SANDBOX_SNAPSHOT_WRITER_CONFLICT', message)
    this.name = 'SandboxCheckpointWriterConflictError'
  }
}

/** `SANDBOX_SNAPSHOT_WRITER_LOST`: the writer's lease is not current. */
export class SandboxCheckpointWriterLostError extends SandboxCheckpointError {
  constructor(message: string) {
    super('SANDBOX_SNAPSHOT_WRITER_LOST', message)
    this.name = 'SandboxCheckpointWriterLostError'
  }
}

const subclasses: Partial<
  Record<SandboxCheckpointErrorCode, new (message: string) => SandboxCheckpointError>
> = {
  SANDBOX_SNAPSHOT_STALE_HEAD: SandboxCheckpointConflictError,
  SANDBOX_SNAPSHOT_DUPLICATE_ID: SandboxCheckpointDuplicateIdError,
  SANDBOX_SNAPSHOT_INVALID_ID: SandboxCheckpointInvalidIdError,
  SANDBOX_SNAPSHOT_INVALID_ENTRY: SandboxCheckpointInvalidEntryError,
  SANDBOX_SNAPSHOT_PARENT_MISMATCH: SandboxCheckpointParentMismatchError,
  SANDBOX_SNAPSHOT_NOT_HEAD: SandboxCheckpointNotHeadError,
  SANDBOX_SNAPSHOT_WRITER_CONFLICT: SandboxCheckpointWriterConflictError,
  SANDBOX_SNAPSHOT_WRITER_LOST: SandboxCheckpointWriterLostError,
}

/** The contract's error for `code`: its TanStack subclass where it has one. */
export function checkpointError(
  code: SandboxCheckpointErrorCode,
  message: string,
): SandboxCheckpointError {
  const Sub = subclasses[code]
  return Sub ? new Sub(message) : new SandboxCheckpointError(code, message)
}

/** A refusal or failure the server reported with one of its own codes. */
export class SbxdbError extends Error {
  /** The server's code, e.g. `SBXDB_BLOB_MISMATCH` (docs/API.md). */
  readonly code: string
  /** The HTTP status of the answer. */
  readonly status: number
  /** The server's request id, for its log. */
  readonly requestId: string | undefined

  constructor(code: string, message: string, status: number, requestId?: string) {
    super(message)
    this.name = 'SbxdbError'
    this.code = code
    this.status = status
    this.requestId = requestId
  }
}

/** Why a request got no answer. */
export type SbxdbTransportFailure =
  | 'socket-missing' // no socket file at the path: no server was started there
  | 'connection-refused' // nothing accepts at the address: the server is down
  | 'permission-denied' // the socket exists but this user may not connect
  | 'timeout' // no byte moved for the request's idle timeout
  | 'connection-reset' // the connection dropped before the answer was complete
  | 'bad-response' // the answer was not what the API promises
  | 'closed' // the client was closed
  | 'network' // any other network failure

/**
 * The request got no usable answer. A write that failed this way may or may
 * not have been applied: read the state back before retrying it.
 */
export class SbxdbTransportError extends Error {
  readonly failure: SbxdbTransportFailure
  /** The server's address as given to connect. */
  readonly address: string

  constructor(
    failure: SbxdbTransportFailure,
    address: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options)
    this.name = 'SbxdbTransportError'
    this.failure = failure
    this.address = address
  }
}
