// The instance store conformance cases (docs/SPEC.md §9.3, I1–I7) against
// sbxdb serve, each on a fresh test store.

import { connectUnix } from '../helpers.js'
import { freshStores, useClient } from './harness.js'
import { runSandboxInstanceStoreConformance } from './kit.js'

const client = useClient(connectUnix)

runSandboxInstanceStoreConformance('sbxdb over the unix socket', async () => (await freshStores(client())).instances)
