// One HTTP/1.1 exchange with sbxdb serve at a time, over a unix socket or
// TCP, with a pool of kept-alive connections; answers that are errors
// become the package's error classes (errors.ts). Everything above this
// file speaks in paths and JSON values.

import http from 'node:http'
import https from 'node:https'
import type { ClientRequest, IncomingHttpHeaders, IncomingMessage } from 'node:http'
import { Readable } from 'node:stream'
import {
  SbxdbError,
  SbxdbTransportError,
  checkpointError,
  isSandboxCheckpointErrorCode,
} from './errors.js'
import type { SbxdbTransportFailure } from './errors.js'

/** Where the server is, and how long to wait for it. */
export interface ConnectOptions {
  /** The server's unix socket (`DIR/sbxdb.sock` by default). */
  socketPath?: string
  /** The server's TCP address, e.g. `http://127.0.0.1:7420`. */
  url?: string
  /** The bearer token a TCP listener requires (`sbxdb serve --token-file`). */
  token?: string
  /**
   * How long a request may wait with no byte moving before it fails with a
   * `timeout` transport error. Default 120 000 ms.
   */
  timeoutMs?: number
}

/** A request body: JSON text, bytes, or a stream of bytes. */
export type RequestBody = string | Uint8Array | Readable | null

/** An answer whose body the caller reads (or discards with `drain`). */
export interface Exchange {
  status: number
  headers: IncomingHttpHeaders
  body: IncomingMessage
}

/** Per-request options of `Transport.exchange` and `Transport.call`. */
export interface ExchangeInit {
  headers?: Record<string, string>
  body?: RequestBody
  /**
   * Whether sending the request twice has the effect of sending it once, so
   * that it may be sent again when a kept-alive connection drops before any
   * answer. Default: true for GET, HEAD, PUT and DELETE, false for POST.
   */
  idempotent?: boolean
  /**
   * The idle timeout of this request, in ms, instead of the client's; 0
   * waits as long as the server works (a sweep sends nothing until done).
   */
  timeoutMs?: number
}

/**
 * The options of a call that only reads (a POST whose body names what to
 * read): sent again if a kept-alive connection drops before its answer.
 */
export const read: Pick<ExchangeInit, 'idempotent'> = { idempotent: true }

const defaultTimeoutMs = 120_000

/**
 * The largest header block of an answer the client reads: a blob's
 * metadata header, 8 KiB of names and values, escapes to at most about
 * 100 KiB (docs/API.md, "Blobs and objects").
 */
const maxResponseHeaderBytes = 256 << 10

// The pool closes a connection idle for this long, well before the
// server's 120 s, so that a request never lands on a connection the server
// is closing.
const poolIdleMs = 60_000

interface Shared {
  agent: http.Agent
  closed: boolean
  /** Every request whose exchange has not ended, of every view. */
  inflight: Set<ClientRequest>
}

/** The connection to one server, shared by every store of a client. */
export class Transport {
  /** The server's address as given (the socket path or the URL). */
  readonly address: string
  private readonly shared: Shared
  private readonly target: { socketPath?: string; host?: string; port?: number; protocol: 'http:' | 'https:' }
  private readonly token: string | undefined
  private readonly timeoutMs: number
  private readonly extraHeaders: (() => Record<string, string>) | undefined
  /** This view's requests whose exchange has not ended. */
  private readonly inflight = new Set<ClientRequest>()

  private constructor(
    address: string,
    shared: Shared,
    target: Transport['target'],
    token: string | undefined,
    timeoutMs: number,
    extraHeaders?: () => Record<string, string>,
  ) {
    this.address = address
    this.shared = shared
    this.target = target
    this.token = token
    this.timeoutMs = timeoutMs
    this.extraHeaders = extraHeaders
  }

