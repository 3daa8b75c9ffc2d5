package server

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/sbxdb/sbxdb/chain"
)

// threadRoutes registers the operator's endpoints over checkpoints and
// threads that are not the contract's (docs/API.md, "Checkpoints"):
// resolving a checkpoint reference, summing up a thread, deleting a whole
// thread. Their
// members decode as the contract's do (chain.WireString), so the engine
// refuses a bad one with its own code.
func (s *Server) threadRoutes() {
	s.handle("POST /v1/checkpoints/resolve", s.resolveCheckpoint)
	s.handle("POST /v1/threads/summary", s.threadSummary)
	s.handle("POST /v1/threads/delete", s.deleteThread)
}

// resolveCheckpoint answers {"ref"} with {"id"}: engine.DB.ResolveCheckpoint.
func (s *Server) resolveCheckpoint(r *http.Request) (any, error) {
	var req struct {
		Ref chain.WireString `json:"ref"`
	}
	if err := s.decode(r, &req); err != nil {
		return nil, err
	}
	id, err := s.db.ResolveCheckpoint(r.Context(), string(req.Ref))
	if err != nil {
		return nil, err
	}
	return struct {
		ID text `json:"id"`
	}{text(id)}, nil
}

// threadSummary answers {"threadId"} with {"checkpoints",
// "latestCreatedAt"}: engine.DB.ThreadSummary, latestCreatedAt null for a
// thread without checkpoints.
func (s *Server) threadSummary(r *http.Request) (any, error) {
	var req struct {
		ThreadID chain.WireString `json:"threadId"`
	}
	if err := s.decode(r, &req); err != nil {
		return nil, err
	}
	return s.db.ThreadSummary(r.Context(), string(req.ThreadID))
}

// deleteThreadResponse is sbxdb.DeleteThreadResult on the wire, its ids
// as texts.
type deleteThreadResponse struct {
	Checkpoints     []text `json:"checkpoints"`
	Transcript      bool   `json:"transcript"`
	Lease           bool   `json:"lease"`
	ArtifactRecords int    `json:"artifactRecords"`
}

// deleteThread answers {"threadId", "force"?}: engine.DB.DeleteThread.
// force is a boolean, null or absent (false); anything else is
// SBXDB_BAD_REQUEST after the threadId check.
func (s *Server) deleteThread(r *http.Request) (any, error) {
	var req struct {
		ThreadID chain.WireString `json:"threadId"`
		Force    json.RawMessage  `json:"force"`
	}
	if err := s.decode(r, &req); err != nil {
		return nil, err
	}
	force := false
	switch string(bytes.TrimSpace(req.Force)) {
	case "", "null", "false":
	case "true":
		force = true
	default:
		return nil, afterIDs("force must be a boolean", "threadId", string(req.ThreadID))
	}
	res, err := s.db.DeleteThread(r.Context(), string(req.ThreadID), force)
	if err != nil {
		return nil, err
	}
	return deleteThreadResponse{texts(res.Checkpoints), res.Transcript, res.Lease, res.ArtifactRecords}, nil
}
