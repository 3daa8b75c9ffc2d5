// The blob store against a real sbxdb serve: round trips of every body
// kind, ranges, content-addressed refusals, plain objects' attributes,
// refusals before sending (each leaving the store unchanged), deletes of
// missing and referenced blobs, paging, and bodies that fail part-way.

import { createHash } from 'node:crypto'
import { execFileSync } from 'node:child_process'
import { chmodSync, openSync, readSync, closeSync, statSync, writeSync } from 'node:fs'
import http from 'node:http'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { SbxdbError, SbxdbTransportError, connect } from '../src/index.js'
import type { BlobRecord, BlobStore, Sbxdb, SbxdbTestStores } from '../src/index.js'
import { connectUnix, freshStore } from './helpers.js'
import { startServer } from './server.js'

let sbx: Sbxdb
beforeAll(async () => {
  sbx = await connectUnix()
})
afterAll(async () => {
  await sbx.close()
})

const enc = new TextEncoder()

function sha256(bytes: Uint8Array | string): string {
  return createHash('sha256').update(bytes).digest('hex')
}

function fileKey(bytes: Uint8Array | string): string {
  return `sandbox-files/sha256/${sha256(bytes)}`
}

/** Deterministic bytes: `n` of them, from `seed`. */
function bytesOf(n: number, seed = 1): Uint8Array {
  const out = new Uint8Array(n)
  let x = seed >>> 0 || 1
  for (let i = 0; i < n; i++) {
    x ^= x << 13
    x ^= x >>> 17
    x ^= x << 5
    out[i] = x & 0xff
  }
  return out
}

/** A web stream yielding `chunks`, one per pull. */
function streamOf(chunks: Array<Uint8Array>): ReadableStream<Uint8Array> {
  let i = 0
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      if (i < chunks.length) controller.enqueue(chunks[i++]!)
      else controller.close()
    },
  })
}

/** Every record of the store, paging through list. */
async function everything(blobs: BlobStore): Promise<Array<BlobRecord>> {
  const out: Array<BlobRecord> = []
  let cursor: string | undefined
  for (;;) {
    const page = await blobs.list(cursor === undefined ? {} : { cursor })
    out.push(...page.objects)
    if (!page.truncated) return out
    cursor = page.cursor
  }
}

/** Every key of the store with its etag, size and attributes (upload times aside). */
async function snapshot(blobs: BlobStore): Promise<Array<Omit<BlobRecord, 'uploaded'>>> {
  return (await everything(blobs)).map(({ uploaded: _, ...rest }) => rest)
}

/** Asserts `p` rejects with an SbxdbError of `code` that the server never answered. */
async function refusedLocally(p: Promise<unknown>, code: string): Promise<void> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(SbxdbError)
  expect((err as SbxdbError).code).toBe(code)
  // No request id: the error was made here, before a request went out.
  expect((err as SbxdbError).requestId).toBeUndefined()
}

/** Asserts `p` rejects with the server's SbxdbError of `code`. */
async function refusedByServer(p: Promise<unknown>, code: string, status: number): Promise<void> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(SbxdbError)
  expect((err as SbxdbError).code).toBe(code)
  expect((err as SbxdbError).status).toBe(status)
  expect((err as SbxdbError).requestId).toBeTypeOf('string')
}

/** Asserts `got` holds exactly the bytes of `want` (Buffer.equals: a deep equality of megabytes is slow). */
function expectBytes(got: Uint8Array | ArrayBuffer, want: Uint8Array): void {
  const g = Buffer.from(got instanceof ArrayBuffer ? new Uint8Array(got) : got)
  expect(g.byteLength).toBe(want.byteLength)
  expect(g.equals(want), 'the bytes differ').toBe(true)
}

/** The bytes of a get, read through its body stream. */
async function readBody(obj: { body: ReadableStream<Uint8Array> }): Promise<Uint8Array> {
  const parts: Array<Uint8Array> = []
  const reader = obj.body.getReader()
  for (;;) {
    const r = await reader.read()
    if (r.done) break
    parts.push(r.value)
  }
  return new Uint8Array(Buffer.concat(parts))
}

async function withStore(fn: (s: SbxdbTestStores) => Promise<void>): Promise<void> {
  const s = await freshStore(sbx)
  try {
    await fn(s)
  } finally {
    await s.close()
  }
}

