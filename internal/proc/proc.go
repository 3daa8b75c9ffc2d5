// Package proc identifies processes across time, so that state a process
// leaves behind (a writer lease, a restore's staging directory) can be
// recognised as abandoned once its owner is gone.
//
// A pid alone is not an identity: the kernel reuses pids, and the same pid
// names different processes in different pid namespaces (containers) and
// on different machines. An Identity adds the process's start time (in
// clock ticks since boot, from /proc), the kernel boot it started in and
// its pid namespace, so a new process that happens to get the same pid is
// never mistaken for the old one, and a process this one cannot see is
// never taken for gone.
package proc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Identity names one process: host, boot, pid and start time. The zero
// Identity names no process.
type Identity struct {
	Host string `json:"host,omitempty"`
	Boot string `json:"boot,omitempty"` // kernel boot id; "" where unknown
	// NS is the process's pid namespace ("pid:[4026531836]"); "" where
	// unknown. Pids of another namespace cannot be looked up from here.
	NS    string `json:"ns,omitempty"`
	PID   int    `json:"pid,omitempty"`
	Start uint64 `json:"start,omitempty"` // clock ticks since boot; 0 where unknown
}

// IsZero reports whether id names no process.
func (id Identity) IsZero() bool { return id.PID == 0 }

// String renders id for people, as this process sees it: "pid 42 on
// host-a"; for a process in another pid namespace of this host
// (OtherNamespace), whose pid names another process here or none, "a
// process in another pid namespace on host-a (pid 1 there)".
func (id Identity) String() string {
	if id.IsZero() {
		return "an unknown process"
	}
	if id.OtherNamespace() {
		return "a process in another pid namespace on " + id.Host + " (pid " + strconv.Itoa(id.PID) + " there)"
	}
	if id.Host == "" {
		return "pid " + strconv.Itoa(id.PID)
	}
	return "pid " + strconv.Itoa(id.PID) + " on " + id.Host
}

// OtherNamespace reports whether id is a process of this host (the same
// host name and kernel boot as this process) in a pid namespace other
// than this process's: a pid that means another process here, or none.
// It is false where either namespace or boot is unknown (an identity
// recorded without them reads as it always did), and for another boot,
// whose namespaces cannot be told apart from this one's.
func (id Identity) OtherNamespace() bool {
	me := Self()
	return !id.IsZero() && id.Host != "" && id.Host == me.Host &&
		id.Boot != "" && id.Boot == me.Boot &&
		id.NS != "" && me.NS != "" && id.NS != me.NS
}

// State is what can be known of a process from this machine.
type State int

const (
	// Unknown: the process runs on another host, in another boot or pid
	// namespace, or this system does not tell. Callers must treat it as
	// alive.
	Unknown State = iota
	// Alive: the process exists on this host, with the same start time.
	Alive
	// Gone: the process is known to have exited: in this boot and pid
	// namespace, no process has its pid, or a later one does.
	Gone
)

func (s State) String() string {
	switch s {
	case Alive:
		return "alive"
	case Gone:
		return "gone"
	}
	return "unknown"
}

var (
	selfOnce sync.Once
	self     Identity
)

// Self returns the calling process's identity.
func Self() Identity {
	selfOnce.Do(func() {
		self.Host, _ = os.Hostname()
		self.Boot = bootID()
		self.NS, _ = os.Readlink("/proc/self/ns/pid")
		self.PID = os.Getpid()
		self.Start, _ = startTime(self.PID)
	})
	return self
}

// Of returns the identity of the process pid of this host as this process
// sees it: a pid of this process's pid namespace (as a unix socket's peer
// credentials give it), in this boot, with its start time. It is the zero
// Identity for pid <= 0 (unknown). Where the start time cannot be read (no
// /proc, or the process has exited), Start is 0: Check then answers Gone
// only while no process has the pid, never for a pid that was reused.
func Of(pid int) Identity {
	if pid <= 0 {
		return Identity{}
	}
	me := Self()
	if pid == me.PID {
		return me
	}
	id := Identity{Host: me.Host, Boot: me.Boot, NS: me.NS, PID: pid}
	id.Start, _ = startTime(pid)
	return id
}

// Check tells whether the process id names still runs. It answers Gone only
// when this process can prove it: the same host name, kernel boot and pid
// namespace as this process, and no process with that pid, or one that
// started at another time. A host name alone does not name a machine
// (containers and copied images share them), and a boot id that differs
// may be another machine's, so anything but the same boot and namespace is
// Unknown.
func Check(id Identity) State {
	me := Self()
	switch {
	case id.IsZero(), id.Host == "" || id.Host != me.Host,
		id.Boot == "" || id.Boot != me.Boot,
		id.NS == "" || id.NS != me.NS:
		return Unknown
	}
	start, err := startTime(id.PID)
	switch {
	case os.IsNotExist(err):
		return Gone
	case err != nil, id.Start == 0, start == 0:
		return Unknown
	case start != id.Start:
		return Gone
	}
	return Alive
}

// bootID reads the kernel's random id of the current boot.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// startTime reads field 22 of /proc/PID/stat: the process's start time in
// clock ticks since boot. The command name (field 2) is in parentheses and
// may itself hold spaces and parentheses, so fields are counted from the
// last ')'.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStart(b)
}

func parseStart(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc: stat line without a command name")
	}
	// After ") " come fields 3 (state) onwards; start time is field 22.
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("proc: stat line of %d fields", len(f)+2)
	}
	return strconv.ParseUint(f[19], 10, 64)
}
