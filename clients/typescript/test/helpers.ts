// What the test files share: a client of the run's server, and a fresh
// test store per case.

import { inject } from 'vitest'
import { connect } from '../src/index.js'
import type { Sbxdb, SbxdbTestStores } from '../src/index.js'
import type { SandboxCheckpointStoreOptions } from '../src/types.js'

/** A client of the run's server over its unix socket. */
export function connectUnix(): Promise<Sbxdb> {
  return connect({ socketPath: inject('socketPath') })
}

/** A client of the run's server over TCP with its token. */
export function connectTcp(): Promise<Sbxdb> {
  return connect({ url: inject('url'), token: inject('token') })
}

/** A fresh test store; closing `sbx` deletes it. */
export function freshStore(sbx: Sbxdb, options?: SandboxCheckpointStoreOptions): Promise<SbxdbTestStores> {
  return sbx.testStore(options)
}
