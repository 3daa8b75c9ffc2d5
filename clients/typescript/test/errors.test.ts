// Every one of the contract's 13 codes reaches the caller as a
// SandboxCheckpointError with that code, of TanStack's subclass where
// TanStack has one; the server's own codes are SbxdbError, and an error
// answer without a code is a transport error. Checked on the classes, on
// answers from a stand-in server that refuses with each code (the client's
// mapping, whatever the server does), and on real refusals of sbxdb serve.

import { mkdtempSync, rmSync } from 'node:fs'
import http from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from 'vitest'
import {
  SandboxCheckpointConflictError,
  SandboxCheckpointDuplicateIdError,
  SandboxCheckpointError,
  SandboxCheckpointInvalidEntryError,
  SandboxCheckpointInvalidIdError,
  SandboxCheckpointNotHeadError,
  SandboxCheckpointParentMismatchError,
  SandboxCheckpointWriterConflictError,
  SandboxCheckpointWriterLostError,
  SbxdbError,
  SbxdbTransportError,
  connect,
  isSandboxCheckpointErrorCode,
} from '../src/index.js'
import type { Sbxdb, SbxdbTestStores, SandboxCheckpointErrorCode } from '../src/index.js'
import type { SandboxCheckpoint, SandboxCheckpointWriter } from '../src/types.js'
import { connectUnix, freshStore } from './helpers.js'

type ErrorClass = abstract new (...args: never[]) => SandboxCheckpointError

/** Each code, the class TanStack throws it as, and the status sbxdb serve sends (docs/API.md). */
const codes: Array<[SandboxCheckpointErrorCode, ErrorClass, string, number]> = [
  ['SANDBOX_SNAPSHOT_STALE_HEAD', SandboxCheckpointConflictError, 'SandboxCheckpointConflictError', 409],
  ['SANDBOX_SNAPSHOT_PARENT_MISMATCH', SandboxCheckpointParentMismatchError, 'SandboxCheckpointParentMismatchError', 409],
  ['SANDBOX_SNAPSHOT_DUPLICATE_ID', SandboxCheckpointDuplicateIdError, 'SandboxCheckpointDuplicateIdError', 409],
  ['SANDBOX_SNAPSHOT_NOT_HEAD', SandboxCheckpointNotHeadError, 'SandboxCheckpointNotHeadError', 409],
  ['SANDBOX_SNAPSHOT_WRITER_CONFLICT', SandboxCheckpointWriterConflictError, 'SandboxCheckpointWriterConflictError', 409],
  ['SANDBOX_SNAPSHOT_WRITER_LOST', SandboxCheckpointWriterLostError, 'SandboxCheckpointWriterLostError', 409],
  ['SANDBOX_SNAPSHOT_INVALID_ID', SandboxCheckpointInvalidIdError, 'SandboxCheckpointInvalidIdError', 400],
  ['SANDBOX_SNAPSHOT_INVALID_ENTRY', SandboxCheckpointInvalidEntryError, 'SandboxCheckpointInvalidEntryError', 400],
  ['SANDBOX_SNAPSHOT_CHECKPOINT_NOT_FOUND', SandboxCheckpointError, 'SandboxCheckpointError', 404],
  ['SANDBOX_SNAPSHOT_ATOMIC_FORK_REQUIRED', SandboxCheckpointError, 'SandboxCheckpointError', 409],
  ['SANDBOX_SNAPSHOT_FORK_SOURCE_NOT_FOUND', SandboxCheckpointError, 'SandboxCheckpointError', 404],
  ['SANDBOX_SNAPSHOT_FORK_SOURCE_THREAD_MISMATCH', SandboxCheckpointError, 'SandboxCheckpointError', 409],
  ['SANDBOX_SNAPSHOT_FORK_DESTINATION_NOT_EMPTY', SandboxCheckpointError, 'SandboxCheckpointError', 409],
]

const subclasses = codes.filter(([, cls]) => cls !== SandboxCheckpointError)