describe('round trips', () => {
  const payload = bytesOf(70_000, 7)
  const bodies: Array<[string, () => Parameters<BlobStore['put']>[1], Uint8Array]> = [
    ['string', () => 'héllo wörld 😀', enc.encode('héllo wörld 😀')],
    ['ArrayBuffer', () => payload.slice().buffer, payload],
    ['Uint8Array', () => payload, payload],
    ['a view into a larger buffer', () => {
      const big = new Uint8Array(payload.length + 20)
      big.set(payload, 10)
      return new DataView(big.buffer, 10, payload.length)
    }, payload],
    ['Uint16Array', () => new Uint16Array(payload.slice(0, 1000).buffer), payload.slice(0, 1000)],
    ['Blob', () => new Blob([payload.subarray(0, 30_000), payload.subarray(30_000)]), payload],
    ['ReadableStream (chunked)', () => streamOf([payload.subarray(0, 1), payload.subarray(1, 50_000), payload.subarray(50_000)]), payload],
    ['ReadableStream of one chunk', () => streamOf([payload]), payload],
    ['empty ReadableStream', () => streamOf([]), new Uint8Array(0)],
    ['null', () => null, new Uint8Array(0)],
    ['empty string', () => '', new Uint8Array(0)],
  ]

  for (const [name, make, want] of bodies) {
    it(`content-addressed: ${name}`, async () => {
      await withStore(async ({ blobs }) => {
        const key = fileKey(want)
        const before = Date.now()
        const rec = await blobs.put(key, make())
        expect(rec).toEqual({ key, size: want.byteLength, etag: sha256(want), uploaded: rec.uploaded })
        expect(rec.uploaded).toBeInstanceOf(Date)
        expect(Math.abs(rec.uploaded.getTime() - before)).toBeLessThan(24 * 3600 * 1000)
        expect(rec).not.toHaveProperty('contentType')
        expect(rec).not.toHaveProperty('customMetadata')

        const h = await blobs.head(key)
        expect(h).toEqual({ key, size: want.byteLength, etag: sha256(want), uploaded: h!.uploaded })

        const got = await blobs.get(key)
        expect(got).not.toBeNull()
        expect(got!.key).toBe(key)
        expect(got!.size).toBe(want.byteLength)
        expect(got!.etag).toBe(sha256(want))
        expect(got!.contentType).toBeUndefined()
        expect(got!.range).toBeUndefined()
        expectBytes(await got!.arrayBuffer(), want)

        const listed = await blobs.list({ prefix: 'sandbox-files/' })
        expect(listed).toEqual({ objects: [{ key, size: want.byteLength, etag: sha256(want), uploaded: listed.objects[0]!.uploaded }], truncated: false })

        await blobs.delete(key)
        expect(await blobs.head(key)).toBeNull()
        expect(await blobs.get(key)).toBeNull()
        expect(await everything(blobs)).toEqual([])
      })
    })

    it(`plain object: ${name}`, async () => {
      await withStore(async ({ blobs }) => {
        const key = `objects/${name}/x.bin`
        const rec = await blobs.put(key, make(), { contentType: 'application/x-test' })
        expect(rec).toEqual({ key, size: want.byteLength, etag: sha256(want), uploaded: rec.uploaded, contentType: 'application/x-test' })
        const got = await blobs.get(key)
        expect(got!.contentType).toBe('application/x-test')
        expectBytes(await readBody(got!), want)
        expect(await blobs.head(key)).toEqual(rec)
        await blobs.delete(key)
        expect(await blobs.head(key)).toBeNull()
        expect(await blobs.get(key)).toBeNull()
      })
    })
  }

  it('text() decodes UTF-8, and a body reads once', async () => {
    await withStore(async ({ blobs }) => {
      await blobs.put('t.txt', 'grüße 😀')
      const got = await blobs.get('t.txt')
      expect(await got!.text()).toBe('grüße 😀')
      await expect(got!.arrayBuffer()).rejects.toBeInstanceOf(TypeError)
      await expect(got!.text()).rejects.toBeInstanceOf(TypeError)
    })
  })

  it('a body cancelled part-way frees its connection and the server’s request slot', async () => {
    // A server of 4 request slots: a get whose cancel did not free its slot
    // would leave the fifth waiting, then refused (SBXDB_UNAVAILABLE).
    const server = await startServer(inject('sbxdbBin'), { args: ['--max-requests', '4'] })
    const own = await connect({ socketPath: server.socketPath })
    try {
      // Larger than the server's socket send buffer (it sizes one to hold a
      // body whole only up to 1 MiB), so an unread body holds its handler.
      const data = bytesOf(2 << 20, 13)
      const key = fileKey(data)
      await own.blobs.put(key, data)
      for (let i = 0; i < 8; i++) {
        const got = await own.blobs.get(key)
        const reader = got!.body.getReader()
        const first = await reader.read()
        expect(first.done).toBe(false)
        await reader.cancel()
        expect((await reader.read()).done).toBe(true)
      }
      const unread = await own.blobs.get(key)
      await unread!.body.cancel()
      expectBytes(await (await own.blobs.get(key))!.arrayBuffer(), data)
    } finally {
      await own.close()
      await server.stop()
    }
  })

  it('a put takes its bytes when called: changing the buffer afterwards changes nothing stored', async () => {
    await withStore(async ({ blobs }) => {
      const view = new Uint8Array(1 << 20).fill(65) // 'A'
      const want = view.slice()
      const p = blobs.put(fileKey(want), view)
      view.fill(66) // 'B', while the put is on its way
      await p
      expectBytes(await (await blobs.get(fileKey(want)))!.arrayBuffer(), want)

      const buf = new Uint8Array(1 << 20).fill(67).buffer // 'C'
      const wantBuf = new Uint8Array(buf.slice(0))
      const q = blobs.put('copied/plain', buf)
      new Uint8Array(buf).fill(68) // 'D'
      await q
      expectBytes(await (await blobs.get('copied/plain'))!.arrayBuffer(), wantBuf)
    })
  })

  it('a put of bytes already stored keeps one blob and refreshes it', async () => {
    await withStore(async ({ blobs }) => {
      const key = fileKey('same')
      const a = await blobs.put(key, 'same')
      const b = await blobs.put(key, enc.encode('same'))
      expect(b.etag).toBe(a.etag)
      expect(b.uploaded.getTime()).toBeGreaterThanOrEqual(a.uploaded.getTime())
      expect((await everything(blobs)).map((r) => r.key)).toEqual([key])
    })
  })

  it('a put with the right expectedLength streams with that Content-Length', async () => {
    await withStore(async ({ blobs }) => {
      const data = bytesOf(200_000, 3)
      const key = fileKey(data)
      const rec = await blobs.put(key, streamOf([data.subarray(0, 100_000), data.subarray(100_000)]), { expectedLength: data.byteLength })
      expect(rec.size).toBe(data.byteLength)
      expectBytes(await (await blobs.get(key))!.arrayBuffer(), data)
      const plain = await blobs.put('p', streamOf([data]), { expectedLength: data.byteLength })
      expect(plain.size).toBe(data.byteLength)
      const empty = await blobs.put('e', streamOf([]), { expectedLength: 0 })
      expect(empty.size).toBe(0)
    })
  })

  it('an overwrite of a plain object replaces its bytes and attributes', async () => {
    await withStore(async ({ blobs }) => {
      await blobs.put('o', 'one', { contentType: 'text/plain', customMetadata: { a: '1' } })
      const rec = await blobs.put('o', 'two!')
      expect(rec).toEqual({ key: 'o', size: 4, etag: sha256('two!'), uploaded: rec.uploaded })
      expect(await blobs.head('o')).toEqual(rec)
      expect(await (await blobs.get('o'))!.text()).toBe('two!')
    })
  })
})

