// The R2-shaped blob store on sbxdb serve (docs/API.md, "Blobs and
// objects"). Bodies stream both ways and are never held whole: a put pipes
// its body to the connection as the caller's stream yields it, and a get's
// body is a web stream that reads the connection only as fast as the caller
// reads it. A key or attribute the server would refuse is refused here,
// before a byte is sent, with the code the server would give.

import { createHash } from 'node:crypto'
import type { IncomingHttpHeaders } from 'node:http'
import { Readable } from 'node:stream'
import { SbxdbError, SbxdbTransportError } from './errors.js'
import type { Exchange, RequestBody, Transport } from './transport.js'
import { header } from './transport.js'
import type {
  BlobBody,
  BlobListResult,
  BlobObject,
  BlobPutOptions,
  BlobRange,
  BlobRecord,
  BlobStore,
} from './types.js'
import { hasUnpairedSurrogate, objectOf } from './validate.js'

/** The longest plain object key, in UTF-8 bytes. */
const maxObjectKeyBytes = 1024

/** The most a content type, or all metadata names and values together, may hold, in UTF-8 bytes. */
const maxObjectMetaBytes = 8 << 10

/** The most keys one `list` page holds. */
const maxListLimit = 1000

/**
 * The header carrying a plain object's custom metadata both ways: a JSON
 * object of strings, in ASCII (docs/API.md, "Blobs and objects").
 */
const metadataHeader = 'x-sbxdb-metadata'

/** The shape of a content-addressed key: the hex is the sha256 of the bytes. */
const contentAddressed = /^sandbox-(?:files|artifacts)\/sha256\/([0-9a-f]{64})$/

/** The prefixes under which every key must be content-addressed. */
const contentAddressedPrefixes = ['sandbox-files/sha256/', 'sandbox-artifacts/sha256/']

/** The server's Object info (docs/API.md, "Types on the wire"). */
interface WireObjectInfo {
  key: string
  size: number
  uploaded: number
  sha256: string
  contentType?: string
  customMetadata?: Record<string, string>
}

function badRequest(message: string): SbxdbError {
  return new SbxdbError('SBXDB_BAD_REQUEST', message, 400)
}

function rangeError(message: string): SbxdbError {
  return new SbxdbError('SBXDB_RANGE', message, 416)
}

function lengthMismatch(key: string, message: string): SbxdbError {
  return new SbxdbError('SBXDB_BLOB_MISMATCH', `${key}: ${message}`, 400)
}

/** The sha256 hex a content-addressed key names, or undefined for a plain key. */
function digestOf(key: string): string | undefined {
  return contentAddressed.exec(key)?.[1]
}

/**
 * Throws SBXDB_BAD_REQUEST unless `key` is a content-addressed key or a
 * plain object key the server takes: 1 to 1024 bytes of well-formed UTF-8,
 * no NUL, and no empty, `.` or `..` segment. A key under a content-addressed
 * prefix must be exactly `<prefix><64 lower-case hex>`.
 */
function assertKey(key: unknown): asserts key is string {
  if (typeof key !== 'string') throw badRequest('a blob key must be a string')
  if (contentAddressedPrefixes.some((p) => key.startsWith(p))) {
    if (!contentAddressed.test(key)) {
      throw badRequest(`blob key ${JSON.stringify(key)}: want sandbox-files/sha256/<64 lower-case hex> or sandbox-artifacts/sha256/<64 lower-case hex>`)
    }
    return
  }
  let problem: string | undefined
  if (key === '') problem = 'is empty'
  else if (hasUnpairedSurrogate(key)) problem = 'is not well-formed Unicode (it holds an unpaired surrogate)'
  else if (key.includes('\0')) problem = 'contains NUL'
  else if (Buffer.byteLength(key, 'utf8') > maxObjectKeyBytes) problem = `is longer than ${maxObjectKeyBytes} bytes of UTF-8`
  else {
    for (const seg of key.split('/')) {
      if (seg === '') problem = 'has an empty segment (a leading, trailing or doubled "/")'
      else if (seg === '.' || seg === '..') problem = `has a "${seg}" segment`
      if (problem !== undefined) break
    }
  }
  if (problem !== undefined) {
    throw badRequest(`object key ${JSON.stringify(key.length > 80 ? `${key.slice(0, 80)}…` : key)} ${problem}`)
  }
}

/**
 * The path of `key`, each segment percent-encoded; a `.` or `..` segment
 * travels as `%2E`, so that no key reaches the router as a dot segment.
 */