/** Fails unless `err` is the contract's error for `code`, of its class and name. */
function expectContractError(err: unknown, code: SandboxCheckpointErrorCode, cls: ErrorClass, name: string): void {
  expect(err).toBeInstanceOf(Error)
  expect(err).toBeInstanceOf(SandboxCheckpointError)
  expect(err).toBeInstanceOf(cls)
  expect((err as object).constructor).toBe(cls)
  expect(err).not.toBeInstanceOf(SbxdbError)
  expect(err).not.toBeInstanceOf(SbxdbTransportError)
  const e = err as SandboxCheckpointError
  expect(e.code).toBe(code)
  expect(e.name).toBe(name)
  expect(typeof e.message).toBe('string')
  expect(e.stack).toContain(name)
}

describe('the classes', () => {
  test('there are 13 codes, each with its own class or the base class', () => {
    expect(new Set(codes.map(([c]) => c)).size).toBe(13)
    expect(subclasses).toHaveLength(8)
    for (const [code] of codes) expect(isSandboxCheckpointErrorCode(code)).toBe(true)
    for (const other of ['SBXDB_NOT_FOUND', 'SANDBOX_SNAPSHOT_MISSING_BLOB', 'sandbox_snapshot_stale_head', '', 'constructor']) {
      expect(isSandboxCheckpointErrorCode(other)).toBe(false)
    }
  })

  test.each(subclasses)('new %s’s class carries its code and name', (code, cls, name) => {
    const Sub = cls as unknown as new (message: string) => SandboxCheckpointError
    const err = new Sub('the message')
    expectContractError(err, code, cls, name)
    expect(err.message).toBe('the message')
    expect(Object.prototype.toString.call(err)).toBe('[object Error]')
  })

  test.each(codes)('SandboxCheckpointError(%s) is the base class with that code', (code) => {
    const err = new SandboxCheckpointError(code, 'm')
    expectContractError(err, code, SandboxCheckpointError, 'SandboxCheckpointError')
  })

  test('the subclasses are siblings, not one another', () => {
    for (const [, a] of subclasses) {
      for (const [, b] of subclasses) {
        const Sub = a as unknown as new (message: string) => SandboxCheckpointError
        expect(new Sub('m') instanceof b).toBe(a === b)
      }
    }
  })

  test('SbxdbError and SbxdbTransportError are not contract errors', () => {
    const server = new SbxdbError('SBXDB_CORRUPT', 'damaged', 500, 'req-1')
    expect(server).toBeInstanceOf(Error)
    expect(server).not.toBeInstanceOf(SandboxCheckpointError)
    expect(server).toMatchObject({ name: 'SbxdbError', code: 'SBXDB_CORRUPT', status: 500, requestId: 'req-1' })
    const cause = new Error('ECONNREFUSED')
    const transport = new SbxdbTransportError('connection-refused', '/s.sock', 'down', { cause })
    expect(transport).toBeInstanceOf(Error)
    expect(transport).not.toBeInstanceOf(SandboxCheckpointError)
    expect(transport).not.toBeInstanceOf(SbxdbError)
    expect(transport).toMatchObject({ name: 'SbxdbTransportError', failure: 'connection-refused', address: '/s.sock' })
    expect(transport.cause).toBe(cause)
    expect(transport).not.toHaveProperty('code')
  })
})