describe('ranges', () => {
  const data = bytesOf(10_000, 11)
  const key = fileKey(data)

  it('reads an offset to the end, an offset and length, and a length past the end', async () => {
    await withStore(async ({ blobs }) => {
      await blobs.put(key, data)
      const tail = await blobs.get(key, { range: { offset: 9_000 } })
      expect(tail!.range).toEqual({ offset: 9_000, length: 1_000 })
      expect(tail!.size).toBe(10_000)
      expect(tail!.etag).toBe(sha256(data))
      expectBytes(await tail!.arrayBuffer(), data.subarray(9_000))

      const mid = await blobs.get(key, { range: { offset: 100, length: 50 } })
      expect(mid!.range).toEqual({ offset: 100, length: 50 })
      expectBytes(await readBody(mid!), data.subarray(100, 150))

      const first = await blobs.get(key, { range: { offset: 0, length: 1 } })
      expectBytes(await readBody(first!), data.subarray(0, 1))

      const clipped = await blobs.get(key, { range: { offset: 9_990, length: 100 } })
      expect(clipped!.range).toEqual({ offset: 9_990, length: 10 })
      expectBytes(await readBody(clipped!), data.subarray(9_990))

      const whole = await blobs.get(key, { range: { offset: 0 } })
      expect(whole!.range).toEqual({ offset: 0, length: 10_000 })
      expectBytes(await readBody(whole!), data)
    })
  })

  it('a range of a plain object', async () => {
    await withStore(async ({ blobs }) => {
      await blobs.put('r/obj', data, { contentType: 'application/octet-stream', customMetadata: { k: 'v' } })
      const got = await blobs.get('r/obj', { range: { offset: 5, length: 5 } })
      expect(got!.contentType).toBe('application/octet-stream')
      expect(got!.customMetadata).toEqual({ k: 'v' })
      expectBytes(await readBody(got!), data.subarray(5, 10))
    })
  })

  it('a range at the end, or of no bytes, reads nothing', async () => {
    await withStore(async ({ blobs }) => {
      await blobs.put(key, data)
      const atEnd = await blobs.get(key, { range: { offset: 10_000 } })
      expect(atEnd!.range).toEqual({ offset: 10_000, length: 0 })
      expect(atEnd!.size).toBe(10_000)
      expectBytes(await readBody(atEnd!), new Uint8Array(0))
      const none = await blobs.get(key, { range: { offset: 3, length: 0 } })
      expect(none!.range).toEqual({ offset: 3, length: 0 })
      expect((await none!.arrayBuffer()).byteLength).toBe(0)
      await blobs.put('empty', null)
      const empty = await blobs.get('empty', { range: { offset: 0 } })
      expect(empty!.range).toEqual({ offset: 0, length: 0 })
      expect(await blobs.get('missing', { range: { offset: 0, length: 0 } })).toBeNull()
      expect(await blobs.get('missing', { range: { offset: 5 } })).toBeNull()
    })
  })

  it('a range beyond the end is SBXDB_RANGE', async () => {
    await withStore(async ({ blobs }) => {
      await blobs.put(key, data)
      await refusedByServer(blobs.get(key, { range: { offset: 10_001 } }), 'SBXDB_RANGE', 416)
      await refusedByServer(blobs.get(key, { range: { offset: 20_000, length: 5 } }), 'SBXDB_RANGE', 416)
      await refusedLocally(blobs.get(key, { range: { offset: 10_001, length: 0 } }), 'SBXDB_RANGE')
    })
  })

  it('a malformed range is refused before sending', async () => {
    await withStore(async ({ blobs }) => {
      await blobs.put(key, data)
      for (const range of [{ offset: -1 }, { offset: 1.5 }, { offset: 0, length: -1 }, { offset: 0, length: 0.5 },
        { offset: Number.MAX_SAFE_INTEGER, length: 2 }, { offset: '1' }, {}, null]) {
        await refusedLocally(blobs.get(key, { range: range as never }), 'SBXDB_RANGE')
      }
    })
  })
})

