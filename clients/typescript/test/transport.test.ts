// When a request gets no answer, the client says what failed: an
// SbxdbTransportError whose `failure` names the cause, never a contract
// code. Refusals the server does answer (a missing token) are SbxdbError.
// Connections are kept alive and reused.

import { mkdtempSync, rmSync } from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, inject, test } from 'vitest'
import {
  SandboxCheckpointError,
  SbxdbError,
  SbxdbTransportError,
  connect,
} from '../src/index.js'
import type { SbxdbTransportFailure } from '../src/index.js'
import { connectTcp, connectUnix } from './helpers.js'
import { startServer } from './server.js'

const scratch = mkdtempSync(join(tmpdir(), 'sbxts-tr-'))
afterAll(() => rmSync(scratch, { recursive: true, force: true }))

let serial = 0
/** A path in the scratch directory no one has used. */
function freshPath(name: string): string {
  serial++
  return join(scratch, `${serial}-${name}`)
}

/** A thread id no other case uses. */
function freshThread(): string {
  return `transport-${process.pid}-${Date.now()}-${++serial}`
}

/**
 * The transport error `p` rejects with; fails unless it is one, with one of
 * `failures`, and carries no contract or server code.
 */
async function transportFailure(
  p: Promise<unknown>,
  failures: ReadonlyArray<SbxdbTransportFailure>,
): Promise<SbxdbTransportError> {
  const err = await p.then(
    () => expect.fail('the call succeeded'),
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(SbxdbTransportError)
  expect(err).not.toBeInstanceOf(SandboxCheckpointError)
  expect(err).not.toBeInstanceOf(SbxdbError)
  expect(err).not.toHaveProperty('code')
  const te = err as SbxdbTransportError
  expect(failures).toContain(te.failure)
  expect(te.name).toBe('SbxdbTransportError')
  return te
}

/** Listens on `where` and resolves once it accepts. */
function listen(server: net.Server, where: string | { host: string; port: number }): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    if (typeof where === 'string') server.listen(where, () => resolve())
    else server.listen(where.port, where.host, () => resolve())
  })
}

function closeServer(server: net.Server): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()))
}

describe('no server', () => {
  test('a socket path where no socket exists is socket-missing', async () => {
    const path = freshPath('absent.sock')
    const err = await transportFailure(connect({ socketPath: path }), ['socket-missing'])
    expect(err.address).toBe(path)
    expect(err.message).toContain(path)
  })

  test('a socket file no server listens on is connection-refused', async () => {
    // A server that dies without cleaning up leaves its socket file.
    const server = await startServer(inject('sbxdbBin'))
    try {
      const exited = new Promise((resolve) => server.process.once('exit', resolve))
      server.process.kill('SIGKILL')
      await exited
      await transportFailure(connect({ socketPath: server.socketPath }), ['connection-refused'])
    } finally {
      await server.stop()
    }
  })

  test('a TCP port nothing listens on is connection-refused', async () => {
    const probe = net.createServer()
    await listen(probe, { host: '127.0.0.1', port: 0 })
    const { port } = probe.address() as net.AddressInfo
    await closeServer(probe)
    await transportFailure(connect({ url: `http://127.0.0.1:${port}`, token: 'x' }), ['connection-refused'])
  })

  test('a server that accepts and never answers is a timeout', async () => {
    const held: Array<net.Socket> = []
    const silent = net.createServer((socket) => {
      held.push(socket) // read nothing, answer nothing
    })
    const path = freshPath('silent.sock')
    await listen(silent, path)
    try {
      const err = await transportFailure(connect({ socketPath: path, timeoutMs: 200 }), ['timeout'])
      expect(err.message).toContain('200 ms')
    } finally {
      for (const s of held) s.destroy()
      await closeServer(silent)
    }
  })
})

