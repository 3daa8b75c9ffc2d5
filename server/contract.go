package server

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/proc"
	"github.com/sbxdb/sbxdb/lease"
)

// contractRoutes registers the contract's methods (docs/API.md,
// "Checkpoints", "Writer leases", "Transcripts and instances").
//
// Every request member an engine method validates decodes without loss or
// to a value its validators refuse (chain.WireString, chain.WireInt,
// chain.Writer; append goes through chain.ParseAppendInput), and the method
// gives the verdict: a request is refused exactly as the embedded store
// refuses it, with the same code and in the same order. The server decides
// only what has no contract code (a body that is not a JSON object, a
// member of the wrong type that no engine method reads), and then only
// after the identifiers the engine would check first.
func (s *Server) contractRoutes() {
	s.handle("POST /v1/checkpoints/get", s.getCheckpoint)
	s.handle("POST /v1/checkpoints/list", s.listCheckpoints)
	s.handle("POST /v1/checkpoints/head", s.headCheckpoint)
	s.handle("POST /v1/checkpoints/append", s.appendCheckpoint)
	s.handle("POST /v1/checkpoints/delete-head", s.deleteHead)
	s.handle("POST /v1/checkpoints/delete", s.deleteCheckpoints)
	s.handle("POST /v1/checkpoints/fork", s.fork)
	s.handle("GET /v1/threads", s.threads)
	s.handle("GET /v1/blob-references", s.blobReferences)

	s.handle("POST /v1/leases/acquire", s.acquireLease)
	s.handle("POST /v1/leases/renew", s.renewLease)
	s.handle("POST /v1/leases/release", s.releaseLease)
	s.handle("POST /v1/leases/unlock", s.unlockLease)
	s.handle("GET /v1/leases", s.leases)

	s.handle("POST /v1/transcripts/load", s.loadTranscript)
	s.handle("POST /v1/transcripts/save", s.saveTranscript)

	s.handle("POST /v1/instances/get", s.getInstance)
	s.handle("POST /v1/instances/upsert", s.upsertInstance)
	s.handle("POST /v1/instances/delete", s.deleteInstance)
}

// empty is the response of a write that returns nothing.
type empty struct{}

// afterIDs returns the first INVALID_ID error of the field/value pairs,
// or else a SBXDB_BAD_REQUEST error saying what. A handler uses it for a
// member of the wrong type that the engine never sees: the identifiers the
// engine would check first still win, with its own validator.
func afterIDs(what string, pairs ...string) error {
	if err := chain.CheckIDs(pairs...); err != nil {
		return err
	}
	return errorf(CodeBadRequest, "%s", what)
}

// ---- checkpoints ----

func (s *Server) getCheckpoint(r *http.Request) (any, error) {
	var req struct {
		ID chain.WireString `json:"id"`
	}
	if err := s.decode(r, &req); err != nil {
		return nil, err
	}
	cp, err := s.db.Get(r.Context(), string(req.ID))
	if err != nil {
		return nil, err
	}
	b := appendCheckpoint([]byte(`{"checkpoint":`), cp)
	return rawJSON(append(b, '}')), nil
}

func (s *Server) listCheckpoints(r *http.Request) (any, error) {
	var req struct {
		ThreadID chain.WireString `json:"threadId"`
	}
	if err := s.decode(r, &req); err != nil {
		return nil, err
	}
	cps, err := s.db.List(r.Context(), string(req.ThreadID))
	if err != nil {
		return nil, err
	}
	b := []byte(`{"checkpoints":[`)
	for i, cp := range cps {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendCheckpoint(b, cp)
	}
	return rawJSON(append(b, "]}"...)), nil
}

// headResponse is the response of head and append; HeadID is null for an
// empty thread.
type headResponse struct {
	HeadID *text `json:"headId"`
}

// appendHead is the response of an append that made head the head: the
// bytes writeJSON writes for headResponse.
func appendHead(head string) rawJSON {
	b := make([]byte, 0, 16+len(head))
	b = appendText(append(b, `{"headId":`...), head)
	return append(b, '}')
}

func (s *Server) headCheckpoint(r *http.Request) (any, error) {
	var req struct {
		ThreadID chain.WireString `json:"threadId"`
	}
	if err := s.decode(r, &req); err != nil {
		return nil, err
	}
	head, err := s.db.Head(r.Context(), string(req.ThreadID))
	if err != nil {
		return nil, err
	}
	if head == "" {
		return headResponse{}, nil
	}
	t := text(head)
	return headResponse{&t}, nil
}

