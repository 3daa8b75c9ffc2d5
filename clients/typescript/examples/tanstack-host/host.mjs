#!/usr/bin/env node
// What TanStack AI's snapshot layer does with a workspace, on sbxdb: walk
// it, upload each distinct file's bytes once under its sha256
// (head first, put only when missing), append a checkpoint naming them
// under the thread's writer lease, then restore the thread's head into a
// new directory and check every file byte-exact against the workspace.
//
//   node host.mjs --socket PATH --thread ID WORKSPACE RESTORE_DIR
//   node host.mjs --url http://127.0.0.1:7420 --token TOKEN --thread ID WORKSPACE RESTORE_DIR
//
// Exit status: 0 when the restore is byte-exact, 1 when it is not, 2 on
// bad arguments or any failure.

import { createHash, randomUUID } from 'node:crypto'
import { createReadStream, createWriteStream } from 'node:fs'
import { mkdir, open, readdir, stat } from 'node:fs/promises'
import { dirname, join, resolve, sep } from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { parseArgs } from 'node:util'
import { connect } from '@sbxdb/tanstack-ai'

const usage = 'usage: host.mjs (--socket PATH | --url URL --token TOKEN) --thread ID WORKSPACE RESTORE_DIR'

/** Uploads and checks in flight at once. */
const concurrency = 8

/** Whether a walk leaves out a directory entry of this name. */
function skipped(name) {
  return name === 'node_modules' || name === '.git' || name.startsWith('.env')
}

/** Compares two paths by their UTF-8 bytes, the order a checkpoint's files are in. */
function byBytes(a, b) {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'))
}

/**
 * The workspace's regular files and empty directories, as `{path, kind,
 * abs, size?}` with `/`-separated relative paths, and what was left out
 * (symlinks, sockets and the like).
 */
async function walk(root) {
  const entries = []
  const others = []
  async function visit(rel) {
    const dirents = await readdir(rel === '' ? root : join(root, rel), { withFileTypes: true })
    let kept = 0
    for (const d of dirents) {
      if (skipped(d.name)) continue
      const path = rel === '' ? d.name : `${rel}/${d.name}`
      const abs = join(root, path)
      if (d.isDirectory()) {
        await visit(path)
        kept++
      } else if (d.isFile()) {
        entries.push({ path, kind: 'file', abs, size: (await stat(abs)).size })
        kept++
      } else {
        others.push(path)
      }
    }
    if (kept === 0 && rel !== '') entries.push({ path: rel, kind: 'dir' })
  }
  await visit('')
  entries.sort((a, b) => byBytes(a.path, b.path))
  return { entries, others }
}

/** The sha256 hex of a file, read as a stream. */
async function sha256File(abs) {
  const hash = createHash('sha256')
  for await (const chunk of createReadStream(abs)) hash.update(chunk)
  return hash.digest('hex')
}

/** A file as a web stream, read 1 MiB at a time as the reader pulls. */
async function fileStream(abs) {
  const fh = await open(abs, 'r')
  return new ReadableStream({
    async pull(controller) {
      try {
        const { bytesRead, buffer } = await fh.read(Buffer.alloc(1 << 20), 0, 1 << 20, null)
        if (bytesRead === 0) {
          await fh.close()
          controller.close()
        } else {
          controller.enqueue(buffer.subarray(0, bytesRead))
        }
      } catch (err) {
        await fh.close().catch(() => undefined)
        controller.error(err)
      }
    },
    async cancel() {
      await fh.close()
    },
  }, { highWaterMark: 0 })
}

/** Runs `fn` on every item, at most `n` at once. */
async function eachLimited(items, n, fn) {
  let next = 0
  const worker = async () => {
    while (next < items.length) await fn(items[next++])
  }
  await Promise.all(Array.from({ length: Math.min(n, items.length) }, worker))
}

/** Whether two files hold the same bytes, compared 1 MiB at a time. */
async function sameBytes(a, b) {
  const [fa, fb] = await Promise.all([open(a, 'r'), open(b, 'r')])
  try {
    const [sa, sb] = await Promise.all([fa.stat(), fb.stat()])
    if (sa.size !== sb.size) return false
    const ba = Buffer.alloc(1 << 20)
    const bb = Buffer.alloc(1 << 20)
    for (;;) {
      const [ra, rb] = await Promise.all([fa.read(ba, 0, ba.length, null), fb.read(bb, 0, bb.length, null)])
      if (ra.bytesRead !== rb.bytesRead) return false
      if (ra.bytesRead === 0) return true
      if (!ba.subarray(0, ra.bytesRead).equals(bb.subarray(0, rb.bytesRead))) return false
    }
  } finally {
    await Promise.all([fa.close(), fb.close()])
  }
}

/** `rel` inside `root`, refusing a path that would leave it. */
function inside(root, rel) {
  const abs = resolve(root, ...rel.split('/'))
  if (!abs.startsWith(root + sep)) throw new Error(`checkpoint path ${JSON.stringify(rel)} leaves the restore directory`)
  return abs
}

