package main

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"time"
)

// Whom the CLI talks to on a unix socket. A server on a unix socket gets
// every request unauthenticated, --secret-env values included, and its
// answers are taken for the store's; so, as ssh-agent, gpg-agent and the
// Docker CLI do, the CLI uses one only when it is run by the invoking user
// (effective uid) or by root:
//
//   - every connection the CLI makes to the socket is checked before a
//     byte is written on it: the process at its other end (its peer
//     credentials, which it cannot forge) must run as one of those users
//     (checkPeer, through client.Options.CheckPeer), so a socket swapped
//     between two connections cannot receive a request;
//   - the socket found at DIR/sbxdb.sock must also be a socket (not a
//     symbolic link) owned by one of them, in a directory owned by one of
//     them, neither writable by group or others (checkSocketFile): a
//     store directory that others can write to is refused even while the
//     right server answers there.
//
// A socket named with --server or $SBXDB_SERVER gets the connection check
// only: its directory is the user's choice (/run/…, /tmp). TCP carries no
// peer credentials; a TCP server is trusted by its token.

// trustedUID reports whether a server, socket or directory of uid may be
// trusted: it is the invoking user's (effective uid) or root's.
func trustedUID(uid int) bool { return uid == os.Geteuid() || uid == 0 }

// untrustedServerError is a server the CLI refuses to talk to. Nothing was
// sent to it. Its exit status is 1.
type untrustedServerError struct {
	path   string // the socket
	reason string // what is wrong, naming the owner
}

func (e *untrustedServerError) Error() string {
	return fmt.Sprintf("refusing the server at unix:%s: %s; %s; nothing was sent to it", e.path, e.reason, trustedText())
}

// trustedText says whom a server may be run by.
func trustedText() string {
	if os.Geteuid() == 0 {
		return "only a server run by root is used"
	}
	return "only a server run by you (" + userText(os.Geteuid()) + ") or root is used"
}

// userText names uid for messages: "uid 1000 (alice)", or "uid 1000" when
// no user has it.
func userText(uid int) string {
	s := "uid " + strconv.Itoa(uid)
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil && u.Username != "" {
		s += " (" + u.Username + ")"
	}
	return s
}

// checkPeer is client.Options.CheckPeer for the socket at path: the
// server's process must run as a trusted uid.
func checkPeer(path string) func(*net.UnixConn) error {
	return func(conn *net.UnixConn) error {
		uid, pid, err := peerCred(conn)
		if err != nil {
			return &untrustedServerError{path: path, reason: fmt.Sprintf("who runs it cannot be verified (%v)", err)}
		}
		if !trustedUID(uid) {
			who := "its process"
			if pid > 0 {
				who = fmt.Sprintf("its process (pid %d)", pid)
			}
			return &untrustedServerError{path: path, reason: who + " runs as " + userText(uid)}
		}
		return nil
	}
}

// checkSocketFile vets the file at sock, DIR/sbxdb.sock, before the CLI
// connects to it. It returns false, nil when no server can be there (no
// file, or one that is no socket: the command opens the store's files),
// and an *untrustedServerError when a server there must not be used.
func checkSocketFile(sock string) (bool, error) {
	fi, err := os.Lstat(sock)
	if err != nil {
		return false, nil
	}
	refuse := func(reason string) (bool, error) {
		return false, &untrustedServerError{path: sock, reason: reason}
	}
	switch fi.Mode().Type() {
	case fs.ModeSocket:
	case fs.ModeSymlink:
		target, _ := os.Readlink(sock)
		return refuse(fmt.Sprintf("it is a symbolic link (to %s), not a socket", target))
	default:
		return false, nil
	}
	if err := checkOwned("the socket", sock, fi); err != nil {
		return refuse(err.Error())
	}
	dir := filepath.Dir(sock)
	di, err := os.Stat(dir)
	if err != nil {
		return refuse(fmt.Sprintf("its directory cannot be read: %v", err))
	}
	if err := checkOwned("its directory "+dir, dir, di); err != nil {
		return refuse(err.Error())
	}
	return true, nil
}

// checkOwned fails when the file fi (named what, at path) is owned by an
// untrusted uid or writable by group or others.
func checkOwned(what, path string, fi fs.FileInfo) error {
	uid, ok := fileOwner(fi)
	switch {
	case !ok:
		return fmt.Errorf("the owner of %s cannot be told on this system", what)
	case !trustedUID(uid):
		return fmt.Errorf("%s is owned by %s", what, userText(uid))
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s (owned by %s) is writable by its group or others (mode %s; chmod go-w %s)", what, userText(uid), fi.Mode().Perm(), path)
	}
	return nil
}

// socketPeerPID returns the pid of the process listening on the unix
// socket at path (its peer credentials), or 0 when it cannot be told.
func socketPeerPID(path string) int {
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return 0
	}
	defer conn.Close()
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return 0
	}
	_, pid, err := peerCred(uc)
	if err != nil {
		return 0
	}
	return pid
}
