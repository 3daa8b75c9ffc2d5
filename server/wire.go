package server

import (
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/wire"
)

// The server's side of the encodings docs/API.md draws that encoding/json
// cannot give exactly: internal/wire's, which the client uses too (any Go
// string as text, messages byte for byte, checkpoints, instance records,
// lease states and leases), under the names the handlers use.

type (
	text      = wire.Text
	warning   = wire.Warning
	stateJSON = wire.State
	leaseJSON = wire.Lease
)

var (
	appendText       = wire.AppendText
	plain            = wire.Plain
	representable    = wire.Representable
	appendMessages   = wire.AppendMessages
	splitArray       = wire.SplitArray
	appendCheckpoint = wire.AppendCheckpoint
	fromState        = wire.FromState
	fromLease        = wire.FromLease
	wireWarnings     = wire.Warnings
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
