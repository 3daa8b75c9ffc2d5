// One `sbxdb serve --test` for the whole run, on a unix socket and a
// loopback TCP port; every test makes its own isolated test stores in it.

import type { TestProject } from 'vitest/node'
import { buildSbxdb, startServer } from './server.js'

declare module 'vitest' {
  export interface ProvidedContext {
    sbxdbBin: string
    socketPath: string
    url: string
    token: string
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const bin = buildSbxdb()
  const server = await startServer(bin, { test: true, tcp: true })
  project.provide('sbxdbBin', bin)
  project.provide('socketPath', server.socketPath)
  project.provide('url', server.url!)
  project.provide('token', server.token!)
  return async () => {
    const code = await server.stop()
    if (code !== 0) throw new Error(`sbxdb serve exited with ${code}: ${server.log().slice(-2000)}`)
  }
}
