// A 256 MiB blob streams through put and get with bounded memory: the
// client never holds the blob, whichever way it travels.

import { createCipheriv, createHash } from 'node:crypto'
import { afterAll, beforeAll, expect, it } from 'vitest'
import type { Sbxdb, SbxdbTestStores } from '../src/index.js'
import { connectUnix, freshStore } from './helpers.js'

const MiB = 1 << 20
const chunks = 256
const total = chunks * MiB
/** A buffered implementation grows by at least the blob's 256 MiB. */
const maxGrowth = 96 * MiB

let sbx: Sbxdb
let store: SbxdbTestStores
beforeAll(async () => {
  sbx = await connectUnix()
  store = await freshStore(sbx)
})
afterAll(async () => {
  await sbx.close()
})

/**
 * The blob's deterministic pseudo-random chunks, 1 MiB each: AES-128-CTR
 * over zeros, whose output never compresses, so the server stores and sends
 * every byte.
 */
function* generate(): Generator<Buffer> {
  const cipher = createCipheriv('aes-128-ctr', Buffer.alloc(16, 7), Buffer.alloc(16, 0))
  const zeros = Buffer.alloc(MiB)
  for (let i = 0; i < chunks; i++) yield cipher.update(zeros)
}

/** The peak growth of RSS and of ArrayBuffer memory over a baseline. */
class Peak {
  private readonly rss0 = process.memoryUsage.rss()
  private readonly ab0 = process.memoryUsage().arrayBuffers
  rss = 0
  arrayBuffers = 0
  sample(): void {
    const m = process.memoryUsage()
    this.rss = Math.max(this.rss, m.rss - this.rss0)
    this.arrayBuffers = Math.max(this.arrayBuffers, m.arrayBuffers - this.ab0)
  }
}

it('a 256 MiB blob streams through put and get with bounded memory', { timeout: 300_000 }, async () => {
  const hash = createHash('sha256')
  for (const chunk of generate()) hash.update(chunk)
  const hex = hash.digest('hex')
  const key = `sandbox-files/sha256/${hex}`

  const put = new Peak()
  const source = generate()
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      put.sample()
      const r = source.next()
      if (r.done) controller.close()
      else controller.enqueue(r.value)
    },
  }, { highWaterMark: 0 })
  const rec = await store.blobs.put(key, body)
  put.sample()
  expect(rec).toEqual({ key, size: total, etag: hex, uploaded: rec.uploaded })

  const get = new Peak()
  const obj = await store.blobs.get(key)
  expect(obj).not.toBeNull()
  expect(obj!.size).toBe(total)
  const readHash = createHash('sha256')
  let n = 0
  const reader = obj!.body.getReader()
  for (;;) {
    const r = await reader.read()
    if (r.done) break
    readHash.update(r.value)
    n += r.value.byteLength
    get.sample()
  }
  get.sample()
  expect(n).toBe(total)
  expect(readHash.digest('hex')).toBe(hex)

  const report = `put: rss +${(put.rss / MiB).toFixed(1)} MiB, arrayBuffers +${(put.arrayBuffers / MiB).toFixed(1)} MiB; ` +
    `get: rss +${(get.rss / MiB).toFixed(1)} MiB, arrayBuffers +${(get.arrayBuffers / MiB).toFixed(1)} MiB`
  expect(put.rss, report).toBeLessThan(maxGrowth)
  expect(put.arrayBuffers, report).toBeLessThan(maxGrowth)
  expect(get.rss, report).toBeLessThan(maxGrowth)
  expect(get.arrayBuffers, report).toBeLessThan(maxGrowth)
})
