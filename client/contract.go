package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/lease"
)

// A Client is a store: the contract, its optional capabilities,
// transcripts and instances, over the API; and it renews and releases the
// leases it hands out.
var (
	_ sbxdb.Store   = (*Client)(nil)
	_ lease.Backend = (*Client)(nil)
)

// Every string argument travels as a text (wire.go), so that the server's
// validators see exactly the Go string the caller passed (a string no JSON
// string carries arrives as "not a string", which they refuse as they
// refuse the string itself), and every message as its bytes are.

// post sends body, a JSON object encoded already, to path and decodes the
// response into out (unless out is nil). Requests holding messages use it:
// encoding/json would compact them.
func (c *Client) post(ctx context.Context, path string, body []byte, out any) error {
	resp, err := c.send(ctx, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("client: decoding the response of %s: %w", path, err)
	}
	return nil
}

type idArg struct {
	ID text `json:"id"`
}

type threadArg struct {
	ThreadID text `json:"threadId"`
}

// checkpointResponse holds one checkpoint as the server wrote it, decoded
// by decodeCheckpoint so that messages keep their bytes.
type checkpointResponse struct {
	Checkpoint json.RawMessage `json:"checkpoint"`
}

// Get returns the checkpoint id, or nil and no error when it is unknown
// (POST /v1/checkpoints/get).
func (c *Client) Get(ctx context.Context, id string) (*chain.Checkpoint, error) {
	var out checkpointResponse
	if err := c.call(ctx, "/v1/checkpoints/get", idArg{text(id)}, &out); err != nil {
		return nil, err
	}
	return decodeCheckpoint(out.Checkpoint)
}

// List returns every checkpoint of the thread in createdAt, id-bytes
// order (POST /v1/checkpoints/list).
func (c *Client) List(ctx context.Context, threadID string) ([]*chain.Checkpoint, error) {
	var out struct {
		Checkpoints []json.RawMessage `json:"checkpoints"`
	}
	if err := c.call(ctx, "/v1/checkpoints/list", threadArg{text(threadID)}, &out); err != nil {
		return nil, err
	}
	cps := make([]*chain.Checkpoint, len(out.Checkpoints))
	for i, raw := range out.Checkpoints {
		cp, err := decodeCheckpoint(raw)
		if err != nil {
			return nil, err
		}
		cps[i] = cp
	}
	return cps, nil
}

type headResponse struct {
	HeadID *text `json:"headId"`
}

func (h headResponse) id() string {
	if h.HeadID == nil {
		return ""
	}
	return string(*h.HeadID)
}

// Head returns the thread's head id, or "" when it has none (POST
// /v1/checkpoints/head).
func (c *Client) Head(ctx context.Context, threadID string) (string, error) {
	var out headResponse
	if err := c.call(ctx, "/v1/checkpoints/head", threadArg{text(threadID)}, &out); err != nil {
		return "", err
	}
	return out.id(), nil
}

// Append adds in.Checkpoint as the thread's new head if the head is still
// in.ExpectedHeadID ("" is null, as is an empty ParentID) and returns the
// new head id (POST /v1/checkpoints/append).
func (c *Client) Append(ctx context.Context, in chain.AppendInput) (string, error) {
	const path = "/v1/checkpoints/append"
	buf := bodyBuffers.Get().(*[]byte)
	defer func() {
		// Only an exchange has written the body whole when post returns.
		if c.exchanges(path) && cap(*buf) <= maxPooledBody {
			bodyBuffers.Put(buf)
		}
	}()
	b := appendCheckpoint(append((*buf)[:0], `{"checkpoint":`...), in.Checkpoint)
	b = append(b, `,"expectedHeadId":`...)
	if in.ExpectedHeadID == "" {
		b = append(b, "null"...)
	} else {
		b = appendText(b, in.ExpectedHeadID)
	}
	b = append(appendWriter(append(b, `,"writer":`...), in.Writer), '}')
	*buf = b
	var out headResponse
	if err := c.post(ctx, path, b, &out); err != nil {
		return "", err
	}
	return out.id(), nil
}