  /** A transport to the server `options` names. It connects lazily. */
  static open(options: ConnectOptions): Transport {
    const { socketPath, url, token } = options
    if ((socketPath === undefined) === (url === undefined)) {
      throw new TypeError('connect needs exactly one of socketPath and url')
    }
    const timeoutMs = options.timeoutMs ?? defaultTimeoutMs
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
      throw new RangeError('timeoutMs must be a positive number of milliseconds')
    }
    let target: Transport['target']
    let address: string
    let agent: http.Agent
    if (socketPath !== undefined) {
      if (typeof socketPath !== 'string' || socketPath === '') {
        throw new TypeError('socketPath must be a non-empty path')
      }
      target = { socketPath, protocol: 'http:' }
      address = socketPath
      agent = new http.Agent({ keepAlive: true, timeout: poolIdleMs })
    } else {
      let parsed: URL
      try {
        parsed = new URL(String(url))
      } catch {
        throw new TypeError(`url ${JSON.stringify(url)} is not a URL`)
      }
      if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
        throw new TypeError(`url ${JSON.stringify(url)}: only http: and https: are served`)
      }
      if (parsed.pathname !== '/' || parsed.search !== '' || parsed.username !== '') {
        throw new TypeError(`url ${JSON.stringify(url)}: give the server's origin only, e.g. http://127.0.0.1:7420`)
      }
      const port = parsed.port === '' ? (parsed.protocol === 'https:' ? 443 : 80) : Number(parsed.port)
      target = { host: parsed.hostname.replace(/^\[|\]$/g, ''), port, protocol: parsed.protocol }
      address = parsed.origin
      agent =
        parsed.protocol === 'https:'
          ? new https.Agent({ keepAlive: true, timeout: poolIdleMs })
          : new http.Agent({ keepAlive: true, timeout: poolIdleMs })
    }
    return new Transport(address, { agent, closed: false, inflight: new Set() }, target, token, timeoutMs)
  }

  /**
   * A transport on the same connections that adds `headers()` to every
   * request (test stores name their store and clock this way).
   */
  withHeaders(headers: () => Record<string, string>): Transport {
    return new Transport(this.address, this.shared, this.target, this.token, this.timeoutMs, headers)
  }

  /**
   * Ends every exchange of this view still running (a body nobody reads
   * included): each fails with a `closed` transport error.
   */
  abort(): void {
    for (const req of this.inflight) end(req, this.closedError())
  }

  /**
   * Ends every exchange of every view and closes every pooled connection;
   * later requests fail with `closed`.
   */
  close(): void {
    this.shared.closed = true
    for (const req of this.shared.inflight) end(req, this.closedError())
    this.shared.agent.destroy()
  }

  private closedError(): SbxdbTransportError {
    return new SbxdbTransportError('closed', this.address, 'the sbxdb client is closed')
  }

  /**
   * Sends one request and resolves once the answer's status and headers
   * arrived, whatever the status. The idle timeout runs until the body has
   * been read: a body nobody reads is closed after it. A request that a
   * kept-alive connection lost before any answer is sent again once, but
   * only when it is idempotent and its body can be sent again: the server
   * may have applied a request whose answer was lost, and a write sent twice
   * would be refused for its own first effect (an append's DUPLICATE_ID).
   */
  async exchange(method: string, path: string, init: ExchangeInit = {}): Promise<Exchange> {
    const again = (init.idempotent ?? method !== 'POST') && !(init.body instanceof Readable)
    try {
      return await this.once(method, path, init)
    } catch (err) {
      if (again && err instanceof StaleConnection) return this.once(method, path, init)
      throw err instanceof StaleConnection ? err.transportError : err
    }
  }

  private once(method: string, path: string, init: ExchangeInit): Promise<Exchange> {
    if (this.shared.closed) return Promise.reject(this.closedError())
    const headers: Record<string, string> = { ...this.extraHeaders?.(), ...init.headers }
    if (this.token !== undefined) headers.authorization = `Bearer ${this.token}`
    const body = init.body ?? null
    if (typeof body === 'string') headers['content-length'] = String(Buffer.byteLength(body))
    else if (body instanceof Uint8Array) headers['content-length'] = String(body.byteLength)
    const request = this.target.protocol === 'https:' ? https.request : http.request
    return new Promise<Exchange>((resolve, reject) => {
      let answered = false
      let bodyError: unknown
      const req = request({
        ...this.target,
        agent: this.shared.agent,
        method,
        path,
        headers,
        // A blob's metadata header may be larger than Node's 16 KiB default.
        maxHeaderSize: maxResponseHeaderBytes,
      })
      this.inflight.add(req)
      this.shared.inflight.add(req)
      const ended = () => {
        this.inflight.delete(req)
        this.shared.inflight.delete(req)
      }
      // An exchange ends when its answer's body closes, or with the request
      // when no answer came.
      req.on('close', () => {
        if (!answered) ended()
      })
      const timeoutMs = init.timeoutMs ?? this.timeoutMs
      req.setTimeout(timeoutMs, () => {
        end(req, new SbxdbTransportError('timeout', this.address,
          `${method} ${path}: nothing from the sbxdb server at ${this.address} for ${timeoutMs} ms`))
      })
      req.on('response', (res) => {
        answered = true
        responses.set(req, res)
        res.on('close', ended)
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: res })
      })
      req.on('error', (err) => {
        if (answered) return // the body's reader sees it
        if (bodyError !== undefined) {
          reject(bodyError)
          return
        }
        const te = this.transportError(err, method, path)
        if (req.reusedSocket && isResetBeforeAnswer(err)) reject(new StaleConnection(te))
        else reject(te)
      })
      if (body instanceof Readable) {
        body.on('error', (err) => {
          bodyError = err
          req.destroy(err)
        })
        body.pipe(req)
      } else {
        req.end(body ?? undefined)
      }
    })
  }

  /**
   * Sends `value` as JSON and resolves with the JSON answer; an answer that
   * is an error rejects with the package's error for it.
   */
  async call<T>(
    method: 'GET' | 'POST',
    path: string,
    value?: unknown,
    init: Pick<ExchangeInit, 'idempotent' | 'timeoutMs'> = {},
  ): Promise<T> {
    const body = value === undefined ? null : jsonOf(value)
    const headers: Record<string, string> = { accept: 'application/json' }
    if (body !== null) headers['content-type'] = 'application/json'
    const ex = await this.exchange(method, path, { ...init, headers, body })
    if (ex.status >= 300) throw await this.errorOf(ex, `${method} ${path}`)
    const text = await this.readText(ex, `${method} ${path}`)
    try {
      return JSON.parse(text) as T
    } catch {
      throw new SbxdbTransportError('bad-response', this.address,
        `${method} ${path}: the answer is not JSON: ${text.slice(0, 200)}`)
    }
  }

  /** The whole body of an answer, as UTF-8 text. */
  async readText(ex: Exchange, what: string): Promise<string> {
    const chunks: Buffer[] = []
    try {
      for await (const chunk of ex.body) chunks.push(chunk as Buffer)
    } catch (err) {
      throw this.transportError(err, what, '')
    }
    if (!ex.body.complete) {
      throw new SbxdbTransportError('connection-reset', this.address,
        `${what}: the sbxdb server at ${this.address} cut the answer short`)
    }
    return Buffer.concat(chunks).toString('utf8')
  }

  /**
   * The error an answer with an error status stands for: the contract's
   * class for its 13 codes, SbxdbError for the server's own codes.
   */
  async errorOf(ex: Exchange, what: string): Promise<Error> {
    const requestId = header(ex.headers, 'x-request-id')
    let code = header(ex.headers, 'x-sbxdb-code')
    let message = header(ex.headers, 'x-sbxdb-message')
    let text = ''
    try {
      text = await this.readText(ex, what)
    } catch {
      // The headers carry the code and message too.
    }
    if (text !== '') {
      try {
        const parsed = JSON.parse(text) as { code?: unknown; message?: unknown }
        if (typeof parsed.code === 'string') code = parsed.code
        if (typeof parsed.message === 'string') message = parsed.message
      } catch {
        // Not the server's error body; the headers decide.
      }
    }
    if (code === undefined) {
      return new SbxdbTransportError('bad-response', this.address,
        `${what}: status ${ex.status} without an sbxdb error code from ${this.address}` +
          (text === '' ? '' : `: ${text.slice(0, 200)}`))
    }
    message ??= code
    // The server's message starts with its code; the code is a member here.
    if (message.startsWith(`${code}: `)) message = message.slice(code.length + 2)
    if (isSandboxCheckpointErrorCode(code)) return checkpointError(code, message)
    return new SbxdbError(code, message, ex.status, requestId)
  }

  /** A transport error that says what failed, for a Node network error. */
  transportError(err: unknown, method: string, path: string): SbxdbTransportError {
    if (err instanceof SbxdbTransportError) return err
    if (this.shared.closed) return this.closedError()
    const what = path === '' ? method : `${method} ${path}`
    const code = (err as NodeJS.ErrnoException | undefined)?.code
    const where = this.target.socketPath !== undefined ? `socket ${this.address}` : this.address
    let failure: SbxdbTransportFailure = 'network'
    let message: string
    switch (code) {
      case 'ENOENT':
        failure = 'socket-missing'
        message = `no sbxdb server socket at ${this.address} (is sbxdb serve running for this store?)`
        break
      case 'ECONNREFUSED':
        failure = 'connection-refused'
        message = `nothing accepts connections at ${where} (the sbxdb server is down)`
        break
      case 'EACCES':
      case 'EPERM':
        failure = 'permission-denied'
        message = `permission denied connecting to ${where} (the socket is the store owner's, mode 0600)`
        break
      case 'ECONNRESET':
      case 'EPIPE':
      case 'ECONNABORTED':
        failure = 'connection-reset'
        message = `the connection to the sbxdb server at ${this.address} dropped`
        break
      case 'ETIMEDOUT':
        failure = 'timeout'
        message = `connecting to the sbxdb server at ${this.address} timed out`
        break
      default:
        message = `cannot reach the sbxdb server at ${this.address}: ${(err as Error | undefined)?.message ?? String(err)}`
    }
    return new SbxdbTransportError(failure, this.address, `${what}: ${message}`, { cause: err })
  }
}

