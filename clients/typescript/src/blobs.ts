// The R2-shaped blob store on sbxdb serve (docs/API.md, "Blobs and
// objects"). Bodies stream both ways.

import type { Transport } from './transport.js'
import type { BlobStore } from './types.js'

/** The blob store of the server (or test store) behind `t`. */
export function createBlobStore(t: Transport): BlobStore {
  const todo = (): never => {
    throw new Error(`blobs: not built yet (${t.address})`)
  }
  return { put: todo, get: todo, head: todo, delete: todo, list: todo }
}