/** Captures `workspace` as a new head of `threadId`; returns what it did. */
async function capture(sbx, threadId, workspace) {
  const { entries, others } = await walk(workspace)
  const files = entries.filter((e) => e.kind === 'file')
  await eachLimited(files, concurrency, async (f) => {
    f.blobKey = `sandbox-files/sha256/${await sha256File(f.abs)}`
  })
  // One head, and one put when missing, per distinct blob.
  const distinct = new Map()
  for (const f of files) if (!distinct.has(f.blobKey)) distinct.set(f.blobKey, f)
  let uploaded = 0
  let present = 0
  await eachLimited([...distinct.values()], concurrency, async (f) => {
    if ((await sbx.blobs.head(f.blobKey)) !== null) {
      present++
      return
    }
    await sbx.blobs.put(f.blobKey, await fileStream(f.abs), { expectedLength: f.size })
    uploaded++
  })

  const lease = await sbx.checkpoints.acquireWriter(threadId)
  let checkpoint
  try {
    const parent = await sbx.checkpoints.getHead(threadId)
    checkpoint = {
      id: randomUUID(),
      threadId,
      parentCheckpointId: parent,
      createdAt: Date.now(),
      reason: 'automatic',
      files: entries.map((e) =>
        e.kind === 'file' ? { path: e.path, kind: 'file', blobKey: e.blobKey, size: e.size } : { path: e.path, kind: 'dir' },
      ),
      conversation: [],
      artifacts: [],
    }
    await sbx.checkpoints.append({ checkpoint, expectedHeadId: parent, writer: lease })
  } finally {
    await lease.release()
  }
  return { checkpoint, entries, others, distinct: distinct.size, uploaded, present }
}

/** Writes the thread's head checkpoint into the empty directory `dest`. */
async function restore(sbx, threadId, dest) {
  const headId = await sbx.checkpoints.getHead(threadId)
  if (headId === null) throw new Error(`thread ${threadId} has no checkpoint`)
  const checkpoint = await sbx.checkpoints.get(headId)
  if (checkpoint === null) throw new Error(`checkpoint ${headId} is gone`)
  await mkdir(dest, { recursive: true })
  if ((await readdir(dest)).length > 0) throw new Error(`${dest} is not empty`)
  const root = resolve(dest)
  for (const e of checkpoint.files) {
    if (e.kind === 'dir') await mkdir(inside(root, e.path), { recursive: true })
  }
  await eachLimited(checkpoint.files.filter((e) => e.kind === 'file'), concurrency, async (e) => {
    const abs = inside(root, e.path)
    await mkdir(dirname(abs), { recursive: true })
    const blob = await sbx.blobs.get(e.blobKey)
    if (blob === null) throw new Error(`blob ${e.blobKey} of ${e.path} is missing`)
    if (blob.size !== e.size) throw new Error(`blob ${e.blobKey} is ${blob.size} bytes; ${e.path} says ${e.size}`)
    // The body errors if the server cuts it short or its bytes do not hash
    // to the key, so a written file is whole.
    await pipeline(Readable.fromWeb(blob.body), createWriteStream(abs))
  })
  return checkpoint
}

/** The paths of `entries` that `dest` does not hold byte-exact. */
async function compare(entries, dest) {
  const bad = []
  await eachLimited(entries, concurrency, async (e) => {
    const abs = join(dest, ...e.path.split('/'))
    const st = await stat(abs).catch(() => null)
    if (e.kind === 'dir') {
      if (st === null || !st.isDirectory()) bad.push(e.path)
    } else if (st === null || !st.isFile() || !(await sameBytes(e.abs, abs))) {
      bad.push(e.path)
    }
  })
  // Nothing more than the checkpoint: the restored tree walks the same.
  const again = await walk(dest)
  const want = new Set(entries.map((e) => e.path))
  for (const e of again.entries) if (!want.has(e.path)) bad.push(e.path)
  return bad.sort(byBytes)
}

async function main() {
  let args
  try {
    args = parseArgs({
      options: {
        socket: { type: 'string' },
        url: { type: 'string' },
        token: { type: 'string' },
        thread: { type: 'string' },
      },
      allowPositionals: true,
    })
  } catch (err) {
    console.error(`${err.message}\n${usage}`)
    return 2
  }
  const { socket, url, token, thread } = args.values
  if (args.positionals.length !== 2 || thread === undefined || (socket === undefined) === (url === undefined)) {
    console.error(usage)
    return 2
  }
  const [workspace, restoreDir] = args.positionals
  // Checked before anything is stored: the restore needs a new directory.
  const existing = await readdir(restoreDir).catch((err) => (err.code === 'ENOENT' ? [] : Promise.reject(err)))
  if (existing.length > 0) {
    console.error(`${restoreDir} is not empty: give a new directory to restore into\n${usage}`)
    return 2
  }
  const sbx = await connect(socket !== undefined ? { socketPath: socket } : { url, token })
  try {
    const cap = await capture(sbx, thread, workspace)
    const nFiles = cap.entries.filter((e) => e.kind === 'file').length
    const bytes = cap.entries.reduce((n, e) => n + (e.size ?? 0), 0)
    console.log(`walked ${workspace}: ${nFiles} files (${bytes} bytes), ${cap.entries.length - nFiles} empty directories, ${cap.others.length} other entries left out`)
    console.log(`blobs: ${cap.distinct} distinct, ${cap.uploaded} uploaded, ${cap.present} already stored`)
    console.log(`checkpoint ${cap.checkpoint.id} appended on thread ${thread} (parent ${cap.checkpoint.parentCheckpointId ?? 'none'})`)
    const restored = await restore(sbx, thread, restoreDir)
    if (restored.id !== cap.checkpoint.id) {
      console.error(`the head of thread ${thread} moved to ${restored.id} meanwhile`)
      return 1
    }
    const bad = await compare(cap.entries, restoreDir)
    if (bad.length > 0) {
      console.error(`restore of ${restored.id} into ${restoreDir} differs from ${workspace} at:\n  ${bad.join('\n  ')}`)
      return 1
    }
    console.log(`restored ${restored.files.length} entries into ${restoreDir}: byte-exact`)
    return 0
  } finally {
    await sbx.close()
  }
}

main().then(
  (code) => {
    process.exitCode = code
  },
  (err) => {
    console.error(`host.mjs: ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`)
    process.exitCode = 2
  },
)