describe('TCP needs the token', () => {
  test('without a token a call is SBXDB_UNAUTHORIZED and changes nothing', async () => {
    const thread = freshThread()
    const anonymous = await connect({ url: inject('url') }) // health needs no token
    const authorized = await connectTcp()
    try {
      const err = await anonymous.messages
        .saveThread(thread, [{ role: 'user', content: 'hi' }])
        .then(() => expect.fail('saved without a token'), (e: unknown) => e)
      expect(err).toBeInstanceOf(SbxdbError)
      expect(err).not.toBeInstanceOf(SandboxCheckpointError)
      expect(err).toMatchObject({ code: 'SBXDB_UNAUTHORIZED', status: 401 })
      expect(await authorized.messages.loadThread(thread)).toEqual([])
    } finally {
      await anonymous.close()
      await authorized.close()
    }
  })

  test('a wrong token is SBXDB_UNAUTHORIZED and changes nothing', async () => {
    const thread = freshThread()
    const wrong = await connect({ url: inject('url'), token: `${inject('token')}x` })
    const authorized = await connectTcp()
    try {
      const err = await wrong.messages
        .saveThread(thread, [{ role: 'user', content: 'hi' }])
        .then(() => expect.fail('saved with a wrong token'), (e: unknown) => e)
      expect(err).toBeInstanceOf(SbxdbError)
      expect(err).toMatchObject({ code: 'SBXDB_UNAUTHORIZED', status: 401 })
      await expect(wrong.messages.loadThread(thread)).rejects.toMatchObject({ code: 'SBXDB_UNAUTHORIZED' })
      expect(await authorized.messages.loadThread(thread)).toEqual([])
    } finally {
      await wrong.close()
      await authorized.close()
    }
  })

  test('with the token the same call works', async () => {
    const thread = freshThread()
    const sbx = await connectTcp()
    try {
      await sbx.messages.saveThread(thread, [{ role: 'user', content: 'hi' }])
      expect(await sbx.messages.loadThread(thread)).toEqual([{ role: 'user', content: 'hi' }])
    } finally {
      await sbx.close()
    }
  })
})

describe('a server that stops and restarts', () => {
  test('a call after the server stopped fails as transport; after a restart on the same socket the client works again', async () => {
    const bin = inject('sbxdbBin')
    const socketPath = freshPath('restart.sock')
    const store = freshPath('restart-store')
    // Both servers serve one store directory on one socket path.
    const args = ['--db', store, '--listen', `unix:${socketPath}`]
    const thread = freshThread()
    const message = { role: 'user' as const, content: 'kept across the restart' }

    const first = await startServer(bin, { args })
    const sbx = await connect({ socketPath })
    try {
      await sbx.messages.saveThread(thread, [message])
      expect(await first.stop()).toBe(0)

      // A server that stops cleanly removes its socket; the pooled
      // connection it closed is not used again.
      const err = await transportFailure(sbx.messages.loadThread(thread), ['socket-missing'])
      expect(err.address).toBe(socketPath)

      const second = await startServer(bin, { args })
      try {
        // The same client reconnects; the store kept what was saved.
        expect(await sbx.messages.loadThread(thread)).toEqual([message])
        const fresh = await connect({ socketPath })
        try {
          expect(await fresh.messages.loadThread(thread)).toEqual([message])
        } finally {
          await fresh.close()
        }
      } finally {
        expect(await second.stop()).toBe(0)
      }
    } finally {
      await sbx.close()
      await first.stop()
      rmSync(store, { recursive: true, force: true })
    }
  })
})

describe('the client itself', () => {
  test('calls after close() are closed', async () => {
    const sbx = await connectUnix()
    await sbx.close()
    await transportFailure(sbx.messages.loadThread('t'), ['closed'])
    await transportFailure(sbx.checkpoints.getHead('t'), ['closed'])
    await transportFailure(sbx.artifacts.list('r'), ['closed'])
  })

  test('connect needs exactly one of socketPath and url', async () => {
    await expect(connect({})).rejects.toThrow(TypeError)
    await expect(connect({ socketPath: inject('socketPath'), url: inject('url') })).rejects.toThrow(TypeError)
  })

  test('a url with a path, query or credentials is a TypeError', async () => {
    const origin = inject('url')
    await expect(connect({ url: `${origin}/v1` })).rejects.toThrow(TypeError)
    await expect(connect({ url: `${origin}/?a=1` })).rejects.toThrow(TypeError)
    await expect(connect({ url: origin.replace('http://', 'http://user@') })).rejects.toThrow(TypeError)
    await expect(connect({ url: 'not a url' })).rejects.toThrow(TypeError)
    await expect(connect({ url: origin.replace('http:', 'ftp:') })).rejects.toThrow(TypeError)
  })

  test('200 sequential calls reuse one kept-alive connection', async () => {
    // A relay in front of the run's server counts the connections made.
    let connections = 0
    const relay = net.createServer((client) => {
      connections++
      const upstream = net.connect(inject('socketPath'))
      client.pipe(upstream).pipe(client)
      client.on('error', () => upstream.destroy())
      upstream.on('error', () => client.destroy())
    })
    const path = freshPath('relay.sock')
    await listen(relay, path)
    const sbx = await connect({ socketPath: path })
    try {
      const thread = freshThread()
      for (let i = 0; i < 200; i++) {
        expect(await sbx.messages.loadThread(thread)).toEqual([])
      }
      // connect's health check and the 200 calls, one after another.
      expect(connections).toBe(1)
    } finally {
      await sbx.close()
      await closeServer(relay)
    }
  })
})

/**
 * An HTTP server on a unix socket that answers GET /v1/health, and hands
 * every other request, its body read, to `onRequest`, which answers it or
 * drops the connection.
 */