function blobPath(key: string): string {
  const segs = key.split('/').map((s) => (s === '.' || s === '..' ? s.replaceAll('.', '%2E') : encodeURIComponent(s)))
  return `/v1/blobs/${segs.join('/')}`
}

/** Whether `cp` is a code point Go's unicode.IsSpace holds (the server trims those). */
function isSpace(cp: number): boolean {
  return (
    (cp >= 0x09 && cp <= 0x0d) ||
    cp === 0x20 ||
    cp === 0x85 ||
    cp === 0xa0 ||
    cp === 0x1680 ||
    (cp >= 0x2000 && cp <= 0x200a) ||
    cp === 0x2028 ||
    cp === 0x2029 ||
    cp === 0x202f ||
    cp === 0x205f ||
    cp === 0x3000
  )
}

/**
 * Throws SBXDB_BAD_REQUEST unless `value` is text a header carries
 * unchanged: a well-formed string of at most 8 KiB of UTF-8, no control
 * characters, no surrounding blanks.
 */
function assertHeaderText(value: unknown, what: string): asserts value is string {
  if (typeof value !== 'string') throw badRequest(`${what} must be a string`)
  let problem: string | undefined
  if (hasUnpairedSurrogate(value)) problem = 'is not well-formed Unicode (it holds an unpaired surrogate)'
  else if (Buffer.byteLength(value, 'utf8') > maxObjectMetaBytes) problem = `is longer than ${maxObjectMetaBytes} bytes`
  else if (/[\u0000-\u001f\u007f]/.test(value)) problem = 'holds a control character'
  else if (value !== '' && (isSpace(value.codePointAt(0)!) || isSpace(value.codePointAt(value.length - 1)!))) {
    problem = 'starts or ends with a blank'
  }
  if (problem !== undefined) throw badRequest(`${what} ${JSON.stringify(value.slice(0, 80))} ${problem}`)
}

/** UTF-8 text as a header value: Node writes header strings as Latin-1, byte for byte. */
function headerValue(text: string): string {
  return Buffer.from(text, 'utf8').toString('latin1')
}

/** A header value Node read as Latin-1, as the UTF-8 text the server sent. */
function headerText(value: string): string {
  return Buffer.from(value, 'latin1').toString('utf8')
}

/** JSON text in ASCII: every character from DEL up escaped as `\uXXXX`. */
function asciiJSON(text: string): string {
  return text.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}

/**
 * The headers of a plain object's put: its content type and metadata,
 * checked. Metadata names and values are any well-formed strings (R2's
 * custom metadata), at most 8 KiB of UTF-8 together.
 */
function attributeHeaders(options: BlobPutOptions): Record<string, string> {
  const headers: Record<string, string> = {}
  const { contentType, customMetadata } = options
  if (contentType !== undefined) {
    assertHeaderText(contentType, 'contentType')
    if (contentType !== '') headers['content-type'] = headerValue(contentType)
  }
  if (customMetadata !== undefined) {
    const md = objectOf(customMetadata)
    if (md === undefined || Array.isArray(md)) throw badRequest('customMetadata must be an object of strings')
    let total = 0
    const members: Array<string> = []
    for (const [name, value] of Object.entries(md)) {
      const shown = JSON.stringify(name.length > 80 ? `${name.slice(0, 80)}…` : name)
      if (hasUnpairedSurrogate(name)) throw badRequest(`customMetadata name ${shown} holds an unpaired surrogate`)
      if (typeof value !== 'string') throw badRequest(`customMetadata ${shown} must be a string`)
      if (hasUnpairedSurrogate(value)) throw badRequest(`customMetadata ${shown}: the value holds an unpaired surrogate`)
      total += Buffer.byteLength(name, 'utf8') + Buffer.byteLength(value, 'utf8')
      members.push(`${JSON.stringify(name)}:${JSON.stringify(value)}`)
    }
    if (total > maxObjectMetaBytes) {
      throw badRequest(`customMetadata of ${total} bytes is more than ${maxObjectMetaBytes}`)
    }
    if (members.length > 0) headers[metadataHeader] = asciiJSON(`{${members.join(',')}}`)
  }
  return headers
}

