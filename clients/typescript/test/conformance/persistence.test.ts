// TanStack AI's persistence conformance suite (persistence-kit.ts) against
// `sbx.persistence`, over the unix socket and over TCP, each run on one
// fresh test store as upstream runs its suite on one persistence. The
// package's persistence offers messages, artifacts and blobs; the other
// stores of upstream's suite are declared skipped, so their cases are
// reported as skipped, naming the store.

import { afterAll, describe } from 'vitest'
import type { Sbxdb, SbxdbTestStores } from '../../src/index.js'
import { connectTcp, connectUnix } from '../helpers.js'
import { runPersistenceConformance } from './persistence-kit.js'

for (const [transport, open] of [
  ['unix socket', connectUnix],
  ['TCP', connectTcp],
] as Array<[string, () => Promise<Sbxdb>]>) {
  describe(`over ${transport}`, () => {
    let client: Sbxdb | undefined
    let stores: SbxdbTestStores | undefined
    afterAll(async () => {
      await stores?.close()
      await client?.close()
    })
    runPersistenceConformance(
      `sbx.persistence over ${transport}`,
      async () => {
        client = await open()
        stores = await client.testStore()
        return stores.persistence
      },
      { skip: ['runs', 'interrupts', 'metadata', 'generationRuns'] },
    )
  })
}
