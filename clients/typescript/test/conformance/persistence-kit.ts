// TanStack AI's persistence conformance suite (runPersistenceConformance,
// in TanStack/ai packages/ai-persistence/src/testkit/conformance.ts),
// ported case by case: @tanstack/ai-persistence is not published, so the
// cases are restated here against this package's types. The suite covers
// upstream's seven stores; like upstream, one persistence serves every
// case (the cases use disjoint ids and keys), a store the persistence
// lacks fails unless it is declared in `skip`, and each case of a declared
// store is reported as skipped, naming the store. Where a case adds to
// upstream's it says so.

import { beforeAll, describe, expect, it } from 'vitest'
import type { TestContext } from 'vitest'
import type { ArtifactRecord, ArtifactStore, BlobStore, MessageStore, ModelMessage } from '../../src/index.js'

/** Upstream's seven store keys. */
export type PersistenceStoreKey = 'messages' | 'runs' | 'interrupts' | 'metadata' | 'generationRuns' | 'artifacts' | 'blobs'

/** The stores this port can run; the others are reported as skipped. */
interface PortedStores {
  messages?: MessageStore
  artifacts?: ArtifactStore
  blobs?: BlobStore
}

export interface PersistenceUnderTest {
  stores: PortedStores & Partial<Record<PersistenceStoreKey, unknown>>
}

export interface PersistenceConformanceOptions {
  /** Stores the persistence deliberately lacks; their cases are skipped. */
  skip?: Array<PersistenceStoreKey>
}

/** A value the contract says is there, or a failure saying what is missing. */
function required<T>(value: T | null | undefined, what: string): T {
  if (value === null || value === undefined) throw new Error(`persistence conformance: expected ${what} to exist`)
  return value
}

/** Every byte of `stream`, in one array. */
async function readStream(stream: ReadableStream<Uint8Array>): Promise<Uint8Array> {
  const parts: Array<Uint8Array> = []
  const reader = stream.getReader()
  for (;;) {
    const r = await reader.read()
    if (r.done) break
    parts.push(r.value)
  }
  return new Uint8Array(Buffer.concat(parts))
}

/** `bytes` as a web stream that declares no length (a TransformStream's readable side). */
function lengthlessStream(bytes: Uint8Array): ReadableStream<Uint8Array> {
  const source = required(new Response(bytes).body, 'a Response body')
  return source.pipeThrough(new TransformStream<Uint8Array, Uint8Array>())
}

/** `n` bytes counting 0..250 over and over. */
function pattern(n: number): Uint8Array {
  return new Uint8Array(n).map((_, i) => i % 251)
}

/** The member order of upstream's ArtifactRecord interface. */
const artifactMemberOrder = ['artifactId', 'runId', 'threadId', 'blobKey', 'name', 'mimeType', 'size', 'sourceUrl', 'createdAt']

/**
 * The cases of the stores this package does not offer, by store, as
 * upstream names them: registered so that a run reports each as skipped.
 */
const unportedCases: Partial<Record<PersistenceStoreKey, Array<string>>> = {
  runs: [
    'creates, resumes idempotently, updates, and gets',
    'createOrResume never resurrects a finished run',
    'findActiveRun returns the most recent running run for a thread',
    'lists runs by thread when supported',
    'lists reclaimable detached runs when supported',
  ],
  interrupts: [
    'creates, resolves, cancels, and lists by thread and run',
    'create is insert-if-absent: a duplicate id never clobbers a resolved interrupt',
    'lists ordered by requestedAt ascending even when inserts are out of order',
  ],
  generationRuns: [
    'creates, resumes idempotently, updates, and gets',
    'findLatestForThread returns the most recently started linked run',
  ],
  metadata: ['sets, gets, namespaces, and deletes without composite-key collisions'],
}

/**
 * Registers the suite for the persistence `make` returns (called once,
 * before the cases).
 */