/** The metadata an answer's header carries, or undefined when it has none or it does not parse. */
function metadataOf(value: string | undefined): Record<string, string> | undefined | 'bad' {
  if (value === undefined || value === '') return undefined
  let md: unknown
  try {
    md = JSON.parse(value)
  } catch {
    return 'bad'
  }
  if (md === null || typeof md !== 'object' || Array.isArray(md)) return 'bad'
  if (Object.values(md).some((v) => typeof v !== 'string')) return 'bad'
  return Object.keys(md).length > 0 ? (md as Record<string, string>) : undefined
}

/**
 * A copy of the bytes of a view, taken when put is called: the bytes go out
 * later, and a caller changing its buffer meanwhile must change nothing
 * stored (as fetch copies its body).
 */
function bytesOf(view: ArrayBufferView): Buffer {
  return Buffer.from(new Uint8Array(view.buffer, view.byteOffset, view.byteLength))
}

/**
 * A web stream as a Node stream of at most `want` bytes (undefined: any
 * length). With `want`, the last byte is held back until the source has
 * ended, so that a longer or shorter source fails the request before the
 * server could take it for complete. A failure of the source, or a chunk
 * that is not bytes, fails the request the same way; `abort` cancels the
 * source.
 */
function sourceOf(
  stream: ReadableStream<Uint8Array>,
  key: string,
  want: number | undefined,
): { readable: Readable; abort: () => void } {
  const reader = stream.getReader()
  let finished = false
  async function* chunks(): AsyncGenerator<Buffer> {
    let n = 0
    let held: Buffer | undefined
    try {
      for (;;) {
        const r = await reader.read()
        if (r.done) break
        const v: unknown = r.value
        let chunk: Buffer
        if (ArrayBuffer.isView(v)) chunk = bytesOf(v)
        else if (v instanceof ArrayBuffer) chunk = Buffer.from(v)
        else throw badRequest(`${key}: the body stream yielded a ${typeof v}, not bytes`)
        if (chunk.byteLength === 0) continue
        n += chunk.byteLength
        if (want === undefined || n < want) {
          yield chunk
        } else if (n === want) {
          if (chunk.byteLength > 1) yield chunk.subarray(0, chunk.byteLength - 1)
          held = chunk.subarray(chunk.byteLength - 1)
        } else {
          throw lengthMismatch(key, `the body is more than the ${want} bytes of expectedLength`)
        }
      }
      finished = true
      if (want !== undefined && n < want) {
        throw lengthMismatch(key, `the body is ${n} bytes, fewer than the ${want} bytes of expectedLength`)
      }
      if (held !== undefined) yield held
    } finally {
      if (!finished) {
        finished = true
        reader.cancel().catch(() => undefined)
      }
    }
  }
  const readable = Readable.from(chunks(), { objectMode: false })
  return {
    readable,
    abort() {
      if (!finished) {
        finished = true
        reader.cancel().catch(() => undefined)
      }
      readable.destroy()
    },
  }
}

/**
 * What a put sends: the body, its Content-Length when known, and how to
 * stop its source. Lengths are checked against `expectedLength` first.
 */
function requestBodyOf(
  key: string,
  body: BlobBody | undefined,
  expectedLength: number | undefined,
): { body: RequestBody; length: number | undefined; abort: () => void } {
  const none = (): void => undefined
  const sized = (bytes: Uint8Array): { body: RequestBody; length: number; abort: () => void } => {
    if (expectedLength !== undefined && expectedLength !== bytes.byteLength) {
      throw lengthMismatch(key, `the body is ${bytes.byteLength} bytes, not the ${expectedLength} bytes of expectedLength`)
    }
    return { body: bytes, length: bytes.byteLength, abort: none }
  }
  if (body === null || body === undefined) return sized(new Uint8Array(0))
  if (typeof body === 'string') return sized(Buffer.from(body, 'utf8'))
  if (body instanceof ArrayBuffer) return sized(new Uint8Array(body.slice(0)))
  if (ArrayBuffer.isView(body)) return sized(bytesOf(body))
  if (body instanceof Blob) {
    if (expectedLength !== undefined && expectedLength !== body.size) {
      throw lengthMismatch(key, `the Blob is ${body.size} bytes, not the ${expectedLength} bytes of expectedLength`)
    }
    const s = sourceOf(body.stream() as ReadableStream<Uint8Array>, key, body.size)
    return { body: s.readable, length: body.size, abort: s.abort }
  }
  if (body instanceof ReadableStream) {
    if (body.locked) throw badRequest(`${key}: the body stream is locked (read already)`)
    const s = sourceOf(body as ReadableStream<Uint8Array>, key, expectedLength)
    return { body: s.readable, length: expectedLength, abort: s.abort }
  }
  throw badRequest(`${key}: a body is a ReadableStream, ArrayBuffer, ArrayBufferView, string, Blob or null`)
}