describe('the client maps each code of an answer', () => {
  // A stand-in that answers POST /v1/checkpoints/head for thread CODE with
  // the refusal sbxdb serve would send for CODE; "headers:CODE" sends it in
  // the X-Sbxdb-Code and X-Sbxdb-Message headers only, as a HEAD answer
  // would carry it.
  let dir: string
  let fake: http.Server
  let sbx: Sbxdb

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sbxts-err-'))
    const statusOf = new Map<string, number>(codes.map(([c, , , s]) => [c, s]))
    fake = http.createServer((req, res) => {
      let body = ''
      req.setEncoding('utf8')
      req.on('data', (d: string) => (body += d))
      req.on('end', () => {
        if (req.url === '/v1/health') {
          res.setHeader('content-type', 'application/json')
          res.end(JSON.stringify({ ok: true, version: 'fake', format: 1, store: dir }))
          return
        }
        const { threadId } = JSON.parse(body) as { threadId: string }
        if (threadId === 'no-code') {
          res.statusCode = 500
          res.end('something broke')
          return
        }
        const headersOnly = threadId.startsWith('headers:')
        const code = headersOnly ? threadId.slice('headers:'.length) : threadId
        const message = `${code}: refused by the stand-in`
        res.statusCode = statusOf.get(code) ?? 500
        res.setHeader('x-sbxdb-code', code)
        res.setHeader('x-sbxdb-message', message)
        res.setHeader('x-request-id', 'fake-req')
        if (headersOnly) {
          res.end()
        } else {
          res.setHeader('content-type', 'application/json')
          res.end(JSON.stringify({ code, message }))
        }
      })
    })
    await new Promise<void>((resolve) => fake.listen(join(dir, 'fake.sock'), resolve))
    sbx = await connect({ socketPath: join(dir, 'fake.sock') })
  })
  afterAll(async () => {
    await sbx.close()
    await new Promise<void>((resolve) => fake.close(() => resolve()))
    rmSync(dir, { recursive: true, force: true })
  })

  test.each(codes)('%s in a JSON body', async (code, cls, name) => {
    const err = await sbx.checkpoints.getHead(code).then(() => expect.fail('no error'), (e: unknown) => e)
    expectContractError(err, code, cls, name)
    // The message is the server's, without its code in front.
    expect((err as Error).message).toBe('refused by the stand-in')
  })

  test.each(codes)('%s in headers only', async (code, cls, name) => {
    const err = await sbx.checkpoints.getHead(`headers:${code}`).then(() => expect.fail('no error'), (e: unknown) => e)
    expectContractError(err, code, cls, name)
    expect((err as Error).message).toBe('refused by the stand-in')
  })

  test('a server code is SbxdbError with its status and request id', async () => {
    const err = await sbx.checkpoints.getHead('SBXDB_CORRUPT').then(() => expect.fail('no error'), (e: unknown) => e)
    expect(err).toBeInstanceOf(SbxdbError)
    expect(err).not.toBeInstanceOf(SandboxCheckpointError)
    expect(err).toMatchObject({ code: 'SBXDB_CORRUPT', status: 500, requestId: 'fake-req', message: 'refused by the stand-in' })
  })

  test('an operations-layer code is SbxdbError, not a contract error', async () => {
    const err = await sbx.checkpoints
      .getHead('SANDBOX_SNAPSHOT_MISSING_BLOB')
      .then(() => expect.fail('no error'), (e: unknown) => e)
    expect(err).toBeInstanceOf(SbxdbError)
    expect(err).not.toBeInstanceOf(SandboxCheckpointError)
    expect(err).toMatchObject({ code: 'SANDBOX_SNAPSHOT_MISSING_BLOB' })
  })

  test('an error status without a code is a bad-response transport error', async () => {
    const err = await sbx.checkpoints.getHead('no-code').then(() => expect.fail('no error'), (e: unknown) => e)
    expect(err).toBeInstanceOf(SbxdbTransportError)
    expect(err).not.toBeInstanceOf(SandboxCheckpointError)
    expect(err).toMatchObject({ failure: 'bad-response' })
    expect((err as Error).message).toContain('something broke')
  })
})

