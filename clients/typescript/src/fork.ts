// Capability detection, as TanStack's callers do it.

import type { ForkCapableSandboxCheckpointStore, SandboxCheckpointStore } from './types.js'

/** Whether `store` can fork (it has a forkFromCheckpoint method). */
export function isForkCapableSandboxCheckpointStore(
  store: SandboxCheckpointStore,
): store is ForkCapableSandboxCheckpointStore {
  return typeof store.forkFromCheckpoint === 'function'
}
