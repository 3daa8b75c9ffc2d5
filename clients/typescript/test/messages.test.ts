// The transcript store (sbx.messages): a thread's messages saved whole and
// loaded whole, exactly as sent; identifiers refused in the client before
// anything is sent; a saved transcript, even an empty one, makes a thread
// a fork may not land in.

import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from 'vitest'
import {
  SandboxCheckpointError,
  SandboxCheckpointInvalidIdError,
  SbxdbTransportError,
} from '../src/index.js'
import type { ModelMessage, Sbxdb, SbxdbTestStores } from '../src/index.js'
import { connectUnix, freshStore } from './helpers.js'

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

/** A transcript with nesting, every kind of content and awkward text. */
function transcript(): Array<ModelMessage> {
  return [
    { role: 'user', content: 'plain ASCII' },
    {
      role: 'user',
      content: [
        { type: 'text', content: 'é 漢字 😀 عربى e\u0301 \u200d\t\n"\\' },
        { type: 'image', source: { type: 'url', value: 'https://example.com/a.png' } },
      ],
      id: 'm-2',
    },
    {
      role: 'assistant',
      content: null,
      toolCalls: [
        {
          id: 'call-1',
          type: 'function',
          function: { name: 'write_file', arguments: '{"path":"a/b.txt","bytes":[1,2,3]}' },
          metadata: { deep: { deeper: { deepest: [1, [2, [3, { four: 4 }]]] } } },
        },
      ],
      thinking: [{ content: 'hmm', signature: 'sig' }],
      metadata: { tanstack: { n: 1.5, big: 9007199254740991, neg: -7, t: true, f: false, nil: null } },
    },
    { role: 'tool', content: 'done', toolCallId: 'call-1' },
    // Lone surrogates, a NUL and a noncharacter inside message content:
    // content is opaque and comes back exactly as sent.
    { role: 'assistant', content: 'lone high \ud800 lone low \udc00 reversed \udc00\ud800 nul \u0000 \uffff' },
  ]
}

describe('loadThread', () => {
  test('a thread never saved is []', async () => {
    expect(await store.messages.loadThread('never-saved')).toEqual([])
    expect(await store.messages.loadThread('never-saved')).toEqual([])
  })

  test('loading an unknown thread creates nothing: a fork may still land in it', async () => {
    expect(await store.messages.loadThread('dest')).toEqual([])
    const cp = await rootCheckpoint('src', 'cp-1', [{ role: 'user', content: 'x' }])
    const writer = await store.checkpoints.acquireWriter('dest')
    const { checkpoint } = await store.checkpoints.forkFromCheckpoint({
      sourceThreadId: 'src',
      sourceCheckpointId: cp,
      destinationThreadId: 'dest',
      destinationCheckpointId: 'fork-1',
      createdAt: 5,
      writer,
    })
    expect(checkpoint.reason).toBe('fork-root')
  })
})

describe('saveThread', () => {
  test('a transcript round-trips exactly: structure, key order, unicode, lone surrogates', async () => {
    const sent = transcript()
    await store.messages.saveThread('t', sent)
    const got = await store.messages.loadThread('t')
    expect(got).toStrictEqual(sent)
    // Same text once serialised again: key order and every value kept.
    expect(JSON.stringify(got)).toBe(JSON.stringify(sent))
    const lone = got[4]!.content as string
    expect(lone).toBe(sent[4]!.content)
    expect(lone.charCodeAt(lone.indexOf('high') + 5)).toBe(0xd800)
    expect(lone.includes('\u0000')).toBe(true)
  })

  test('a save replaces the whole transcript', async () => {
    const [a, b, c, d] = transcript()
    await store.messages.saveThread('t', [a!, b!, c!])
    await store.messages.saveThread('t', [d!])
    expect(await store.messages.loadThread('t')).toStrictEqual([d])
    await store.messages.saveThread('t', [])
    expect(await store.messages.loadThread('t')).toEqual([])
  })

  test('threads are separate', async () => {
    const [a, b] = transcript()
    await store.messages.saveThread('one', [a!])
    await store.messages.saveThread('two', [b!])
    expect(await store.messages.loadThread('one')).toStrictEqual([a])
    expect(await store.messages.loadThread('two')).toStrictEqual([b])
  })

  test('thread ids are exact: no case folding or normalisation', async () => {
    const [a, b, c] = transcript()
    await store.messages.saveThread('é', [a!]) // U+00E9
    await store.messages.saveThread('e\u0301', [b!]) // e + combining acute
    await store.messages.saveThread('É', [c!])
    expect(await store.messages.loadThread('é')).toStrictEqual([a])
    expect(await store.messages.loadThread('e\u0301')).toStrictEqual([b])
    expect(await store.messages.loadThread('É')).toStrictEqual([c])
  })

  test('messages that are not an array are refused and nothing is saved', async () => {
    const [a] = transcript()
    await store.messages.saveThread('t', [a!])
    await expect(store.messages.saveThread('t', 'not an array' as never)).rejects.toThrow(TypeError)
    expect(await store.messages.loadThread('t')).toStrictEqual([a])
  })
})