// bodyBuffers hold the buffers Append encodes its request in; one that
// grew past maxPooledBody is left to the collector.
var bodyBuffers = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledBody = 1 << 20

// DeleteHead removes the thread's head checkpoint (POST
// /v1/checkpoints/delete-head).
func (c *Client) DeleteHead(ctx context.Context, threadID, checkpointID string, w lease.Writer) error {
	return c.call(ctx, "/v1/checkpoints/delete-head", struct {
		ThreadID     text       `json:"threadId"`
		CheckpointID text       `json:"checkpointId"`
		Writer       writerJSON `json:"writer"`
	}{text(threadID), text(checkpointID), fromWriter(w)}, nil)
}

// DeleteCheckpoints keeps the newest keep checkpoints of the thread's head
// chain and deletes the rest, returning the deleted ids in List order
// (POST /v1/checkpoints/delete).
func (c *Client) DeleteCheckpoints(ctx context.Context, threadID string, keep int, w lease.Writer) ([]string, error) {
	var out struct {
		Deleted []text `json:"deleted"`
	}
	err := c.call(ctx, "/v1/checkpoints/delete", struct {
		ThreadID text       `json:"threadId"`
		Keep     int        `json:"keep"`
		Writer   writerJSON `json:"writer"`
	}{text(threadID), keep, fromWriter(w)}, &out)
	if err != nil {
		return nil, err
	}
	return strs(out.Deleted), nil
}

// Fork copies a source checkpoint as the root of an empty destination
// thread (POST /v1/checkpoints/fork).
func (c *Client) Fork(ctx context.Context, in chain.ForkInput) (*chain.Checkpoint, error) {
	var out checkpointResponse
	err := c.call(ctx, "/v1/checkpoints/fork", struct {
		SourceThreadID          text       `json:"sourceThreadId"`
		SourceCheckpointID      text       `json:"sourceCheckpointId"`
		DestinationThreadID     text       `json:"destinationThreadId"`
		DestinationCheckpointID text       `json:"destinationCheckpointId"`
		CreatedAt               int64      `json:"createdAt"`
		Writer                  writerJSON `json:"writer"`
	}{text(in.SourceThreadID), text(in.SourceCheckpointID), text(in.DestinationThreadID),
		text(in.DestinationCheckpointID), in.CreatedAt, fromWriter(in.Writer)}, &out)
	if err != nil {
		return nil, err
	}
	return decodeCheckpoint(out.Checkpoint)
}

// Threads returns every thread that has a head, a checkpoint or a saved
// transcript, in UTF-8 byte order (GET /v1/threads).
func (c *Client) Threads(ctx context.Context) ([]string, error) {
	var out struct {
		Threads []text `json:"threads"`
	}
	if err := c.call(ctx, "/v1/threads", nil, &out); err != nil {
		return nil, err
	}
	return strs(out.Threads), nil
}

// BlobReferences returns every blob key with a count above 0, sorted (GET
// /v1/blob-references).
func (c *Client) BlobReferences(ctx context.Context) ([]chain.BlobRef, error) {
	var out struct {
		References []struct {
			Key        text  `json:"key"`
			References int64 `json:"references"`
		} `json:"references"`
	}
	if err := c.call(ctx, "/v1/blob-references", nil, &out); err != nil {
		return nil, err
	}
	refs := make([]chain.BlobRef, len(out.References))
	for i, r := range out.References {
		refs[i] = chain.BlobRef{Key: string(r.Key), References: r.References}
	}
	return refs, nil
}

// strs converts ids from a response.
func strs(ts []text) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = string(t)
	}
	return out
}

// ---- writer leases ----

// AcquireWriter takes the thread's writer lease without waiting (POST
// /v1/leases/acquire). The lease renews and releases through c.
func (c *Client) AcquireWriter(ctx context.Context, threadID string) (*lease.Lease, error) {
	return c.AcquireWriterWith(ctx, threadID, lease.AcquireOptions{})
}

// ErrHolderNotSettable is AcquireWriterWith's error for options naming a
// holder: the server records the holder it can name itself (the
// connecting process on a unix socket, none through TCP).
var ErrHolderNotSettable = fmt.Errorf("client: AcquireOptions.Holder cannot be set through a server: %w", errors.ErrUnsupported)

