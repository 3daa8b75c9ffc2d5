//go:build !linux && !darwin

package client

import "net"

// idleOpen cannot tell here whether an idle connection is open, so the
// pool reuses none that has been idle past probeAfter.
func idleOpen(net.Conn) bool { return false }
