// The artifact record store on sbxdb serve (docs/API.md, "Artifact
// records"): the metadata a host keeps beside a generated file. A record's
// blobKey keeps that blob from the garbage collector while the record
// exists.

import { read } from './transport.js'
import type { Transport } from './transport.js'
import type { ArtifactRecord, ArtifactStore } from './types.js'
import { assertId, objectOf } from './validate.js'

/** The artifact record store of the server (or test store) behind `t`. */
export function createArtifactStore(t: Transport): ArtifactStore {
  return {
    async save(record: ArtifactRecord): Promise<void> {
      const r = { ...objectOf(record) }
      assertId(r.artifactId, 'artifact id')
      assertId(r.runId, 'run id')
      assertId(r.threadId, 'thread id')
      await t.call('POST', '/v1/artifacts/save', r)
    },
    async get(artifactId: string): Promise<ArtifactRecord | null> {
      assertId(artifactId, 'artifact id')
      const r = await t.call<{ artifact: ArtifactRecord | null }>('POST', '/v1/artifacts/get', { artifactId }, read)
      return r.artifact
    },
    async list(runId: string): Promise<Array<ArtifactRecord>> {
      assertId(runId, 'run id')
      const r = await t.call<{ artifacts: Array<ArtifactRecord> }>('POST', '/v1/artifacts/list', { runId }, read)
      return r.artifacts
    },
    async listForThread(threadId: string): Promise<Array<ArtifactRecord>> {
      assertId(threadId, 'thread id')
      const r = await t.call<{ artifacts: Array<ArtifactRecord> }>('POST', '/v1/artifacts/list', { threadId }, read)
      return r.artifacts
    },
    async delete(artifactId: string): Promise<void> {
      assertId(artifactId, 'artifact id')
      await t.call('POST', '/v1/artifacts/delete', { artifactId })
    },
    async deleteForRun(runId: string): Promise<void> {
      assertId(runId, 'run id')
      await t.call('POST', '/v1/artifacts/delete-run', { runId })
    },
  }
}
