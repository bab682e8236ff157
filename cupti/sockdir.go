package cupti

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultDir is where a Receiver makes its session directory unless Config says otherwise.
const DefaultDir = "/run/specprof"

// SocketName is the socket's name inside a session directory.
const SocketName = "cupti.sock"

// sessionPrefix starts the name of every session directory: cupti-<agent pid>-<random hex>.
const sessionPrefix = "cupti-"

// The socket's access, in layers. The parent directory is 0711 (root's /run/specprof) or 0700 (a
// fallback of an agent without root): nobody but its owner can list it. The session directory
// is 0711 with 64 random bits in its name, so only a process told the name (the targets, through
// SPECPROF_SOCKET in their environment) can reach the socket; the socket itself is 0666 because
// a target may run as another user than the agent (started through sudo -u, or dropping its
// privileges), and connecting to a unix socket needs write permission on it. The name is no
// secret from the target's own user, who can read its environment, nor is it meant to be: the
// receiver's check of every peer (Config.Authorize, the HELLO's pid against SO_PEERCRED) is what
// decides, the directory only keeps strangers from reaching the socket at all.
const (
	parentMode  = 0o711
	sessionMode = 0o711
	socketMode  = 0o666
)

// prepareParent makes dir (mode parentMode) if it is missing and checks one that exists: a real
// directory (no symlink), owned by this user or root, that nobody else can write to; one of ours
// that others can list (0755, as agents before session directories made it) is narrowed to
// parentMode.
func prepareParent(dir string) error {
	if err := os.MkdirAll(dir, parentMode); err != nil {
		return fmt.Errorf("creating the socket directory %s: %w", dir, err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("checking the socket directory %s: %w", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("checking the socket directory %s: not a directory", dir)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("checking the socket directory %s: no owner", dir)
	}
	euid := uint32(os.Geteuid())
	if sys.Uid != euid && sys.Uid != 0 {
		return fmt.Errorf("checking the socket directory %s: owned by uid %d, not by this user (%d) or root", dir, sys.Uid, euid)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("checking the socket directory %s: others may write to it (mode %v)", dir, st.Mode().Perm())
	}
	if sys.Uid == euid && st.Mode().Perm()&0o044 != 0 {
		if err := os.Chmod(dir, st.Mode().Perm()&^0o044); err != nil {
			return fmt.Errorf("keeping others from listing the socket directory %s: %w", dir, err)
		}
	}
	return nil
}

// makeSessionDir creates a fresh session directory under parent, named by this process's pid
// (for removeStale) and 64 random bits.
func makeSessionDir(parent string) (string, error) {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", fmt.Errorf("naming the session directory: %w", err)
	}
	dir := filepath.Join(parent, fmt.Sprintf("%s%d-%s", sessionPrefix, os.Getpid(), hex.EncodeToString(rnd[:])))
	// Mkdir fails on anything already there, a symlink included.
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating the session directory: %w", err)
	}
	if err := os.Chmod(dir, sessionMode); err != nil { // the umask narrowed Mkdir's mode
		os.Remove(dir)
		return "", fmt.Errorf("opening the session directory %s to the targets: %w", dir, err)
	}
	return dir, nil
}

// removeStale removes what agents that died left in parent: session directories
// (cupti-<pid>-<hex>) and sockets of the layout before them (cupti-<pid>.sock), owned by this
// user, whose agent pid no longer runs and whose socket refuses connections. Both conditions:
// a reused pid alone must not cost a live agent its socket, and a socket nobody answers may
// belong to an agent still starting. It returns the paths removed and the first error.
func removeStale(parent string) ([]string, error) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return nil, fmt.Errorf("listing %s for stale sockets: %w", parent, err)
	}
	var removed []string
	var first error
	euid := uint32(os.Geteuid())
	for _, e := range ents {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, sessionPrefix)
		if !ok {
			continue
		}
		var pidStr, sock string
		switch {
		case e.IsDir():
			p, _, ok := strings.Cut(rest, "-")
			if !ok {
				continue
			}
			pidStr, sock = p, filepath.Join(parent, name, SocketName)
		case e.Type()&os.ModeSocket != 0 && strings.HasSuffix(rest, ".sock"):
			pidStr, sock = strings.TrimSuffix(rest, ".sock"), filepath.Join(parent, name)
		default:
			continue
		}
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || pid == os.Getpid() || pidAlive(pid) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		if sys, ok := info.Sys().(*syscall.Stat_t); !ok || sys.Uid != euid {
			continue
		}
		if c, err := net.DialTimeout("unix", sock, 200*time.Millisecond); err == nil {
			c.Close()
			continue
		}
		path := filepath.Join(parent, name)
		if err := os.RemoveAll(path); err != nil { // RemoveAll follows no symlink
			if first == nil {
				first = fmt.Errorf("removing the stale socket %s: %w", path, err)
			}
			continue
		}
		removed = append(removed, path)
	}
	return removed, first
}

// pidAlive says whether a process pid exists (kill -0; EPERM: it exists, as another user's).
func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
