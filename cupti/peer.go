package cupti

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// Peer is the process at the other end of a connection as the kernel saw it connect
// (SO_PEERCRED): its pid in the receiver's pid namespace, and its uid and gid.
type Peer struct {
	Pid int
	Uid uint32
	Gid uint32
}

// peerOf reads the credentials of the process that connected c.
func peerOf(c *net.UnixConn) (Peer, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return Peer{}, fmt.Errorf("reading the peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Peer{}, fmt.Errorf("reading the peer credentials: %w", err)
	}
	if serr != nil {
		return Peer{}, fmt.Errorf("reading the peer credentials: %w", serr)
	}
	if cred.Pid <= 0 {
		// 0: the peer is in a pid namespace that does not map into the receiver's.
		return Peer{}, fmt.Errorf("reading the peer credentials: pid %d is not visible from here", cred.Pid)
	}
	return Peer{Pid: int(cred.Pid), Uid: cred.Uid, Gid: cred.Gid}, nil
}

// ownPid returns the pid of process pid (in the receiver's namespace) as that process sees itself
// in its own pid namespace: the last field of NSpid in /proc/<pid>/status. It is what the
// library's getpid() put in its HELLO.
func ownPid(pid int) (uint32, error) {
	ids, err := nsIDs(fmt.Sprintf("%s/%d/status", procRoot, pid))
	if err != nil {
		return 0, fmt.Errorf("reading the pid namespaces of %d: %w", pid, err)
	}
	if len(ids) == 0 {
		// No NSpid line: a kernel before 4.1, whose processes all see the one namespace here.
		return uint32(pid), nil
	}
	return ids[len(ids)-1], nil
}