describe('invalid thread ids are INVALID_ID, refused before sending', () => {
  const invalid: Array<[string, unknown]> = [
    ['empty', ''],
    ['a lone high surrogate', '\ud800'],
    ['a lone low surrogate', 'x\udc00'],
    ['a high surrogate at the end', 'x\ud83d'],
    ['a NUL', 'a\0b'],
    ['a number', 7],
    ['null', null],
    ['over 4096 bytes', 'é'.repeat(2049)],
  ]

  test.each(invalid)('%s', async (_, id) => {
    const [a] = transcript()
    await store.messages.saveThread('kept', [a!])
    for (const call of [
      () => store.messages.loadThread(id as string),
      () => store.messages.saveThread(id as string, [a!]),
    ]) {
      const err = await call().then(() => expect.fail('accepted'), (e: unknown) => e)
      expect(err).toBeInstanceOf(SandboxCheckpointInvalidIdError)
      expect(err).toBeInstanceOf(SandboxCheckpointError)
      expect((err as SandboxCheckpointError).code).toBe('SANDBOX_SNAPSHOT_INVALID_ID')
    }
    // Nothing changed: the other thread is intact, and the ids a lossy
    // encoder could have turned the bad one into hold nothing.
    expect(await store.messages.loadThread('kept')).toStrictEqual([a])
    for (const near of ['a', 'ab', 'x', 'x\ufffd', '\ufffd', '7']) {
      expect(await store.messages.loadThread(near)).toEqual([])
    }
  })

  test('a closed client refuses them the same way, so no request was needed', async () => {
    const closed = await connectUnix()
    await closed.close()
    await expect(closed.messages.loadThread('\ud800')).rejects.toBeInstanceOf(SandboxCheckpointInvalidIdError)
    await expect(closed.messages.saveThread('', [])).rejects.toBeInstanceOf(SandboxCheckpointInvalidIdError)
    // A valid id does reach the transport, which is closed.
    await expect(closed.messages.loadThread('ok')).rejects.toBeInstanceOf(SbxdbTransportError)
  })
})

describe('a saved transcript blocks a fork into its thread', () => {
  test('saveThread(thread, []) makes it FORK_DESTINATION_NOT_EMPTY; nothing changes', async () => {
    const conversation = transcript()
    const cp = await rootCheckpoint('src', 'cp-1', conversation)
    await store.messages.saveThread('dest', [])
    const writer = await store.checkpoints.acquireWriter('dest')
    const err = await store.checkpoints
      .forkFromCheckpoint({
        sourceThreadId: 'src',
        sourceCheckpointId: cp,
        destinationThreadId: 'dest',
        destinationCheckpointId: 'fork-1',
        createdAt: 5,
        writer,
      })
      .then(() => expect.fail('forked into a thread with a transcript'), (e: unknown) => e)
    expect(err).toBeInstanceOf(SandboxCheckpointError)
    expect((err as SandboxCheckpointError).code).toBe('SANDBOX_SNAPSHOT_FORK_DESTINATION_NOT_EMPTY')
    expect(await store.messages.loadThread('dest')).toEqual([])
    expect(await store.checkpoints.getHead('dest')).toBeNull()
    expect(await store.checkpoints.list('dest')).toEqual([])
    expect(await store.checkpoints.get('fork-1')).toBeNull()
  })

  test('a fork into an empty thread writes the checkpoint’s conversation as its transcript, exactly', async () => {
    const conversation = transcript()
    const cp = await rootCheckpoint('src', 'cp-1', conversation)
    // The source thread's own transcript differs; the fork copies the checkpoint's.
    await store.messages.saveThread('src', [{ role: 'user', content: 'later' }])
    const writer = await store.checkpoints.acquireWriter('dest')
    await store.checkpoints.forkFromCheckpoint({
      sourceThreadId: 'src',
      sourceCheckpointId: cp,
      destinationThreadId: 'dest',
      destinationCheckpointId: 'fork-1',
      createdAt: 5,
      writer,
    })
    const got = await store.messages.loadThread('dest')
    expect(got).toStrictEqual(conversation)
    expect(JSON.stringify(got)).toBe(JSON.stringify(conversation))
    expect(await store.messages.loadThread('src')).toEqual([{ role: 'user', content: 'later' }])
  })
})

/** Appends a root checkpoint of `threadId` holding `conversation`; returns its id. */
async function rootCheckpoint(
  threadId: string,
  id: string,
  conversation: Array<ModelMessage>,
): Promise<string> {
  const lease = await store.checkpoints.acquireWriter(threadId)
  await store.checkpoints.append({
    checkpoint: {
      id,
      threadId,
      parentCheckpointId: null,
      createdAt: 1,
      reason: 'automatic',
      files: [],
      conversation,
      artifacts: [],
    },
    expectedHeadId: null,
    writer: lease,
  })
  await lease.release()
  return id
}
