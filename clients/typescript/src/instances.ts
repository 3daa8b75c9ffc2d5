// The sandbox instance store on sbxdb serve (docs/SPEC.md §4): one record
// per compound key, fully replaced by upsert. Keys are any string; the
// other fields are checked by the server.

import { read } from './transport.js'
import type { Transport } from './transport.js'
import type { SandboxInstanceRecord, SandboxInstanceStore } from './types.js'

/** The instance store of the server (or test store) behind `t`. */
export function createInstanceStore(t: Transport): SandboxInstanceStore {
  return {
    async get(key: string): Promise<SandboxInstanceRecord | null> {
      const r = await t.call<{ instance: SandboxInstanceRecord | null }>('POST', '/v1/instances/get', { key }, read)
      return r.instance
    },
    async upsert(record: SandboxInstanceRecord): Promise<void> {
      // An optional member that is undefined is absent: JSON drops it.
      await t.call('POST', '/v1/instances/upsert', record)
    },
    async delete(key: string): Promise<void> {
      await t.call('POST', '/v1/instances/delete', { key })
    },
  }
}