/** The answer of each request that has one, for `end`. */
const responses = new WeakMap<ClientRequest, IncomingMessage>()

/**
 * Ends an exchange with `err`: its answer's body, when it has one, fails
 * with `err` (so its reader learns why), and so does the request.
 */
function end(req: ClientRequest, err: SbxdbTransportError): void {
  const res = responses.get(req)
  if (res !== undefined && !res.destroyed) res.destroy(err)
  req.destroy(err)
}

/**
 * `value` as JSON text. A BigInt, which JSON has no form for, travels as
 * its decimal text: a string where the contract wants a number, which the
 * server refuses with the contract's code for that member (a createdAt is
 * INVALID_ENTRY, a writer's fence matches no lease).
 */
export function jsonOf(value: unknown): string {
  try {
    return JSON.stringify(value)
  } catch (err) {
    if (!(err instanceof TypeError) || !/bigint/i.test(err.message)) throw err
    return JSON.stringify(value, (_key, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))
  }
}

/** A request that a kept-alive connection lost before any answer. */
class StaleConnection extends Error {
  constructor(readonly transportError: SbxdbTransportError) {
    super(transportError.message)
  }
}

function isResetBeforeAnswer(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code
  return code === 'ECONNRESET' || code === 'EPIPE'
}

/** The first value of a response header. */
export function header(headers: IncomingHttpHeaders, name: string): string | undefined {
  const v = headers[name]
  return Array.isArray(v) ? v[0] : v
}