describe('content-addressed refusals', () => {
  it('a body that does not match its key is SBXDB_BLOB_MISMATCH and stores nothing', async () => {
    await withStore(async ({ blobs }) => {
      await blobs.put('keep', 'kept')
      const before = await snapshot(blobs)
      const key = fileKey('the right bytes')
      await refusedByServer(blobs.put(key, 'the wrong bytes'), 'SBXDB_BLOB_MISMATCH', 400)
      await refusedByServer(blobs.put(key, streamOf([enc.encode('the right'), enc.encode(' bytes!')])), 'SBXDB_BLOB_MISMATCH', 400)
      await refusedByServer(blobs.put(`sandbox-artifacts/sha256/${sha256('x')}`, 'y'), 'SBXDB_BLOB_MISMATCH', 400)
      const big = bytesOf(5 << 20, 5)
      await refusedByServer(blobs.put(key, streamOf([big.subarray(0, 1 << 20), big.subarray(1 << 20)])), 'SBXDB_BLOB_MISMATCH', 400)
      expect(await blobs.head(key)).toBeNull()
      expect(await blobs.get(key)).toBeNull()
      expect(await snapshot(blobs)).toEqual(before)
    })
  })

  it('a put whose expectedLength is wrong is refused and stores nothing', async () => {
    await withStore(async ({ blobs }) => {
      await blobs.put('keep', 'kept')
      const before = await snapshot(blobs)
      const data = bytesOf(100_000, 9)
      const key = fileKey(data)
      const halves = (): ReadableStream<Uint8Array> => streamOf([data.subarray(0, 50_000), data.subarray(50_000)])
      // A stream longer or shorter than declared fails before its end is sent.
      await refusedLocally(blobs.put(key, halves(), { expectedLength: 99_999 }), 'SBXDB_BLOB_MISMATCH')
      await refusedLocally(blobs.put(key, halves(), { expectedLength: 100_001 }), 'SBXDB_BLOB_MISMATCH')
      await refusedLocally(blobs.put(key, halves(), { expectedLength: 1 }), 'SBXDB_BLOB_MISMATCH')
      await refusedLocally(blobs.put('plain', halves(), { expectedLength: 50_000 }), 'SBXDB_BLOB_MISMATCH')
      // The declared bytes all arrive, and more only later: the last
      // declared byte is held back until the source ends, so the server
      // never has a complete body to store meanwhile.
      let pulls = 0
      const slowTail = new ReadableStream<Uint8Array>({
        async pull(controller) {
          if (pulls++ === 0) {
            controller.enqueue(data.subarray(0, 50_000))
            return
          }
          await new Promise((res) => setTimeout(res, 300))
          controller.enqueue(data.subarray(50_000, 50_001))
        },
      })
      await refusedLocally(blobs.put('plain', slowTail, { expectedLength: 50_000 }), 'SBXDB_BLOB_MISMATCH')
      await refusedLocally(blobs.put('plain', streamOf([]), { expectedLength: 1 }), 'SBXDB_BLOB_MISMATCH')
      await refusedLocally(blobs.put('plain', streamOf([data.subarray(0, 1)]), { expectedLength: 0 }), 'SBXDB_BLOB_MISMATCH')
      // Bytes and Blobs of another length are refused before anything is sent.
      await refusedLocally(blobs.put(key, data, { expectedLength: 5 }), 'SBXDB_BLOB_MISMATCH')
      await refusedLocally(blobs.put('plain', 'abc', { expectedLength: 4 }), 'SBXDB_BLOB_MISMATCH')
      await refusedLocally(blobs.put('plain', new Blob([data]), { expectedLength: 7 }), 'SBXDB_BLOB_MISMATCH')
      expect(await blobs.head(key)).toBeNull()
      expect(await blobs.head('plain')).toBeNull()
      expect(await snapshot(blobs)).toEqual(before)
      // The connection pool is still usable after the cut-off requests.
      expect((await blobs.put(key, halves(), { expectedLength: 100_000 })).size).toBe(100_000)
    })
  })

  it('a body stream that fails part-way fails the put and stores nothing', async () => {
    await withStore(async ({ blobs }) => {
      const before = await snapshot(blobs)
      const boom = new Error('source failed')
      for (const expectedLength of [undefined, 300_000]) {
        let sent = 0
        const failing = new ReadableStream<Uint8Array>({
          pull(controller) {
            if (sent >= 200_000) {
              controller.error(boom)
              return
            }
            sent += 100_000
            controller.enqueue(bytesOf(100_000, sent))
          },
        })
        await expect(blobs.put('failing', failing, expectedLength === undefined ? {} : { expectedLength })).rejects.toBe(boom)
        await expect(blobs.put(fileKey('never'), streamOf([enc.encode('nev')]).pipeThrough(new TransformStream({
          transform(_chunk, controller) {
            controller.error(boom)
          },
        })), expectedLength === undefined ? {} : { expectedLength: 5 })).rejects.toBe(boom)
      }
      expect(await snapshot(blobs)).toEqual(before)
    })
  })
})