/** A BlobRecord of the server's Object info. */
function recordOfInfo(info: WireObjectInfo): BlobRecord {
  const rec: BlobRecord = {
    key: info.key,
    size: info.size,
    etag: info.sha256,
    uploaded: new Date(info.uploaded),
  }
  if (info.contentType !== undefined && info.contentType !== '') rec.contentType = info.contentType
  if (info.customMetadata !== undefined && Object.keys(info.customMetadata).length > 0) {
    rec.customMetadata = { ...info.customMetadata }
  }
  return rec
}

/** Parses a Content-Range value: `bytes FIRST-LAST/TOTAL`, or a star for the range. */
function contentRange(value: string | undefined): { first?: number; last?: number; total?: number } {
  const m = /^bytes (?:(\d+)-(\d+)|\*)\/(\d+)$/.exec(value ?? '')
  if (m === null) return {}
  return {
    first: m[1] === undefined ? undefined : Number(m[1]),
    last: m[2] === undefined ? undefined : Number(m[2]),
    total: Number(m[3]),
  }
}

/** An empty web stream. */
function emptyStream(): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>({
    start(controller) {
      controller.close()
    },
  })
}

/** A web stream's bytes, read to its end. */
async function readAll(stream: ReadableStream<Uint8Array>, size: number): Promise<ArrayBuffer> {
  const out = new Uint8Array(size)
  let n = 0
  const extra: Array<Uint8Array> = []
  const reader = stream.getReader()
  for (;;) {
    const r = await reader.read()
    if (r.done) break
    const chunk = r.value
    if (n + chunk.byteLength <= size) out.set(chunk, n)
    else extra.push(chunk)
    n += chunk.byteLength
  }
  if (extra.length === 0 && n === size) return out.buffer
  // Only when the stream and the size disagree, which the body checks refuse.
  const all = Buffer.concat([out.subarray(0, Math.min(n, size)), ...extra])
  return all.buffer.slice(all.byteOffset, all.byteOffset + all.byteLength) as ArrayBuffer
}

/** The body of a blob read, and its record, as one BlobObject. */
function blobObject(
  record: BlobRecord,
  body: ReadableStream<Uint8Array>,
  bodyLength: number,
  range: { offset: number; length: number } | undefined,
): BlobObject {
  let used = false
  const read = (): Promise<ArrayBuffer> => {
    if (used || body.locked) return Promise.reject(new TypeError(`${record.key}: the body was read already`))
    used = true
    return readAll(body, bodyLength)
  }
  const obj: BlobObject = {
    ...record,
    body,
    arrayBuffer: read,
    text: async () => new TextDecoder().decode(await read()),
  }
  if (range !== undefined) obj.range = range
  return obj
}

/**
 * The blob store of the server (or test store) behind `t`. A `get` holds
 * its connection until its body is read to the end or cancelled
 * (`body.cancel()`); `arrayBuffer()` and `text()` read it whole.
 */
