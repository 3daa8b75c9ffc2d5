package client

import (
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/wire"
	"github.com/sbxdb/sbxdb/lease"
)

// The client's side of the encodings docs/API.md draws that encoding/json
// cannot give exactly: internal/wire's, which the server uses too (any Go
// string as text, messages byte for byte, checkpoints, writers, instance
// records, lease states and leases), under the names the calls use.

type (
	text       = wire.Text
	warning    = wire.Warning
	writerJSON = wire.Writer
)

var (
	appendText       = wire.AppendText
	plain            = wire.Plain
	representable    = wire.Representable
	validMessages    = wire.ValidMessages
	appendMessages   = wire.AppendMessages
	splitArray       = wire.SplitArray
	appendCheckpoint = wire.AppendCheckpoint
	decodeCheckpoint = wire.DecodeCheckpoint
	appendWriter     = wire.AppendWriter
	fromWriter       = wire.FromWriter
	engineWarnings   = wire.CaptureWarnings
)

// instanceJSON is an sbxdb.InstanceRecord on the wire (wire.Instance).
type instanceJSON wire.Instance

// fromInstance is rec's wire form; an empty optional field is absent.
func fromInstance(rec sbxdb.InstanceRecord) instanceJSON {
	return instanceJSON(wire.FromInstance(rec))
}

// record returns the record w names, or an error naming the first
// required member it lacks.
func (w instanceJSON) record() (sbxdb.InstanceRecord, error) { return wire.Instance(w).Record() }

// stateJSON is a lease.State on the wire (wire.State).
type stateJSON wire.State

// state returns the lease.State w names (OwnerToken "").
func (w stateJSON) state() lease.State { return wire.State(w).LeaseState() }

// leaseJSON is a granted lease on the wire (wire.Lease).
type leaseJSON wire.Lease

// handle returns the lease handle w describes, renewed and released
// through b.
func (w leaseJSON) handle(b lease.Backend) *lease.Lease { return wire.Lease(w).Handle(b) }