describe('plain objects', () => {
  it('contentType and customMetadata round-trip through put, get, head and list', async () => {
    await withStore(async ({ blobs }) => {
      const md = { author: 'Zoë 😀', 'a.b_c-9': 'x=1, y=2', empty: '' }
      const key = 'docs/réport 1.txt'
      const rec = await blobs.put(key, 'body', { contentType: 'text/plain; charset=utf-8', customMetadata: md })
      expect(rec).toEqual({ key, size: 4, etag: sha256('body'), uploaded: rec.uploaded, contentType: 'text/plain; charset=utf-8', customMetadata: md })
      expect(await blobs.head(key)).toEqual(rec)
      const got = await blobs.get(key)
      expect({ key: got!.key, size: got!.size, etag: got!.etag, uploaded: got!.uploaded, contentType: got!.contentType, customMetadata: got!.customMetadata }).toEqual(rec)
      expect(await got!.text()).toBe('body')
      const listed = await blobs.list({ prefix: 'docs/' })
      expect(listed).toEqual({ objects: [rec], truncated: false })
      // The bytes are a content-addressed artifact blob underneath, which lists too.
      expect((await blobs.list({ prefix: 'sandbox-artifacts/' })).objects.map((o) => o.key)).toEqual([`sandbox-artifacts/sha256/${sha256('body')}`])
    })
  })

  it('metadata names and values are any strings, as R2 keeps them', async () => {
    await withStore(async ({ blobs }) => {
      // TanStack's withPersistence names its entries in camelCase.
      const md: Record<string, string> = {
        runId: 'run-1',
        threadId: 'thread-1',
        role: 'output',
        activity: 'image',
        path: 'images.0',
        'Mixed Case: with blanks': ' leading and trailing ',
        'ü 中 😀': 'line\nbreak\ttab\r\u0000nul\u007fdel',
        '"quoted\\"': '{"json":true}',
        '': 'a nameless entry',
        empty: '',
      }
      const rec = await blobs.put('md/any', 'x', { customMetadata: md })
      expect(rec.customMetadata).toEqual(md)
      expect((await blobs.head('md/any'))!.customMetadata).toEqual(md)
      const got = await blobs.get('md/any')
      expect(got!.customMetadata).toEqual(md)
      await got!.body!.cancel()
      expect((await blobs.list({ prefix: 'md/' })).objects[0]!.customMetadata).toEqual(md)
      // 8 KiB of names and values, escaping to far more than Node's default
      // 16 KiB header limit, reads back whole.
      const big: Record<string, string> = {}
      for (let i = 0; i < 64; i++) big[`\u0001${i.toString().padStart(2, '0')}`] = '\u0001'.repeat(125)
      const size = Object.entries(big).reduce((n, [k, v]) => n + Buffer.byteLength(k) + Buffer.byteLength(v), 0)
      expect(size).toBeLessThanOrEqual(8192)
      await blobs.put('md/big', 'x', { customMetadata: big })
      expect((await blobs.head('md/big'))!.customMetadata).toEqual(big)
    })
  })

  it('a plain object without a content type has none', async () => {
    await withStore(async ({ blobs }) => {
      const rec = await blobs.put('bare', new Uint8Array([1, 2, 3]))
      expect(rec).not.toHaveProperty('contentType')
      const got = await blobs.get('bare')
      expect(got!.contentType).toBeUndefined()
      expect(got!.customMetadata).toBeUndefined()
      expect(await blobs.head('bare')).toEqual(rec)
    })
  })

  it('a content-addressed blob keeps no attributes', async () => {
    await withStore(async ({ blobs }) => {
      const key = fileKey('attrs')
      const rec = await blobs.put(key, 'attrs', { contentType: 'text/plain', customMetadata: { a: 'b' } })
      expect(rec).toEqual({ key, size: 5, etag: sha256('attrs'), uploaded: rec.uploaded })
      const got = await blobs.get(key)
      expect(got!.contentType).toBeUndefined()
      expect(got!.customMetadata).toBeUndefined()
    })
  })

  it('keys of every allowed shape travel exactly', async () => {
    await withStore(async ({ blobs }) => {
      const keys = ['a b', 'a%2Fb', 'a?b#c', '.hidden/..x/...', 'é/😀/中', 'x'.repeat(1024), 'é'.repeat(512), '+&=;', 'sandbox-files/other', 'sandbox-files/sha256', 'sandbox-artifacts']
      for (const key of keys) {
        const rec = await blobs.put(key, key)
        expect(rec.key).toBe(key)
        expect(await (await blobs.get(key))!.text()).toBe(key)
        expect((await blobs.head(key))!.key).toBe(key)
      }
      const listed = (await everything(blobs)).map((r) => r.key).filter((k) => !k.startsWith('sandbox-artifacts/sha256/'))
      expect(listed).toEqual([...keys].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b))))
      for (const key of keys) await blobs.delete(key)
      expect((await everything(blobs)).filter((r) => !r.key.startsWith('sandbox-artifacts/sha256/'))).toEqual([])
    })
  })
})

