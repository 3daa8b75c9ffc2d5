// Identifier checks done before a request is sent. The server checks the
// same rules (docs/SPEC.md §1.6, §10 Q10, Q12) and every method checks its
// identifiers before anything else, so refusing here gives the code the
// server would give. Checking here matters because JSON encoders disagree
// on unpaired surrogates: an identifier holding one must never reach the
// wire as something else.

import { SandboxCheckpointInvalidIdError } from './errors.js'

/** The longest identifier, in UTF-8 bytes. */
export const maxIdBytes = 4096

/** Whether `value` holds a UTF-16 surrogate that is not half of a pair. */
export function hasUnpairedSurrogate(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i)
    if (c >= 0xd800 && c <= 0xdbff) {
      const next = value.charCodeAt(i + 1)
      if (!(next >= 0xdc00 && next <= 0xdfff)) return true
      i++
    } else if (c >= 0xdc00 && c <= 0xdfff) {
      return true
    }
  }
  return false
}

/**
 * Throws SandboxCheckpointInvalidIdError unless `value` is a non-empty,
 * well-formed string without NUL of at most 4096 UTF-8 bytes.
 */
export function assertId(value: unknown, label: string): asserts value is string {
  let problem: string | undefined
  if (typeof value !== 'string') problem = 'must be a string'
  else if (value.length === 0) problem = 'must not be empty'
  else if (hasUnpairedSurrogate(value)) problem = 'must be well-formed Unicode (it holds an unpaired surrogate)'
  else if (value.includes('\0')) problem = 'must not contain NUL'
  else if (Buffer.byteLength(value, 'utf8') > maxIdBytes) problem = `must be at most ${maxIdBytes} bytes of UTF-8`
  if (problem !== undefined) throw new SandboxCheckpointInvalidIdError(`${label} ${problem}`)
}

/** Like assertId, but null and undefined pass (an absent optional id). */
export function assertOptionalId(value: unknown, label: string): void {
  if (value !== null && value !== undefined) assertId(value, label)
}

/** `value` when it is a non-null object, else undefined. */
export function objectOf(value: unknown): Record<string, unknown> | undefined {
  return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : undefined
}
