// The checkpoint store conformance cases (docs/SPEC.md §9.1, C1–C18) run
// against sbxdb serve, as TanStack runs its suite: once with the default
// options (wall clock, leases of 120 000 ms renewed after 45 000) and once
// with a clock frozen at 1000 and leases of 100 ms renewed after 25; both
// over the unix socket and again over TCP, since both are served.

import { describe } from 'vitest'
import type { Sbxdb } from '../../src/index.js'
import type { SandboxCheckpointStoreOptions } from '../../src/types.js'
import { connectTcp, connectUnix } from '../helpers.js'
import { freshStores, useClient } from './harness.js'
import { runSandboxCheckpointStoreConformance } from './kit.js'

const conformanceOptions: SandboxCheckpointStoreOptions = { now: () => 1000, leaseDurationMs: 100, renewAfterMs: 25 }

for (const [transport, open] of [
  ['unix socket', connectUnix],
  ['TCP', connectTcp],
] as Array<[string, () => Promise<Sbxdb>]>) {
  describe(`over ${transport}`, () => {
    const client = useClient(open)
    const makeStore = async (options?: SandboxCheckpointStoreOptions) => (await freshStores(client(), options)).checkpoints
    runSandboxCheckpointStoreConformance(`sbxdb over ${transport}, default options`, makeStore)
    runSandboxCheckpointStoreConformance(`sbxdb over ${transport}, frozen clock, 100/25 ms leases`, makeStore, conformanceOptions)
  })
}
