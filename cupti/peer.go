package cupti

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"

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
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the pid namespaces of %d: %w", pid, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 2 || string(f[0]) != "NSpid:" {
			continue
		}
		v, err := strconv.ParseUint(string(f[len(f)-1]), 10, 32)
		if err != nil {
			return 0, fmt.Errorf("reading the pid namespaces of %d: NSpid %q: %w", pid, f, err)
		}
		return uint32(v), nil
	}
	// No NSpid line: a kernel before 4.1, whose processes all see the one namespace here.
	return uint32(pid), nil
}
