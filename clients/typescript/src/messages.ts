// The transcript store on sbxdb serve: a thread's messages saved and
// loaded as a whole (docs/API.md, "Transcripts and instances"). Each
// message is stored as the exact JSON text it was sent as.

import { read } from './transport.js'
import type { Transport } from './transport.js'
import type { MessageStore, ModelMessage } from './types.js'
import { assertId } from './validate.js'

/** The transcript store of the server (or test store) behind `t`. */
export function createMessageStore(t: Transport): MessageStore {
  return {
    async loadThread(threadId: string): Promise<Array<ModelMessage>> {
      assertId(threadId, 'thread id')
      const r = await t.call<{ messages: Array<ModelMessage> }>('POST', '/v1/transcripts/load', { threadId }, read)
      return r.messages
    },
    async saveThread(threadId: string, messages: ReadonlyArray<ModelMessage>): Promise<void> {
      assertId(threadId, 'thread id')
      if (!Array.isArray(messages)) throw new TypeError('saveThread: messages must be an array')
      await t.call('POST', '/v1/transcripts/save', { threadId, messages })
    },
  }
}
