package cupti

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// onlyPids is an Authorize that lets through the peers whose pid is in the set.
func onlyPids(pids ...int) func(context.Context, Peer) error {
	return func(_ context.Context, p Peer) error {
		for _, pid := range pids {
			if p.Pid == pid {
				return nil
			}
		}
		return fmt.Errorf("pid %d is not traced", p.Pid)
	}
}

// waitStats polls r's counters until ok holds (5 s at most).
func waitStats(t *testing.T, r *Receiver, what string, ok func(ReceiverStats) bool) ReceiverStats {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := r.Stats()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: receiver stats %+v", what, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sendKernels connects and writes a HELLO claiming pid, then kernels records; it returns the
// connection (the caller closes it).
func sendKernels(t *testing.T, path string, pid uint32, kernels int) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	b := encHello(pid)
	for i := 0; i < kernels; i++ {
		b = append(b, encRecord(TypeKernel, 0, &Kernel{Start: uint64(i), End: uint64(i + 1)}, nil)...)
	}
	go c.Write(b) // the receiver may close before reading it all
	return c
}

// TestReceiverRejectsUntracedPeer: a peer that Authorize refuses never reaches the handler,
// whatever pid its HELLO claims (here the traced process's), and is counted.
func TestReceiverRejectsUntracedPeer(t *testing.T) {
	h := newCountHandler()
	const target = 1 // the traced process: not this one
	r, path := startReceiverConfig(t, h, Config{Path: filepath.Join(t.TempDir(), "s.sock"), Authorize: onlyPids(target)})
	c := sendKernels(t, path, target, 1000)
	defer c.Close()
	st := waitStats(t, r, "untraced peer", func(s ReceiverStats) bool { return s.Rejected.Total() == 1 })
	h.mu.Lock()
	defer h.mu.Unlock()
	if st.Rejected.NotTraced != 1 || st.Accepted != 0 || len(h.opened) != 0 || st.Total.Records[TypeKernel] != 0 {
		t.Errorf("untraced peer: stats %+v, handler opened %v", st, h.opened)
	}
}

// TestReceiverRejectsPidMismatch: a traced peer whose HELLO claims another pid is rejected;
// one claiming its own is accepted and attributed to its pid.
func TestReceiverRejectsPidMismatch(t *testing.T) {
	h := newCountHandler()
	me := os.Getpid()
	r, path := startReceiverConfig(t, h, Config{Path: filepath.Join(t.TempDir(), "s.sock"), Authorize: onlyPids(me)})
	bad := sendKernels(t, path, uint32(me+1), 100)
	defer bad.Close()
	waitStats(t, r, "pid mismatch", func(s ReceiverStats) bool { return s.Rejected.PidMismatch == 1 })
	good := sendKernels(t, path, uint32(me), 100)
	defer good.Close()
	st := waitStats(t, r, "own pid", func(s ReceiverStats) bool { return s.Total.Records[TypeKernel] == 100 })
	if st.Accepted != 1 || st.Rejected.Total() != 1 || len(st.Open) != 1 || st.Open[0].Pid != uint32(me) {
		t.Errorf("stats %+v", st)
	}
}

// TestReceiverBoundsConnections: 6,000 connections held open by one process that is not traced
// (its authorization waits for the deadline, as the session's does for a fork it has not seen)
// never hold more than the per-peer limit at once, and every one is counted as rejected.
func TestReceiverBoundsConnections(t *testing.T) {
	const n = 6000
	wait := func(ctx context.Context, p Peer) error { <-ctx.Done(); return errors.New("not traced") }
	r, path := startReceiverConfig(t, newCountHandler(), Config{Path: filepath.Join(t.TempDir(), "s.sock"),
		Authorize: wait, HelloTimeout: 200 * time.Millisecond})
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	st := waitStats(t, r, "6000 connections", func(s ReceiverStats) bool { return s.Rejected.Total() == n })
	if st.PeakOpen > DefaultMaxConnsPerPid || st.Rejected.NotTraced == 0 || st.Rejected.OverLimit == 0 ||
		st.Rejected.NotTraced+st.Rejected.OverLimit != n || st.Accepted != 0 || st.Pending != 0 {
		t.Errorf("stats after %d connections: %+v", n, st)
	}
	// The receiver closed every one: each reads its end.
	for _, i := range []int{0, n / 2, n - 1} {
		conns[i].SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := conns[i].Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("connection %d still open: %v", i, err)
		}
	}
}