// AcquireWriterWith is AcquireWriter with options: TakeOverDead takes over
// a live lease whose holder the server can prove gone. Holder must be nil
// (ErrHolderNotSettable).
func (c *Client) AcquireWriterWith(ctx context.Context, threadID string, opts lease.AcquireOptions) (*lease.Lease, error) {
	if opts.Holder != nil {
		return nil, ErrHolderNotSettable
	}
	var out leaseJSON
	err := c.call(ctx, "/v1/leases/acquire", struct {
		ThreadID     text `json:"threadId"`
		TakeOverDead bool `json:"takeOverDead,omitempty"`
	}{text(threadID), opts.TakeOverDead}, &out)
	if err != nil {
		return nil, err
	}
	return out.handle(c), nil
}

type writerArg struct {
	Writer writerJSON `json:"writer"`
}

// RenewWriter extends w's live lease and returns the new expiry (POST
// /v1/leases/renew); lease.Lease.Renew calls it.
func (c *Client) RenewWriter(ctx context.Context, w lease.Writer) (time.Time, error) {
	var out struct {
		ExpiresAt int64 `json:"expiresAt"`
	}
	if err := c.call(ctx, "/v1/leases/renew", writerArg{fromWriter(w)}, &out); err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(out.ExpiresAt), nil
}

// ReleaseWriter gives w's lease up if it is still w's (POST
// /v1/leases/release); lease.Lease.Release calls it.
func (c *Client) ReleaseWriter(ctx context.Context, w lease.Writer) error {
	return c.call(ctx, "/v1/leases/release", writerArg{fromWriter(w)}, nil)
}

// Writers returns the stored writer state of every thread ever leased,
// without owner tokens (GET /v1/leases).
func (c *Client) Writers(ctx context.Context) (map[string]lease.State, error) {
	var out struct {
		Leases map[string]stateJSON `json:"leases"`
	}
	if err := c.call(ctx, "/v1/leases", nil, &out); err != nil {
		return nil, err
	}
	states := make(map[string]lease.State, len(out.Leases))
	for thread, s := range out.Leases {
		states[thread] = s.state()
	}
	return states, nil
}

// Unlock breaks the thread's writer lease, whoever holds it, and returns
// the removed lease (Held false when there was none) (POST
// /v1/leases/unlock).
func (c *Client) Unlock(ctx context.Context, threadID string) (lease.State, error) {
	var out struct {
		Removed stateJSON `json:"removed"`
	}
	if err := c.call(ctx, "/v1/leases/unlock", threadArg{text(threadID)}, &out); err != nil {
		return lease.State{}, err
	}
	return out.Removed.state(), nil
}

// ---- transcripts ----

// LoadThread returns the thread's transcript, each message's bytes as
// stored; [] when none was saved (POST /v1/transcripts/load).
func (c *Client) LoadThread(ctx context.Context, threadID string) ([]json.RawMessage, error) {
	var out struct {
		Messages json.RawMessage `json:"messages"`
	}
	if err := c.call(ctx, "/v1/transcripts/load", threadArg{text(threadID)}, &out); err != nil {
		return nil, err
	}
	msgs, err := splitArray(out.Messages)
	if err != nil {
		return nil, fmt.Errorf("client: decoding the transcript of %q: %w", threadID, err)
	}
	return msgs, nil
}

// SaveThread replaces the thread's transcript, each message stored byte
// for byte (POST /v1/transcripts/save). A message that is not JSON cannot
// be sent in a JSON array: such a transcript is refused here by the
// validators the store runs, in its order (the thread id, then the
// messages), before any request.
func (c *Client) SaveThread(ctx context.Context, threadID string, msgs []json.RawMessage) error {
	if !validMessages(msgs) {
		if err := chain.CheckID("threadId", threadID); err != nil {
			return err
		}
		return chain.ValidateMessages(msgs)
	}
	b := appendText([]byte(`{"threadId":`), threadID)
	b = appendMessages(append(b, `,"messages":`...), msgs)
	return c.post(ctx, "/v1/transcripts/save", append(b, '}'), nil)
}
