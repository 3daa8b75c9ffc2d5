package meta

import (
	"encoding/json"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/kv"
)

// LoadTranscript returns a thread's saved transcript; present is false when
// none was ever saved.
func LoadTranscript(tx kv.Tx, threadID string) (msgs []json.RawMessage, present bool, err error) {
	p, err := get(tx, BucketTranscripts, []byte(threadID))
	if err != nil {
		return nil, false, err
	}
	if p == nil {
		return []json.RawMessage{}, false, nil
	}
	msgs, err = DecodeMessages(p)
	if err != nil {
		return nil, false, corrupt(BucketTranscripts, []byte(threadID), err.Error())
	}
	return msgs, true, nil
}

// SaveTranscript replaces a thread's transcript.
func SaveTranscript(tx kv.Tx, threadID string, msgs []json.RawMessage) error {
	return SaveTranscriptPayload(tx, threadID, EncodeMessages(msgs))
}

// SaveTranscriptPayload replaces a thread's transcript with a payload made by
// EncodeMessages (so callers can encode outside the write transaction).
func SaveTranscriptPayload(tx kv.Tx, threadID string, payload []byte) error {
	return put(tx, BucketTranscripts, []byte(threadID), payload)
}

// EncodeMessages returns the payload of a message list (a transcript).
func EncodeMessages(msgs []json.RawMessage) []byte {
	e := &Encoder{b: make([]byte, 0, chain.TranscriptSize(msgs))}
	e.Uvarint(uint64(len(msgs)))
	for _, m := range msgs {
		e.Raw(m)
	}
	return e.b
}

// DecodeMessages decodes a payload written by EncodeMessages. An empty list
// decodes as a non-nil empty slice.
func DecodeMessages(p []byte) ([]json.RawMessage, error) {
	d := NewDecoder(p)
	msgs := decodeMessages(d)
	return msgs, d.Err()
}

func decodeMessages(d *Decoder) []json.RawMessage {
	msgs := make([]json.RawMessage, d.Count(1))
	for i := range msgs {
		msgs[i] = d.Raw()
	}
	return msgs
}

// DeleteTranscript removes a thread's transcript and reports whether one
// was saved.
func DeleteTranscript(tx kv.Tx, threadID string) (bool, error) {
	b := bucket(tx, BucketTranscripts)
	if b.Get([]byte(threadID)) == nil {
		return false, nil
	}
	return true, b.Delete([]byte(threadID))
}