// appendCheckpoint reads its request through the strict JSON path, which
// checks identifiers and content in append's order (SPEC §2.5) and tells
// null or absent (no head, a root) from "" (INVALID_ID, SPEC §10 Q11).
// Each message keeps its bytes as the request has them, whitespace around
// the value included: the store keeps a message byte for byte.
func (s *Server) appendCheckpoint(r *http.Request) (any, error) {
	body, err := s.readObject(r)
	if err != nil {
		return nil, err
	}
	// The parse validates the body first, so readBody's own validation
	// runs only when it fails, to give readBody's verdict first.
	in, err := chain.ParseAppendInputExact(body)
	if err != nil {
		if !json.Valid(body) {
			return nil, errNotObject()
		}
		return nil, err
	}
	head, err := s.db.Append(r.Context(), in)
	if err != nil {
		return nil, err
	}
	return appendHead(head), nil
}

func (s *Server) deleteHead(r *http.Request) (any, error) {
	var req struct {
		ThreadID     chain.WireString `json:"threadId"`
		CheckpointID chain.WireString `json:"checkpointId"`
		Writer       chain.Writer     `json:"writer"`
	}
	if err := s.decode(r, &req); err != nil {
		return nil, err
	}
	if err := s.db.DeleteHead(r.Context(), string(req.ThreadID), string(req.CheckpointID), req.Writer); err != nil {
		return nil, err
	}
	return empty{}, nil
}

func (s *Server) deleteCheckpoints(r *http.Request) (any, error) {
	req := struct {
		ThreadID chain.WireString `json:"threadId"`
		Keep     chain.WireInt    `json:"keep"`
		Writer   chain.Writer     `json:"writer"`
	}{Keep: chain.NotAnInt} // absent: refused as a keep out of range, after the ids
	if err := s.decode(r, &req); err != nil {
		return nil, err
	}
	deleted, err := s.db.DeleteCheckpoints(r.Context(), string(req.ThreadID), int(req.Keep), req.Writer)
	if err != nil {
		return nil, err
	}
	return struct {
		Deleted []text `json:"deleted"`
	}{texts(deleted)}, nil
}

func (s *Server) fork(r *http.Request) (any, error) {
	req := struct {
		SourceThreadID          chain.WireString `json:"sourceThreadId"`
		SourceCheckpointID      chain.WireString `json:"sourceCheckpointId"`
		DestinationThreadID     chain.WireString `json:"destinationThreadId"`
		DestinationCheckpointID chain.WireString `json:"destinationCheckpointId"`
		CreatedAt               chain.WireInt    `json:"createdAt"`
		Writer                  chain.Writer     `json:"writer"`
	}{CreatedAt: chain.NotAnInt} // absent: INVALID_ENTRY, after the ids
	if err := s.decode(r, &req); err != nil {
		return nil, err
	}
	cp, err := s.db.Fork(r.Context(), chain.ForkInput{
		SourceThreadID:          string(req.SourceThreadID),
		SourceCheckpointID:      string(req.SourceCheckpointID),
		DestinationThreadID:     string(req.DestinationThreadID),
		DestinationCheckpointID: string(req.DestinationCheckpointID),
		CreatedAt:               int64(req.CreatedAt),
		Writer:                  req.Writer,
	})
	if err != nil {
		return nil, err
	}
	b := appendCheckpoint([]byte(`{"checkpoint":`), cp)
	return rawJSON(append(b, '}')), nil
}

func (s *Server) threads(r *http.Request) (any, error) {
	ids, err := s.db.Threads(r.Context())
	if err != nil {
		return nil, err
	}
	return struct {
		Threads []text `json:"threads"`
	}{texts(ids)}, nil
}

func (s *Server) blobReferences(r *http.Request) (any, error) {
	refs, err := s.db.BlobReferences(r.Context())
	if err != nil {
		return nil, err
	}
	type ref struct {
		Key        text  `json:"key"`
		References int64 `json:"references"`
	}
	out := make([]ref, len(refs))
	for i, rf := range refs {
		out[i] = ref{text(rf.Key), rf.References}
	}
	return struct {
		References []ref `json:"references"`
	}{out}, nil
}

// texts converts ids for a response; nil becomes [].
func texts(ids []string) []text {
	out := make([]text, len(ids))
	for i, id := range ids {
		out[i] = text(id)
	}
	return out
}

// ---- writer leases ----

// acquireLease takes the thread's writer lease for the client. Through a
// unix socket the lease records the connecting process as its holder, so
// that a lease left by a client killed before it released is taken over
// by takeOverDead as an embedded writer's is; through TCP the client's
// process cannot be named and the holder is unrecorded (never taken over
// as dead).
func (s *Server) acquireLease(r *http.Request) (any, error) {
	var req struct {
		ThreadID     chain.WireString `json:"threadId"`
		TakeOverDead json.RawMessage  `json:"takeOverDead"`
	}
	if err := s.decode(r, &req); err != nil {
		return nil, err
	}
	var opts lease.AcquireOptions
	switch string(bytes.TrimSpace(req.TakeOverDead)) {
	case "", "null", "false":
	case "true":
		opts.TakeOverDead = true
	default:
		return nil, afterIDs("takeOverDead must be a boolean", "threadId", string(req.ThreadID))
	}
	holder := proc.Identity{}
	if c := connOf(r.Context()); c.Unix {
		holder = c.Peer
	}
	opts.Holder = &holder
	l, err := s.db.AcquireWriterWith(r.Context(), string(req.ThreadID), opts)
	if err != nil {
		return nil, err
	}
	return fromLease(l), nil
}