export function createBlobStore(t: Transport): BlobStore {
  const badResponse = (what: string, detail: string): SbxdbTransportError =>
    new SbxdbTransportError('bad-response', t.address, `${what}: ${detail}`)

  /** The record a GET's or HEAD's headers describe; `size` is the whole blob's. */
  function recordOfHeaders(key: string, headers: IncomingHttpHeaders, size: number, what: string): BlobRecord {
    const etag = header(headers, 'etag')?.replace(/^"|"$/g, '')
    const uploaded = Number(header(headers, 'x-sbxdb-uploaded'))
    if (etag === undefined || !/^[0-9a-f]{64}$/.test(etag)) throw badResponse(what, 'no sha256 ETag in the answer')
    if (!Number.isSafeInteger(uploaded)) throw badResponse(what, 'no upload time in the answer')
    if (!Number.isSafeInteger(size) || size < 0) throw badResponse(what, 'no size in the answer')
    const rec: BlobRecord = { key, size, etag, uploaded: new Date(uploaded) }
    if (digestOf(key) !== undefined) return rec // a blob keeps no attributes
    const ct = header(headers, 'content-type')
    if (ct !== undefined && ct !== '') rec.contentType = headerText(ct)
    const md = metadataOf(header(headers, metadataHeader))
    if (md === 'bad') throw badResponse(what, `the ${metadataHeader} header is not a JSON object of strings`)
    if (md !== undefined) rec.customMetadata = md
    return rec
  }

  /**
   * The body of a GET as a web stream read on demand. It errors, rather
   * than ends, when the answer was cut short (the server found damage after
   * the status went out), and, for a whole content-addressed blob, when the
   * bytes do not hash to the key.
   */
  function bodyOf(ex: Exchange, key: string, length: number, digest: string | undefined, what: string): ReadableStream<Uint8Array> {
    const res = ex.body
    const it = res[Symbol.asyncIterator]() as AsyncIterator<Buffer>
    const hash = digest === undefined ? undefined : createHash('sha256')
    let n = 0
    const cut = (cause?: unknown): SbxdbTransportError =>
      new SbxdbTransportError('connection-reset', t.address,
        `${what}: the sbxdb server at ${t.address} cut the body short after ${n} of ${length} bytes ` +
          '(the blob failed verification, or the connection dropped)', cause === undefined ? undefined : { cause })
    return new ReadableStream<Uint8Array>(
      {
        async pull(controller) {
          let r: IteratorResult<Buffer>
          try {
            r = await it.next()
          } catch (err) {
            // A timeout or a close of the client says so; anything else
            // ended the answer early.
            controller.error(err instanceof SbxdbTransportError ? err : cut(err))
            return
          }
          if (!r.done) {
            n += r.value.byteLength
            if (n > length) {
              controller.error(badResponse(what, `the body is longer than its ${length} bytes`))
              res.destroy()
              return
            }
            hash?.update(r.value)
            controller.enqueue(r.value)
            return
          }
          if (!res.complete || n !== length) {
            controller.error(cut())
          } else if (hash !== undefined && hash.digest('hex') !== digest) {
            controller.error(new SbxdbError('SANDBOX_SNAPSHOT_INVALID_BLOB',
              `${key}: the bytes read do not hash to the key`, 422))
          } else {
            controller.close()
          }
        },
        cancel() {
          res.destroy()
        },
      },
      { highWaterMark: 0 },
    )
  }

  async function head(key: string): Promise<BlobRecord | null> {
    assertKey(key)
    const what = `HEAD ${key}`
    const ex = await t.exchange('HEAD', blobPath(key))
    if (ex.status === 404 && header(ex.headers, 'x-sbxdb-code') === 'SBXDB_NOT_FOUND') {
      ex.body.resume()
      return null
    }
    if (ex.status !== 200) throw await t.errorOf(ex, what)
    ex.body.resume()
    return recordOfHeaders(key, ex.headers, Number(header(ex.headers, 'content-length')), what)
  }

  return {
    async put(key: string, body: BlobBody, options: BlobPutOptions = {}): Promise<BlobRecord> {
      assertKey(key)
      const opts: BlobPutOptions = { ...objectOf(options) }
      const { expectedLength } = opts
      if (expectedLength !== undefined && (!Number.isSafeInteger(expectedLength) || expectedLength < 0)) {
        throw badRequest(`${key}: expectedLength must be a whole number of bytes >= 0`)
      }
      // A content-addressed blob keeps no content type or metadata.
      const headers = digestOf(key) === undefined ? attributeHeaders(opts) : {}
      const sent = requestBodyOf(key, body, expectedLength)
      if (sent.length !== undefined) headers['content-length'] = String(sent.length)
      const what = `PUT ${key}`
      try {
        const ex = await t.exchange('PUT', blobPath(key), { headers, body: sent.body })
        if (ex.status !== 200) throw await t.errorOf(ex, what)
        const text = await t.readText(ex, what)
        let info: WireObjectInfo
        try {
          info = JSON.parse(text) as WireObjectInfo
        } catch {
          throw badResponse(what, `the answer is not JSON: ${text.slice(0, 200)}`)
        }
        return recordOfInfo(info)
      } catch (err) {
        sent.abort()
        throw err
      }
    },

    async get(key: string, options: { range?: BlobRange } = {}): Promise<BlobObject | null> {
      assertKey(key)
      const range = objectOf(options)?.range
      let offset = 0
      let length: number | undefined
      const headers: Record<string, string> = {}
      if (range !== undefined) {
        const r = objectOf(range)
        offset = r?.offset as number
        length = r?.length as number | undefined
        if (typeof offset !== 'number' || !Number.isSafeInteger(offset) || offset < 0) {
          throw rangeError(`${key}: range offset must be a whole number >= 0`)
        }
        if (length !== undefined && (typeof length !== 'number' || !Number.isSafeInteger(length) || length < 0)) {
          throw rangeError(`${key}: range length must be a whole number >= 0`)
        }
        if (length !== undefined && !Number.isSafeInteger(offset + length)) {
          throw rangeError(`${key}: range end is past 2^53`)
        }
        headers.range = length === undefined ? `bytes=${offset}-` : `bytes=${offset}-${offset + length - 1}`
      }
      // A range holding no byte at or before the end reads nothing: the
      // record alone, as HEAD gives it.
      const emptyAt = async (): Promise<BlobObject | null> => {
        const rec = await head(key)
        if (rec === null) return null
        if (offset > rec.size) throw rangeError(`${key}: offset ${offset} is past the ${rec.size} bytes of the blob`)
        return blobObject(rec, emptyStream(), 0, { offset, length: 0 })
      }
      if (length === 0) return emptyAt()
      const what = `GET ${key}`
      const ex = await t.exchange('GET', blobPath(key), { headers })
      if (ex.status === 404 && header(ex.headers, 'x-sbxdb-code') === 'SBXDB_NOT_FOUND') {
        ex.body.resume()
        return null
      }
      if (ex.status === 416 && range !== undefined && contentRange(header(ex.headers, 'content-range')).total === offset) {
        ex.body.resume()
        return emptyAt()
      }
      if (ex.status !== (range === undefined ? 200 : 206)) {
        if (ex.status >= 300) throw await t.errorOf(ex, what)
        ex.body.destroy()
        throw badResponse(what, `status ${ex.status} to ${range === undefined ? 'a whole read' : 'a range'}`)
      }
      let size: number
      let got: { offset: number; length: number } | undefined
      const bodyLength = Number(header(ex.headers, 'content-length'))
      if (range === undefined) {
        size = bodyLength
      } else {
        const cr = contentRange(header(ex.headers, 'content-range'))
        if (cr.first !== offset || cr.last === undefined || cr.total === undefined || cr.last - cr.first + 1 !== bodyLength) {
          ex.body.destroy()
          throw badResponse(what, `Content-Range ${header(ex.headers, 'content-range')} is not the range asked for`)
        }
        size = cr.total
        got = { offset, length: bodyLength }
      }
      let rec: BlobRecord
      try {
        rec = recordOfHeaders(key, ex.headers, size, what)
      } catch (err) {
        ex.body.destroy()
        throw err
      }
      const digest = range === undefined ? digestOf(key) : undefined
      return blobObject(rec, bodyOf(ex, key, bodyLength, digest, what), bodyLength, got)
    },

    head,

    async delete(key: string): Promise<void> {
      assertKey(key)
      const ex = await t.exchange('DELETE', blobPath(key))
      if (ex.status === 204 || (ex.status === 404 && header(ex.headers, 'x-sbxdb-code') === 'SBXDB_NOT_FOUND')) {
        ex.body.resume()
        return
      }
      throw await t.errorOf(ex, `DELETE ${key}`)
    },

    async list(options: { prefix?: string; cursor?: string; limit?: number } = {}): Promise<BlobListResult> {
      const { prefix, cursor, limit } = { ...objectOf(options) }
      const query: Array<string> = []
      for (const [name, value] of [['prefix', prefix], ['cursor', cursor]] as const) {
        if (value === undefined) continue
        if (typeof value !== 'string') throw badRequest(`list: ${name} must be a string`)
        if (hasUnpairedSurrogate(value)) throw badRequest(`list: ${name} holds an unpaired surrogate`)
        if (value !== '') query.push(`${name}=${encodeURIComponent(value)}`)
      }
      if (limit !== undefined) {
        if (typeof limit !== 'number' || !Number.isSafeInteger(limit) || limit < 0 || limit > maxListLimit) {
          throw badRequest(`list: limit must be a whole number from 0 to ${maxListLimit}`)
        }
        query.push(`limit=${limit}`)
      }
      const path = query.length === 0 ? '/v1/blobs' : `/v1/blobs?${query.join('&')}`
      const r = await t.call<{ objects: Array<WireObjectInfo>; cursor: string | null }>('GET', path)
      const out: BlobListResult = { objects: r.objects.map(recordOfInfo), truncated: r.cursor !== null }
      if (r.cursor !== null) out.cursor = r.cursor
      return out
    },
  }
}