describe('refusals before sending', () => {
  const badKeys: Array<[string, unknown]> = [
    ['empty', ''],
    ['NUL', 'a\0b'],
    ['leading /', '/a'],
    ['trailing /', 'a/'],
    ['doubled /', 'a//b'],
    ['. segment', 'a/./b'],
    ['.. segment', '..'],
    ['.. inside', 'a/../b'],
    ['1025 bytes', 'x'.repeat(1025)],
    ['1025 bytes of UTF-8', `${'é'.repeat(512)}x`],
    ['an unpaired high surrogate', 'a\ud800'],
    ['an unpaired low surrogate', '\udc00b'],
    ['a bad digest', 'sandbox-files/sha256/xyz'],
    ['an upper-case digest', `sandbox-files/sha256/${'A'.repeat(64)}`],
    ['63 hex', `sandbox-artifacts/sha256/${'a'.repeat(63)}`],
    ['65 hex', `sandbox-artifacts/sha256/${'a'.repeat(65)}`],
    ['not a string', 42],
  ]

  it.each(badKeys)('a key that is %s is SBXDB_BAD_REQUEST for every method, changing nothing', async (_, key) => {
    await withStore(async ({ blobs }) => {
      await blobs.put('keep', 'kept', { customMetadata: { a: 'b' } })
      const before = await snapshot(blobs)
      const k = key as string
      await refusedLocally(blobs.put(k, 'x'), 'SBXDB_BAD_REQUEST')
      await refusedLocally(blobs.put(k, streamOf([enc.encode('x')])), 'SBXDB_BAD_REQUEST')
      await refusedLocally(blobs.get(k), 'SBXDB_BAD_REQUEST')
      await refusedLocally(blobs.head(k), 'SBXDB_BAD_REQUEST')
      await refusedLocally(blobs.delete(k), 'SBXDB_BAD_REQUEST')
      expect(await snapshot(blobs)).toEqual(before)
    })
  })

  const badAttrs: Array<[string, object]> = [
    ['a metadata name with an unpaired surrogate', { customMetadata: { 'a\udc00': 'x' } }],
    ['a metadata value with an unpaired surrogate', { customMetadata: { a: 'x\ud800' } }],
    ['metadata over 8 KiB counted in UTF-8 bytes', { customMetadata: { é: 'é'.repeat(4096) } }],
    ['a metadata value that is not a string', { customMetadata: { a: 1 } }],
    ['metadata that is not an object', { customMetadata: 'a=b' }],
    ['metadata over 8 KiB', { customMetadata: { a: 'x'.repeat(5000), b: 'y'.repeat(5000) } }],
    ['a content type with a control character', { contentType: 'text/plain\r\nX-Evil: 1' }],
    ['a content type with surrounding blanks', { contentType: ' text/plain' }],
    ['a content type over 8 KiB', { contentType: `text/${'x'.repeat(8192)}` }],
    ['a content type that is not a string', { contentType: 7 }],
    ['a negative expectedLength', { expectedLength: -1 }],
    ['a fractional expectedLength', { expectedLength: 1.5 }],
    ['an expectedLength that is not a number', { expectedLength: '3' }],
  ]

  it.each(badAttrs)('%s is SBXDB_BAD_REQUEST, changing nothing', async (_, options) => {
    await withStore(async ({ blobs }) => {
      await blobs.put('obj', 'old', { contentType: 'text/plain', customMetadata: { a: 'b' } })
      const before = await snapshot(blobs)
      await refusedLocally(blobs.put('obj', 'new', options as never), 'SBXDB_BAD_REQUEST')
      await refusedLocally(blobs.put('other', streamOf([enc.encode('new')]), options as never), 'SBXDB_BAD_REQUEST')
      expect(await snapshot(blobs)).toEqual(before)
      expect(await (await blobs.get('obj'))!.text()).toBe('old')
    })
  })

  it('a body of another kind is SBXDB_BAD_REQUEST, changing nothing', async () => {
    await withStore(async ({ blobs }) => {
      for (const body of [42, {}, [1, 2], true]) {
        await refusedLocally(blobs.put('obj', body as never), 'SBXDB_BAD_REQUEST')
      }
      const locked = streamOf([enc.encode('x')])
      locked.getReader()
      await refusedLocally(blobs.put('obj', locked), 'SBXDB_BAD_REQUEST')
      // A stream yielding something other than bytes fails part-way.
      await refusedLocally(blobs.put('obj', streamOf(['text' as never])), 'SBXDB_BAD_REQUEST')
      expect(await everything(blobs)).toEqual([])
    })
  })

  it('bad list arguments are SBXDB_BAD_REQUEST', async () => {
    await withStore(async ({ blobs }) => {
      for (const opts of [{ limit: -1 }, { limit: 1001 }, { limit: 1.5 }, { limit: '10' }, { prefix: 'a\ud800' }, { cursor: '\udfff' }, { prefix: 5 }]) {
        await refusedLocally(blobs.list(opts as never), 'SBXDB_BAD_REQUEST')
      }
    })
  })
})