describe('real refusals of sbxdb serve', () => {
  let sbx: Sbxdb
  let store: SbxdbTestStores

  beforeAll(async () => {
    sbx = await connectUnix()
  })
  afterAll(async () => {
    await sbx.close()
  })
  beforeEach(async () => {
    store = await freshStore(sbx)
  })
  afterEach(async () => {
    await store.close()
  })

  const cls = new Map(codes.map(([c, k, n]) => [c, [k, n] as const]))
  async function refusedWith(p: Promise<unknown>, code: SandboxCheckpointErrorCode): Promise<void> {
    const err = await p.then(() => expect.fail(`no ${code}`), (e: unknown) => e)
    const [k, n] = cls.get(code)!
    expectContractError(err, code, k, n)
  }

  function cp(id: string, threadId: string, parentCheckpointId: string | null): SandboxCheckpoint {
    return { id, threadId, parentCheckpointId, createdAt: 1, reason: 'automatic', files: [], conversation: [], artifacts: [] }
  }

  test('append, deleteHead and leases', async () => {
    const w = await store.checkpoints.acquireWriter('t')
    await store.checkpoints.append({ checkpoint: cp('c1', 't', null), expectedHeadId: null, writer: w })

    await refusedWith(store.checkpoints.acquireWriter('t'), 'SANDBOX_SNAPSHOT_WRITER_CONFLICT')
    await refusedWith(
      store.checkpoints.append({ checkpoint: cp('c2', 't', null), expectedHeadId: null, writer: w }),
      'SANDBOX_SNAPSHOT_STALE_HEAD',
    )
    await refusedWith(
      store.checkpoints.append({ checkpoint: cp('c2', 't', null), expectedHeadId: 'c1', writer: w }),
      'SANDBOX_SNAPSHOT_PARENT_MISMATCH',
    )
    await refusedWith(
      store.checkpoints.append({ checkpoint: cp('c1', 't', 'c1'), expectedHeadId: 'c1', writer: w }),
      'SANDBOX_SNAPSHOT_DUPLICATE_ID',
    )
    await refusedWith(
      store.checkpoints.append({ checkpoint: { ...cp('c2', 't', 'c1'), createdAt: 1.5 }, expectedHeadId: 'c1', writer: w }),
      'SANDBOX_SNAPSHOT_INVALID_ENTRY',
    )
    // A writer that is not an object skips the client's checks; the server
    // refuses its missing thread id.
    await refusedWith(
      store.checkpoints.append({
        checkpoint: cp('c2', 't', 'c1'),
        expectedHeadId: 'c1',
        writer: null as unknown as SandboxCheckpointWriter,
      }),
      'SANDBOX_SNAPSHOT_INVALID_ID',
    )
    await refusedWith(store.checkpoints.deleteHead({ threadId: 't', checkpointId: 'nope', writer: w }), 'SANDBOX_SNAPSHOT_NOT_HEAD')
    await refusedWith(
      store.checkpoints.deleteHead({ threadId: 't', checkpointId: 'c1', writer: { ...w, fence: w.fence + 1 } }),
      'SANDBOX_SNAPSHOT_WRITER_LOST',
    )
    // Nothing changed.
    expect(await store.checkpoints.getHead('t')).toBe('c1')
    expect((await store.checkpoints.list('t')).map((c) => c.id)).toEqual(['c1'])
  })

  test('fork', async () => {
    const w = await store.checkpoints.acquireWriter('src')
    await store.checkpoints.append({ checkpoint: cp('c1', 'src', null), expectedHeadId: null, writer: w })
    const d = await store.checkpoints.acquireWriter('dst')
    const fork = (over: Partial<Parameters<typeof store.checkpoints.forkFromCheckpoint>[0]>) =>
      store.checkpoints.forkFromCheckpoint({
        sourceThreadId: 'src',
        sourceCheckpointId: 'c1',
        destinationThreadId: 'dst',
        destinationCheckpointId: 'f1',
        createdAt: 2,
        writer: d,
        ...over,
      })
    await refusedWith(fork({ sourceCheckpointId: 'missing' }), 'SANDBOX_SNAPSHOT_FORK_SOURCE_NOT_FOUND')
    await refusedWith(fork({ sourceThreadId: 'other' }), 'SANDBOX_SNAPSHOT_FORK_SOURCE_THREAD_MISMATCH')
    await refusedWith(fork({ destinationCheckpointId: 'c1' }), 'SANDBOX_SNAPSHOT_FORK_DESTINATION_NOT_EMPTY')
    expect(await store.checkpoints.getHead('dst')).toBeNull()
    await fork({})
    expect(await store.checkpoints.getHead('dst')).toBe('f1')
  })

  test('client-side refusals are the same classes', async () => {
    await refusedWith(store.checkpoints.get(''), 'SANDBOX_SNAPSHOT_INVALID_ID')
    await refusedWith(store.checkpoints.list('\ud800'), 'SANDBOX_SNAPSHOT_INVALID_ID')
  })
})