func (s *Server) renewLease(r *http.Request) (any, error) {
	var req struct {
		Writer chain.Writer `json:"writer"`
	}
	if err := s.decode(r, &req); err != nil {
		return nil, err
	}
	exp, err := s.db.RenewWriter(r.Context(), req.Writer)
	if err != nil {
		return nil, err
	}
	return struct {
		ExpiresAt int64 `json:"expiresAt"`
	}{exp.UnixMilli()}, nil
}

func (s *Server) releaseLease(r *http.Request) (any, error) {
	var req struct {
		Writer chain.Writer `json:"writer"`
	}
	if err := s.decode(r, &req); err != nil {
		return nil, err
	}
	if err := s.db.ReleaseWriter(r.Context(), req.Writer); err != nil {
		return nil, err
	}
	return empty{}, nil
}

func (s *Server) unlockLease(r *http.Request) (any, error) {
	var req struct {
		ThreadID chain.WireString `json:"threadId"`
	}
	if err := s.decode(r, &req); err != nil {
		return nil, err
	}
	removed, err := s.db.Unlock(r.Context(), string(req.ThreadID))
	if err != nil {
		return nil, err
	}
	return struct {
		Removed stateJSON `json:"removed"`
	}{fromState(removed)}, nil
}

func (s *Server) leases(r *http.Request) (any, error) {
	states, err := s.db.Writers(r.Context())
	if err != nil {
		return nil, err
	}
	out := make(map[string]stateJSON, len(states))
	for thread, st := range states {
		out[thread] = fromState(st)
	}
	return struct {
		Leases map[string]stateJSON `json:"leases"`
	}{out}, nil
}

// ---- transcripts ----

// loadTranscript writes each message's stored bytes as they are.
func (s *Server) loadTranscript(r *http.Request) (any, error) {
	var req struct {
		ThreadID chain.WireString `json:"threadId"`
	}
	if err := s.decode(r, &req); err != nil {
		return nil, err
	}
	msgs, err := s.db.LoadThread(r.Context(), string(req.ThreadID))
	if err != nil {
		return nil, err
	}
	b := appendMessages([]byte(`{"messages":`), msgs)
	return rawJSON(append(b, '}')), nil
}

// saveTranscript stores each message as the exact text between its
// delimiters in the request's array (splitArray).
func (s *Server) saveTranscript(r *http.Request) (any, error) {
	var req struct {
		ThreadID chain.WireString `json:"threadId"`
		Messages json.RawMessage  `json:"messages"`
	}
	if err := s.decode(r, &req); err != nil {
		return nil, err
	}
	msgs, err := splitArray(req.Messages)
	if err != nil {
		return nil, afterIDs("messages must be an array", "threadId", string(req.ThreadID))
	}
	if err := s.db.SaveThread(r.Context(), string(req.ThreadID), msgs); err != nil {
		return nil, err
	}
	return empty{}, nil
}

// ---- instances ----

// instanceKey decodes {"key"}: any string, the empty one included (the
// instance store validates nothing), carried as a text (wire.go).
func (s *Server) instanceKey(r *http.Request) (string, error) {
	var req struct {
		Key *text `json:"key"`
	}
	if err := s.decode(r, &req); err != nil {
		return "", err
	}
	if req.Key == nil {
		return "", errorf(CodeBadRequest, "key is missing")
	}
	return string(*req.Key), nil
}

func (s *Server) getInstance(r *http.Request) (any, error) {
	key, err := s.instanceKey(r)
	if err != nil {
		return nil, err
	}
	rec, err := s.db.Instances().Get(r.Context(), key)
	if err != nil {
		return nil, err
	}
	var out struct {
		Instance *instanceJSON `json:"instance"`
	}
	if rec != nil {
		w := fromInstance(*rec)
		out.Instance = &w
	}
	return out, nil
}

func (s *Server) upsertInstance(r *http.Request) (any, error) {
	var w instanceJSON
	if err := s.decode(r, &w); err != nil {
		return nil, err
	}
	rec, err := w.record()
	if err != nil {
		return nil, errorf(CodeBadRequest, "%v", err)
	}
	if err := s.db.Instances().Upsert(r.Context(), rec); err != nil {
		return nil, err
	}
	return empty{}, nil
}

func (s *Server) deleteInstance(r *http.Request) (any, error) {
	key, err := s.instanceKey(r)
	if err != nil {
		return nil, err
	}
	if err := s.db.Instances().Delete(r.Context(), key); err != nil {
		return nil, err
	}
	return empty{}, nil
}