async function fakeServer(
  onRequest: (req: http.IncomingMessage, body: string, res: http.ServerResponse) => void,
): Promise<{ socketPath: string; close: () => Promise<void> }> {
  const socketPath = freshPath('fake.sock')
  const server = http.createServer((req, res) => {
    let body = ''
    req.setEncoding('utf8')
    req.on('data', (d: string) => {
      body += d
    })
    req.on('end', () => {
      if (req.url === '/v1/health') {
        res.setHeader('content-type', 'application/json')
        res.end(JSON.stringify({ ok: true, version: 'fake', format: 4, store: '/fake' }))
        return
      }
      onRequest(req, body, res)
    })
  })
  await new Promise<void>((resolve) => server.listen(socketPath, resolve))
  return {
    socketPath,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

describe('a connection that drops before the answer', () => {
  test('a write is sent once and fails as transport, never with a code its own first effect causes', async () => {
    let appends = 0
    const fake = await fakeServer((req, _body, res) => {
      appends++
      if (appends === 1) {
        req.socket.destroy() // the server applied it, then died
        return
      }
      res.statusCode = 409
      res.setHeader('content-type', 'application/json')
      res.end(JSON.stringify({ code: 'SANDBOX_SNAPSHOT_DUPLICATE_ID', message: 'checkpoint "1" exists' }))
    })
    try {
      const sbx = await connect({ socketPath: fake.socketPath })
      const writer = { threadId: 't', ownerToken: 'o', fence: 1 }
      const checkpoint = {
        id: '1', threadId: 't', parentCheckpointId: null, createdAt: 1, reason: 'automatic' as const,
        files: [], conversation: [], artifacts: [],
      }
      // The health call left a kept-alive connection: the append reuses it.
      await transportFailure(sbx.checkpoints.append({ checkpoint, expectedHeadId: null, writer }), ['connection-reset'])
      expect(appends).toBe(1)
      await sbx.close()
    } finally {
      await fake.close()
    }
  })

  test('a read is sent again once and answers', async () => {
    let heads = 0
    const fake = await fakeServer((req, body, res) => {
      heads++
      if (heads === 1) {
        req.socket.destroy()
        return
      }
      expect(JSON.parse(body)).toEqual({ threadId: 't' })
      res.setHeader('content-type', 'application/json')
      res.end(JSON.stringify({ headId: 'h' }))
    })
    try {
      const sbx = await connect({ socketPath: fake.socketPath })
      expect(await sbx.checkpoints.getHead('t')).toBe('h')
      expect(heads).toBe(2)
      await sbx.close()
    } finally {
      await fake.close()
    }
  })
})

describe('bodies nobody reads', () => {
  test('a blob body left unread is closed after the idle timeout, freeing its connection', async () => {
    const sbx = await connect({ socketPath: inject('socketPath'), timeoutMs: 500 })
    try {
      const s = await sbx.testStore()
      const bytes = new Uint8Array(8 << 20).fill(7)
      await s.blobs.put('unread/big', bytes)
      const got = await s.blobs.get('unread/big')
      expect(got).not.toBeNull()
      // Nobody reads for longer than the idle timeout.
      await new Promise((resolve) => setTimeout(resolve, 1500))
      const err = await got!.arrayBuffer().then(() => expect.fail('an abandoned body was read whole'), (e: unknown) => e)
      expect(err).toMatchObject({ name: 'SbxdbTransportError', failure: 'timeout' })
      await s.close()
    } finally {
      await sbx.close()
    }
  })

  test('closing a test store with an unread body ends that body and deletes the store', async () => {
    const sbx = await connectUnix()
    try {
      const s = await sbx.testStore()
      await s.blobs.put('unread/big', new Uint8Array(8 << 20).fill(9))
      const got = await s.blobs.get('unread/big')
      // With the default 120 s idle timeout, a close waiting for the body
      // would outlast this case's timeout.
      await s.close()
      await expect(got!.arrayBuffer()).rejects.toMatchObject({ name: 'SbxdbTransportError', failure: 'closed' })
      await expect(s.checkpoints.getHead('t')).rejects.toMatchObject({ code: 'SBXDB_NO_TEST_STORE' })
    } finally {
      await sbx.close()
    }
  })

  test('a request running when the client closes fails as closed', async () => {
    const fake = await fakeServer(() => {
      // never answers
    })
    try {
      const sbx = await connect({ socketPath: fake.socketPath })
      const pending = sbx.checkpoints.getHead('t')
      await new Promise((resolve) => setTimeout(resolve, 50))
      await sbx.close()
      await transportFailure(pending, ['closed'])
    } finally {
      await fake.close()
    }
  })
})