describe('delete', () => {
  it('a missing key resolves', async () => {
    await withStore(async ({ blobs }) => {
      await expect(blobs.delete('never-stored')).resolves.toBeUndefined()
      await expect(blobs.delete(fileKey('never-stored'))).resolves.toBeUndefined()
      expect(await everything(blobs)).toEqual([])
    })
  })

  it('a blob a checkpoint names is SBXDB_BLOB_IN_USE and stays', async () => {
    await withStore(async ({ blobs, checkpoints }) => {
      const key = fileKey('in use')
      await blobs.put(key, 'in use')
      const lease = await checkpoints.acquireWriter('t1')
      await checkpoints.append({
        checkpoint: {
          id: 'c1',
          threadId: 't1',
          parentCheckpointId: null,
          createdAt: 1,
          reason: 'automatic',
          files: [{ path: 'a.txt', kind: 'file', blobKey: key, size: 6 }],
          conversation: [],
          artifacts: [],
        },
        expectedHeadId: null,
        writer: lease,
      })
      await lease.release()
      const before = await snapshot(blobs)
      await refusedByServer(blobs.delete(key), 'SBXDB_BLOB_IN_USE', 409)
      expect(await snapshot(blobs)).toEqual(before)
      expect(await (await blobs.get(key))!.text()).toBe('in use')
    })
  })

  it('a plain object is removed; its bytes stay for the sweep', async () => {
    await withStore(async ({ blobs }) => {
      await blobs.put('gone', 'bytes')
      await blobs.delete('gone')
      expect(await blobs.head('gone')).toBeNull()
      expect(await blobs.get('gone')).toBeNull()
      expect((await everything(blobs)).map((r) => r.key)).toEqual([`sandbox-artifacts/sha256/${sha256('bytes')}`])
    })
  })
})

describe('list', () => {
  it('pages through 1,000 keys, each once, in UTF-8 byte order', async () => {
    await withStore(async ({ blobs }) => {
      // Code points above U+FFFF sort after U+E000..U+FFFF in UTF-8 but
      // before them in UTF-16: the order must be the bytes'.
      const tails = ['a', 'Z', 'é', '\uffff', '😀', '\ue000', '0', '~']
      const keys = Array.from({ length: 1000 }, (_, i) => `page/${tails[i % tails.length]}${String(i).padStart(4, '0')}`)
      for (let i = 0; i < keys.length; i += 16) {
        await Promise.all(keys.slice(i, i + 16).map((k) => blobs.put(k, k.slice(5))))
      }
      const want = [...keys].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)))
      const seen: Array<string> = []
      let cursor: string | undefined
      let pages = 0
      for (;;) {
        const page = await blobs.list({ prefix: 'page/', limit: 100, ...(cursor === undefined ? {} : { cursor }) })
        pages++
        seen.push(...page.objects.map((o) => o.key))
        if (pages < 10) {
          expect(page.objects).toHaveLength(100)
          expect(page.truncated).toBe(true)
          expect(page.cursor).toBeTypeOf('string')
        } else {
          expect(page.truncated).toBe(false)
          expect(page).not.toHaveProperty('cursor')
        }
        if (!page.truncated) break
        cursor = page.cursor
        expect(pages).toBeLessThanOrEqual(10)
      }
      expect(pages).toBe(10)
      expect(seen).toEqual(want)
      const wholePage = await blobs.list({ prefix: 'page/' })
      expect(wholePage.truncated).toBe(false)
      expect(wholePage.objects.map((o) => o.key)).toEqual(want)
      expect(await blobs.list({ prefix: 'nothing/' })).toEqual({ objects: [], truncated: false })
      // limit 0: an empty page, not truncated, without a cursor, however
      // many keys match.
      expect(await blobs.list({ prefix: 'page/', limit: 0 })).toEqual({ objects: [], truncated: false })
      expect(await blobs.list({ limit: 0, cursor: want[3] })).toEqual({ objects: [], truncated: false })
    })
  })
})