// TestReceiverTotalLimit: with the per-peer limit out of the way, accepted connections stop at
// MaxConns, those being checked at MaxPending, and a connection that sends nothing is closed at
// the HELLO deadline.
func TestReceiverTotalLimit(t *testing.T) {
	const maxConns, maxPending = 8, 4
	r, path := startReceiverConfig(t, newCountHandler(), Config{Path: filepath.Join(t.TempDir(), "s.sock"),
		MaxConns: maxConns, MaxPending: maxPending, MaxConnsPerPid: 1 << 20, HelloTimeout: 300 * time.Millisecond})
	me := uint32(os.Getpid())
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < 3*maxConns; i++ {
		conns = append(conns, sendKernels(t, path, me, 1))
		// One at a time, so the pending limit does not decide.
		waitStats(t, r, "one more", func(s ReceiverStats) bool { return s.Accepted+s.Rejected.Total() == uint64(i+1) })
	}
	st := r.Stats()
	if st.Accepted != maxConns || len(st.Open) != maxConns || st.Rejected.OverLimit != 2*maxConns {
		t.Errorf("after %d connections: %+v", 3*maxConns, st)
	}
	for _, c := range conns[:maxConns] {
		c.Close()
	}
	conns = conns[maxConns:]
	waitStats(t, r, "closed", func(s ReceiverStats) bool { return len(s.Open) == 0 })
	// Silent connections: at most maxPending at once, each closed at its deadline.
	for i := 0; i < 3*maxPending; i++ {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	st = waitStats(t, r, "silent", func(s ReceiverStats) bool {
		return s.Rejected.NoHello+s.Rejected.OverLimit == 2*maxConns+3*maxPending && s.Pending == 0
	})
	if st.Rejected.NoHello == 0 || st.Rejected.NoHello > maxPending || st.PeakOpen > maxConns+maxPending {
		t.Errorf("silent connections: %+v", st)
	}
}

// TestReceiverCountsGarbageAfterHello: bytes that frame no record after a valid HELLO are counted
// as malformed and end the connection; its HELLO was accepted.
func TestReceiverCountsGarbageAfterHello(t *testing.T) {
	h := newCountHandler()
	r, path := startReceiverConfig(t, h, Config{Path: filepath.Join(t.TempDir(), "s.sock"), Authorize: onlyPids(os.Getpid())})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	garbage := []byte(strings.Repeat("\xff\x13garbage!", 64))
	c.Write(append(encHello(uint32(os.Getpid())), garbage...))
	st := waitStats(t, r, "garbage", func(s ReceiverStats) bool { return s.Total.Errors.Total() > 0 && len(s.Open) == 0 })
	if st.Accepted != 1 || st.Total.Errors.BadLength != 1 {
		t.Errorf("garbage after a HELLO: %+v", st)
	}
}

// TestReceiverRejectsBadHello: a first record that is no HELLO is a rejection of its own.
func TestReceiverRejectsBadHello(t *testing.T) {
	r, path := startReceiver(t, newCountHandler())
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(encRecord(TypeKernel, 0, &Kernel{}, nil))
	waitStats(t, r, "bad hello", func(s ReceiverStats) bool { return s.Rejected.BadHello == 1 && s.Accepted == 0 })
}

// TestListenSessionDir: a receiver listens in a fresh directory of its own (0711, a random name)
// under its parent, which nobody else may list; it removes what dead agents left there, and its
// own directory at Close.
func TestListenSessionDir(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(parent, 0o755); err != nil { // as agents before session directories made it
		t.Fatal(err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPid := dead.Process.Pid
	staleSock := func(path string) {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ln.SetUnlinkOnClose(false)
		ln.Close()
	}
	staleDir := filepath.Join(parent, fmt.Sprintf("cupti-%d-0123456789abcdef", deadPid))
	os.Mkdir(staleDir, 0o711)
	staleSock(filepath.Join(staleDir, SocketName))
	oldLayout := filepath.Join(parent, fmt.Sprintf("cupti-%d.sock", deadPid))
	staleSock(oldLayout)
	// A live agent's (pid 1 runs), and a dead one's that still answers, stay.
	liveDir := filepath.Join(parent, "cupti-1-00000000")
	os.Mkdir(liveDir, 0o711)
	answering := filepath.Join(parent, fmt.Sprintf("cupti-%d-fedcba9876543210", deadPid))
	os.Mkdir(answering, 0o711)
	ln, err := net.Listen("unix", filepath.Join(answering, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	r, err := Listen(Config{Dir: parent})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(r.Path())
	for path, mode := range map[string]os.FileMode{parent: 0o711, dir: 0o711, r.Path(): 0o666} {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v (%v), want %v", path, st.Mode().Perm(), err, mode)
		}
	}
	if filepath.Dir(dir) != parent || !strings.HasPrefix(filepath.Base(dir), fmt.Sprintf("cupti-%d-", os.Getpid())) {
		t.Errorf("session directory %s", dir)
	}
	for path, want := range map[string]bool{staleDir: false, oldLayout: false, liveDir: true, answering: true} {
		if _, err := os.Lstat(path); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", path, err == nil, want)
		}
	}
	r2, err := Listen(Config{Dir: parent})
	if err != nil || filepath.Dir(r2.Path()) == dir {
		t.Fatalf("a second receiver: %v, path %s", err, r2.Path())
	}
	r2.Close()
	r.Close()
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("session directory left after Close: %v", err)
	}
	// A parent that others can write to is refused.
	open := filepath.Join(t.TempDir(), "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	if _, err := Listen(Config{Dir: open}); err == nil || !strings.Contains(err.Error(), "others may write") {
		t.Errorf("Listen in a world-writable directory: %v", err)
	}
}