export function runPersistenceConformance(
  name: string,
  make: () => Promise<PersistenceUnderTest>,
  options: PersistenceConformanceOptions = {},
): void {
  const skip = new Set(options.skip ?? [])

  describe(`AIPersistence conformance: ${name}`, () => {
    let persistence: PersistenceUnderTest
    beforeAll(async () => {
      persistence = await make()
    })

    /** The store of `key`, or undefined after skipping the case when `key` is declared skipped. */
    function storeOf<K extends keyof PortedStores>(key: K, ctx: TestContext): NonNullable<PortedStores[K]> {
      const store = persistence.stores[key]
      if (store !== undefined && store !== null) return store as NonNullable<PortedStores[K]>
      if (skip.has(key)) ctx.skip(`store '${key}' not provided (declared in skip)`)
      throw new Error(`persistence conformance: store '${key}' is missing; provide it or declare it in skip`)
    }

    for (const [key, cases] of Object.entries(unportedCases) as Array<[PersistenceStoreKey, Array<string>]>) {
      describe(key, () => {
        for (const title of cases) {
          it(title, (ctx) => {
            if (persistence.stores[key] === undefined && skip.has(key)) {
              ctx.skip(`store '${key}' not provided (declared in skip)`)
            }
            throw new Error(`persistence conformance: store '${key}' is ${persistence.stores[key] === undefined ? 'missing; declare it in skip' : 'provided, but this port has no cases for it'}`)
          })
        }
      })
    }

    describe('messages', () => {
      it('round-trips a thread and returns [] for unknown threads', async (ctx) => {
        const store = storeOf('messages', ctx)
        expect(await store.loadThread('thread-unknown')).toEqual([])
        const first: Array<ModelMessage> = [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: 'hello' },
        ]
        await store.saveThread('thread-msg', first)
        expect(await store.loadThread('thread-msg')).toEqual(first)
        // A save replaces the thread; it does not append.
        await store.saveThread('thread-msg', [{ role: 'user', content: 'redo' }])
        expect(await store.loadThread('thread-msg')).toEqual([{ role: 'user', content: 'redo' }])
      })

      it('round-trips rich message shapes with deep equality', async (ctx) => {
        const store = storeOf('messages', ctx)
        const rich: Array<ModelMessage> = [
          { role: 'user', content: 'plain string' },
          {
            role: 'assistant',
            content: '',
            toolCalls: [{ id: 'call-1', type: 'function', function: { name: 'search', arguments: '{"query":"weather in Paris"}' } }],
          },
          { role: 'tool', content: '{"temperature":21,"unit":"C"}', toolCallId: 'call-1' },
          {
            role: 'user',
            content: [
              { type: 'text', content: 'What is in this image?' },
              { type: 'image', source: { type: 'url', value: 'https://example.com/cat.png', mimeType: 'image/png' } },
            ],
          },
          {
            role: 'assistant',
            content: 'Here is my answer.',
            thinking: [{ content: 'The user is asking about the image.', signature: 'sig-1' }],
          } as ModelMessage,
        ]
        await store.saveThread('thread-rich', rich)
        expect(await store.loadThread('thread-rich')).toEqual(rich)
      })
    })

    describe('artifacts', () => {
      const artifact = (fields: Partial<ArtifactRecord> & Pick<ArtifactRecord, 'artifactId'>): ArtifactRecord => ({
        runId: 'run-art',
        threadId: 'thread-art',
        name: 'image.png',
        mimeType: 'image/png',
        size: 3,
        createdAt: 100,
        ...fields,
      })

      it('saves as an upsert, gets, and lists by run', async (ctx) => {
        const store = storeOf('artifacts', ctx)
        expect(await store.get('art-missing')).toBeNull()
        expect(await store.list('run-unknown')).toEqual([])

        await store.save(artifact({ artifactId: 'art-a', blobKey: 'artifacts/run-art/art-a', createdAt: 100 }))
        await store.save(artifact({ artifactId: 'art-b', sourceUrl: 'https://provider.example/expiring.png', createdAt: 200 }))
        await store.save(artifact({ artifactId: 'art-c', runId: 'run-art-other' }))

        const a = await store.get('art-a')
        expect(a).toMatchObject({
          artifactId: 'art-a',
          runId: 'run-art',
          threadId: 'thread-art',
          blobKey: 'artifacts/run-art/art-a',
          name: 'image.png',
          mimeType: 'image/png',
          size: 3,
          createdAt: 100,
        })
        // sbxdb's addition: members come back in the order of upstream's
        // ArtifactRecord interface.
        expect(Object.keys(required(a, 'art-a'))).toEqual(artifactMemberOrder.filter((m) => m !== 'sourceUrl'))
        const b = await store.get('art-b')
        expect(b).toMatchObject({ sourceUrl: 'https://provider.example/expiring.png' })
        expect(Object.keys(required(b, 'art-b'))).toEqual(artifactMemberOrder.filter((m) => m !== 'blobKey'))

        expect((await store.list('run-art')).map((r) => r.artifactId)).toEqual(['art-a', 'art-b'])

        // Saving an id again replaces its record.
        await store.save(artifact({ artifactId: 'art-a', name: 'renamed.png', size: 9 }))
        const updated = await store.get('art-a')
        expect(updated).toMatchObject({ name: 'renamed.png', size: 9 })
        expect(updated?.blobKey).toBeUndefined()
        expect((await store.list('run-art')).map((r) => r.artifactId)).toEqual(['art-a', 'art-b'])
      })

      it('deletes one artifact and every artifact for a run', async (ctx) => {
        const store = storeOf('artifacts', ctx)
        await store.save(artifact({ artifactId: 'art-d1', runId: 'run-del' }))
        await store.save(artifact({ artifactId: 'art-d2', runId: 'run-del' }))
        await store.save(artifact({ artifactId: 'art-keep', runId: 'run-keep' }))

        await store.delete('art-d1')
        expect(await store.get('art-d1')).toBeNull()
        expect((await store.list('run-del')).map((r) => r.artifactId)).toEqual(['art-d2'])
        await store.delete('art-d1') // absent: no error

        await store.deleteForRun('run-del')
        expect(await store.list('run-del')).toEqual([])
        expect(await store.get('art-d2')).toBeNull()
        expect((await store.list('run-keep')).map((r) => r.artifactId)).toEqual(['art-keep'])
        await store.deleteForRun('run-del') // nothing left: no error
      })
    })

    describe('blobs', () => {
      it('round-trips bytes and metadata through put/get/head', async (ctx) => {
        const store = storeOf('blobs', ctx)
        expect(await store.get('blob-missing')).toBeNull()
        expect(await store.head('blob-missing')).toBeNull()

        const bytes = new Uint8Array([1, 2, 3, 4])
        const put = await store.put('blob/a', bytes, { contentType: 'image/png', customMetadata: { runId: 'run-blob' } })
        const described = { key: 'blob/a', size: 4, contentType: 'image/png', customMetadata: { runId: 'run-blob' } }
        expect(put).toMatchObject(described)
        const got = required(await store.get('blob/a'), 'blob/a')
        expect(new Uint8Array(await got.arrayBuffer())).toEqual(bytes)
        expect(got).toMatchObject(described)
        expect(await store.head('blob/a')).toMatchObject({ key: 'blob/a', size: 4 })

        // A string is stored as its UTF-8 and read back by text().
        await store.put('blob/text', 'héllo')
        expect(await required(await store.get('blob/text'), 'blob/text').text()).toBe('héllo')
        // So is an ArrayBuffer.
        await store.put('blob/buffer', new Uint8Array([9, 9]).buffer)
        const buffered = required(await store.get('blob/buffer'), 'blob/buffer')
        expect(new Uint8Array(await buffered.arrayBuffer())).toEqual(new Uint8Array([9, 9]))
      })

      it('accepts a stream body with no declared length', async (ctx) => {
        const store = storeOf('blobs', ctx)
        const bytes = pattern(64 * 1024)
        const put = await store.put('blob/stream', lengthlessStream(bytes), { contentType: 'application/octet-stream' })
        expect(put.size).toBe(bytes.byteLength)
        const got = required(await store.get('blob/stream'), 'blob/stream')
        expect(new Uint8Array(await got.arrayBuffer())).toEqual(bytes)
        expect(got.size).toBe(bytes.byteLength)
      })

      it('accepts expectedLength as an advisory hint for a stream body', async (ctx) => {
        const store = storeOf('blobs', ctx)
        const bytes = pattern(9 * 1024)
        const put = await store.put('blob/stream-hint', lengthlessStream(bytes), { expectedLength: bytes.byteLength })
        expect(put.size).toBe(bytes.byteLength)
        const got = required(await store.get('blob/stream-hint'), 'blob/stream-hint')
        expect(new Uint8Array(await got.arrayBuffer())).toEqual(bytes)
        expect(got.size).toBe(bytes.byteLength)
      })

      it('serves a byte range and reports the slice it served', async (ctx) => {
        const store = storeOf('blobs', ctx)
        const bytes = pattern(1024)
        await store.put('blob/range', bytes)

        const middle = required(await store.get('blob/range', { range: { offset: 100, length: 50 } }), 'blob/range')
        expect(new Uint8Array(await middle.arrayBuffer())).toEqual(bytes.slice(100, 150))
        expect(middle.size).toBe(1024) // the whole object's
        expect(middle.range).toEqual({ offset: 100, length: 50 })

        const tail = required(await store.get('blob/range', { range: { offset: 1000 } }), 'blob/range')
        expect(new Uint8Array(await tail.arrayBuffer())).toEqual(bytes.slice(1000))
        expect(tail.range).toEqual({ offset: 1000, length: 24 })

        // A length past the end is clamped to it.
        const clamped = required(await store.get('blob/range', { range: { offset: 1000, length: 1000 } }), 'blob/range')
        expect(clamped.range).toEqual({ offset: 1000, length: 24 })
        expect((await clamped.arrayBuffer()).byteLength).toBe(24)

        // body carries the same slice.
        const streamed = required(await store.get('blob/range', { range: { offset: 10, length: 5 } }), 'blob/range')
        expect(await readStream(required(streamed.body, 'the body'))).toEqual(bytes.slice(10, 15))

        const whole = required(await store.get('blob/range'), 'blob/range')
        expect(whole.range).toBeUndefined()
        await whole.body?.cancel()
      })

      it('overwrites an existing key and deletes silently', async (ctx) => {
        const store = storeOf('blobs', ctx)
        const first = await store.put('blob/over', new Uint8Array([1]), { contentType: 'text/plain', customMetadata: { v: '1' } })
        const second = await store.put('blob/over', new Uint8Array([2, 2, 2]), {
          contentType: 'application/octet-stream',
          customMetadata: { v: '2' },
        })
        expect(second).toMatchObject({ size: 3, contentType: 'application/octet-stream', customMetadata: { v: '2' } })
        expect(second.etag).not.toBe(first.etag)
        const after = required(await store.get('blob/over'), 'blob/over')
        expect(new Uint8Array(await after.arrayBuffer())).toEqual(new Uint8Array([2, 2, 2]))

        await store.delete('blob/over')
        expect(await store.get('blob/over')).toBeNull()
        expect(await store.head('blob/over')).toBeNull()
        await store.delete('blob/over') // absent: no error
      })

      it('lists by literal prefix in ascending key order', async (ctx) => {
        const store = storeOf('blobs', ctx)
        // '_' and '%' must not act as wildcards, nor case be ignored.
        for (const [key, byte] of [['list_/b', 2], ['list_/a', 1], ['list_/c', 3], ['list-x/d', 4], ['LIST_/e', 5]] as const) {
          await store.put(key, new Uint8Array([byte]))
        }
        const page = await store.list({ prefix: 'list_/' })
        expect(page.objects.map((o) => o.key)).toEqual(['list_/a', 'list_/b', 'list_/c'])
        expect(page.truncated).toBeFalsy()
        expect((await store.list({ prefix: 'list_/nothing-here' })).objects).toEqual([])
      })

      it('pages with a cursor and returns an empty page for limit 0', async (ctx) => {
        const store = storeOf('blobs', ctx)
        const keys = ['page/a', 'page/b', 'page/c', 'page/d', 'page/e']
        for (const key of keys) await store.put(key, new Uint8Array([1]))

        const empty = await store.list({ prefix: 'page/', limit: 0 })
        expect(empty.objects).toEqual([])
        expect(empty.truncated).toBeFalsy()
        expect(empty.cursor).toBeUndefined()

        // Pages of two visit every key once; each cursor is the last key of its page.
        const seen: Array<string> = []
        let cursor: string | undefined
        for (let pages = 0; pages < 10; pages++) {
          const r = await store.list({ prefix: 'page/', limit: 2, ...(cursor === undefined ? {} : { cursor }) })
          seen.push(...r.objects.map((o) => o.key))
          if (!r.truncated) break
          expect(r.cursor).toBe(r.objects.at(-1)?.key)
          cursor = r.cursor
        }
        expect(seen).toEqual(keys)

        // A page that holds exactly what is left is not truncated.
        const exact = await store.list({ prefix: 'page/', limit: 5 })
        expect(exact.objects.map((o) => o.key)).toEqual(keys)
        expect(exact.truncated).toBeFalsy()
      })
    })
  })
}
