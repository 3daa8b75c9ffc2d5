// open({ dir }): connects to the server of a store directory, or starts
// one from the sbxdb binary (here the one the run built), shared by every
// opener and gone once no client is connected.

import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, inject, it } from 'vitest'
import { open, platformPackage, serverBinary } from '../src/index.js'
import { startServer } from './server.js'

const dirs: Array<string> = []
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true })
})
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'sbxts-open-'))
  dirs.push(d)
  return d
}

/** Waits (up to a minute) for `path` to be gone: the server removes its socket when it exits. */
async function gone(path: string): Promise<void> {
  for (let i = 0; i < 600 && existsSync(path); i++) await new Promise((r) => setTimeout(r, 100))
  expect(existsSync(path), `${path} still there a minute on`).toBe(false)
}

describe('open', () => {
  it('starts one server for concurrent openers, which both use, and it exits when both close', async () => {
    const dir = join(tempDir(), 'store')
    const binary = inject('sbxdbBin')
    const [a, b] = await Promise.all([open({ dir, binary, idleExitMs: 300 }), open({ dir, binary, idleExitMs: 300 })])
    expect(a.server.store).toBe(b.server.store)
    await a.blobs.put('from/a', 'written by a', { customMetadata: { runId: 'r' } })
    const got = await b.blobs.get('from/a')
    expect(await got!.text()).toBe('written by a')
    expect(got!.customMetadata).toEqual({ runId: 'r' })
    // A third opener joins the running server.
    const c = await open({ dir, binary })
    expect((await c.blobs.head('from/a'))!.size).toBe(12)
    await Promise.all([a.close(), b.close(), c.close()])
    await gone(join(dir, 'sbxdb.sock'))
    // The store persists: a later open starts a server on it again.
    const d = await open({ dir, binary, idleExitMs: 300 })
    expect(await (await d.blobs.get('from/a'))!.text()).toBe('written by a')
    await d.close()
    await gone(join(dir, 'sbxdb.sock'))
  })

  it('refuses a socket in dir served for another store', async () => {
    const dir = tempDir()
    // A server of another store listening on dir/sbxdb.sock.
    const other = await startServer(inject('sbxdbBin'), { args: ['--listen', `unix:${join(dir, 'sbxdb.sock')}`] })
    try {
      await expect(open({ dir, binary: inject('sbxdbBin') })).rejects.toThrow(/serves the store .*, not /)
    } finally {
      await other.stop()
    }
  })

  it('reports a server that cannot start', async () => {
    const dir = tempDir()
    await expect(open({ dir, binary: join(dir, 'no-such-binary'), startTimeoutMs: 5000 })).rejects.toThrow(/cannot run|exited/)
  })

  it('names the platform package, and $SBXDB_BINARY overrides it', () => {
    expect(platformPackage('linux', 'x64')).toBe('@sbxdb/server-linux-x64')
    expect(platformPackage('darwin', 'arm64')).toBe('@sbxdb/server-darwin-arm64')
    const saved = process.env.SBXDB_BINARY
    try {
      process.env.SBXDB_BINARY = '/opt/sbxdb'
      expect(serverBinary()).toBe('/opt/sbxdb')
      expect(serverBinary('/given')).toBe('/given')
      delete process.env.SBXDB_BINARY
      // This repository does not install its own platform package.
      expect(() => serverBinary()).toThrow(/is not installed|no sbxdb server package/)
    } finally {
      if (saved === undefined) delete process.env.SBXDB_BINARY
      else process.env.SBXDB_BINARY = saved
    }
  })
})