describe('failures', () => {
  it('a HEAD refused by the server is its error, never a missing blob', async () => {
    const other = await connect({ url: inject('url'), token: 'not-the-token' })
    try {
      const key = fileKey('x')
      await refusedByServer(other.blobs.head(key), 'SBXDB_UNAUTHORIZED', 401)
      await refusedByServer(other.blobs.get(key), 'SBXDB_UNAUTHORIZED', 401)
      await refusedByServer(other.blobs.delete(key), 'SBXDB_UNAUTHORIZED', 401)
      await refusedByServer(other.blobs.put(key, 'x'), 'SBXDB_UNAUTHORIZED', 401)
      await refusedByServer(other.blobs.list(), 'SBXDB_UNAUTHORIZED', 401)
    } finally {
      await other.close()
    }
  })

  it('a body the server cuts short errors the stream, never ends it', async () => {
    // A server of its own, whose stored bytes this test damages.
    const server = await startServer(inject('sbxdbBin'))
    const own = await connect({ socketPath: server.socketPath })
    try {
      const data = bytesOf(6 << 20, 21)
      const hex = sha256(data)
      const key = `sandbox-files/sha256/${hex}`
      await own.blobs.put(key, data)
      const file = execFileSync('find', [join(server.dir, 'store', 'blobs', 'large'), '-name', hex], { encoding: 'utf8' }).trim()
      expect(file).not.toBe('')
      chmodSync(file, 0o600)
      const fd = openSync(file, 'r+')
      const pos = statSync(file).size - 100
      const b = Buffer.alloc(1)
      readSync(fd, b, 0, 1, pos)
      b[0] = b[0]! ^ 0xff
      writeSync(fd, b, 0, 1, pos)
      closeSync(fd)

      const whole = await own.blobs.get(key)
      const err = await whole!.arrayBuffer().then(() => undefined, (e: unknown) => e)
      expect(err).toBeInstanceOf(SbxdbTransportError)
      expect((err as SbxdbTransportError).failure).toBe('connection-reset')

      const part = await own.blobs.get(key, { range: { offset: 10, length: 10 } })
      await expect(readBody(part!)).rejects.toBeInstanceOf(SbxdbTransportError)

      const streamed = await own.blobs.get(key)
      const reader = streamed!.body.getReader()
      let n = 0
      const end = await (async () => {
        for (;;) {
          const r = await reader.read()
          if (r.done) return 'done'
          n += r.value.byteLength
        }
      })().catch((e: unknown) => e)
      expect(end).toBeInstanceOf(SbxdbTransportError)
      expect(n).toBeLessThan(data.byteLength)
    } finally {
      await own.close()
      await server.stop()
    }
  })

  it('a content-addressed body that does not hash to its key errors the stream', async () => {
    // A stand-in server that sends the wrong bytes for a blob, with every
    // header right: the client's own check is what catches it.
    const dir = mkdtempSync(join(tmpdir(), 'sbxts-fake-'))
    const socketPath = join(dir, 'fake.sock')
    const right = enc.encode('right bytes')
    const key = fileKey(right)
    const fake = http.createServer((req, res) => {
      if (req.url === '/v1/health') {
        res.setHeader('content-type', 'application/json')
        res.end(JSON.stringify({ ok: true, version: 'fake', format: 2, store: dir }))
        return
      }
      res.writeHead(200, {
        'content-length': String(right.byteLength),
        etag: `"${sha256(right)}"`,
        'x-sbxdb-uploaded': '1',
        'content-type': 'application/octet-stream',
      })
      res.end(enc.encode('wrong bytes'))
    })
    await new Promise<void>((res) => fake.listen(socketPath, res))
    const client = await connect({ socketPath })
    try {
      const got = await client.blobs.get(key)
      const err = await got!.arrayBuffer().then(() => undefined, (e: unknown) => e)
      expect(err).toBeInstanceOf(SbxdbError)
      expect((err as SbxdbError).code).toBe('SANDBOX_SNAPSHOT_INVALID_BLOB')
      // A plain key names no digest: its bytes are the server's to verify.
      const part = await client.blobs.get('plain-key')
      expect(await part!.text()).toBe('wrong bytes')
    } finally {
      await client.close()
      await new Promise<void>((res) => fake.close(() => res()))
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
