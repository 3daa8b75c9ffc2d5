// Run by install-test.sh in a fresh project that installed the packed
// @sbxdb/tanstack-ai and this platform's @sbxdb/server-* package: imports
// the package as a host does and checks that it works there.
//
//   node install-check.mjs            the checks below
//   node install-check.mjs open DIR NAME OTHER
//                                     one of the two open() processes

import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { connect, open, serverBinary } from '@sbxdb/tanstack-ai'

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

function fail(message) {
  console.error(`install-check: ${message}`)
  process.exit(1)
}

/** Polls `cond` every 100 ms for up to a minute; fails with `what` after. */
async function waitFor(cond, what) {
  for (let i = 0; i < 600; i++) {
    if (await cond()) return
    await sleep(100)
  }
  fail(`${what}: not so a minute on`)
}

/** The pids of sbxdb processes serving `dir` (Linux: /proc). */
function servers(dir) {
  const pids = []
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue
    let cmd
    try {
      cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')
    } catch {
      continue
    }
    if (cmd.includes('serve') && cmd.includes(dir)) pids.push(Number(pid))
  }
  return pids
}

/**
 * One opener: writes its own blob, waits to read the other's, reports,
 * and once DIR.release exists reads again and closes.
 */
async function opener(dir, name, other) {
  const sbx = await open({ dir, idleExitMs: 1000 })
  await sbx.blobs.put(`who/${name}`, `written by ${name}`, { customMetadata: { runId: name } })
  let seen
  await waitFor(async () => (seen = await sbx.blobs.get(`who/${other}`)) !== null, `${name} reading who/${other}`)
  const text = await seen.text()
  console.log(JSON.stringify({ name, store: sbx.server.store, other: text, metadata: seen.customMetadata }))
  await waitFor(() => existsSync(`${dir}.release`), `${name} waiting for the release`)
  if ((await (await sbx.blobs.get(`who/${name}`)).text()) !== `written by ${name}`) fail(`${name}: the second read differs`)
  await sbx.close()
}

async function main() {
  const binary = serverBinary()
  if (!existsSync(binary)) fail(`the platform package's binary ${binary} is missing`)
  console.log(`server binary: ${binary}`)
  const tmp = mkdtempSync(join(tmpdir(), 'sbxdb-install-check-'))
  try {
    // connect() to an sbxdb serve run separately, from the installed binary.
    const store = join(tmp, 'served')
    const serve = spawn(binary, ['serve', '--db', store], { stdio: ['ignore', 'pipe', 'ignore'] })
    await new Promise((res, rej) => {
      serve.stdout.on('data', (d) => String(d).includes('listening on') && res())
      serve.on('exit', (code) => rej(new Error(`sbxdb serve exited with ${code}`)))
    })
    const sbx = await connect({ socketPath: join(store, 'sbxdb.sock') })
    const put = await sbx.blobs.put('install/check.txt', 'round trip', { contentType: 'text/plain', customMetadata: { threadId: 't-1' } })
    const got = await sbx.blobs.get('install/check.txt')
    if ((await got.text()) !== 'round trip' || got.customMetadata.threadId !== 't-1' || put.size !== 10) fail('the blob round trip through connect() differs')
    await sbx.messages.saveThread('t-1', [{ role: 'user', content: 'hi' }])
    if ((await sbx.messages.loadThread('t-1'))[0]?.content !== 'hi') fail('the transcript round trip through connect() differs')
    await sbx.close()
    serve.kill('SIGTERM')
    await new Promise((res) => serve.on('exit', res))
    console.log('connect(): round trip against sbxdb serve ok')

    // open() of one directory from two processes at once.
    const dir = join(tmp, 'opened')
    const self = fileURLToPath(import.meta.url)
    // Each opener is a process; `report` resolves with its report line,
    // `exit` when it has exited 0.
    const run = (name, other) => {
      const child = spawn(process.execPath, [self, 'open', dir, name, other], { stdio: ['ignore', 'pipe', 'inherit'] })
      let out = ''
      let reported = false
      const report = new Promise((res) => {
        child.stdout.on('data', (d) => {
          out += d
          if (out.includes('\n') && !reported) {
            reported = true
            res(JSON.parse(out.split('\n')[0]))
          }
        })
      })
      const exit = new Promise((res, rej) => child.on('exit', (code) => (code === 0 ? res() : rej(new Error(`opener ${name} exited with ${code}`)))))
      const silent = exit.then(() => {
        if (!reported) fail(`opener ${name} exited without reporting`)
      })
      return { report: Promise.race([report, silent]), exit }
    }
    const openers = [run('a', 'b'), run('b', 'a')]
    const [a, b] = await Promise.all(openers.map((o) => o.report))
    console.log(JSON.stringify(a))
    console.log(JSON.stringify(b))
    if (a.store !== b.store) fail(`the openers reached different stores: ${a.store}, ${b.store}`)
    if (a.other !== 'written by b' || b.other !== 'written by a' || a.metadata.runId !== 'b') fail("an opener did not read the other one's blob")
    // Only one process can hold a store, so both used the same server; a
    // serve that lost the race exits (its store busy) while they stay open.
    await waitFor(() => servers(dir).length === 1, `one sbxdb serve of ${dir} while both openers are connected`)
    writeFileSync(`${dir}.release`, '')
    await Promise.all(openers.map((o) => o.exit))
    await waitFor(() => !existsSync(join(dir, 'sbxdb.sock')) && servers(dir).length === 0, 'the server exiting once both openers closed')
    console.log('open(): two processes shared one server, which exited when both had closed')
  } finally {
    rmSync(tmp, { recursive: true, force: true })
  }
}

if (process.argv[2] === 'open') {
  opener(process.argv[3], process.argv[4], process.argv[5]).catch((err) => fail(err.stack ?? String(err)))
} else {
  main().catch((err) => fail(err.stack ?? String(err)))
}
