package cupti

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeLibrary connects like the injected library: HELLO (with this process's pid, as the
// receiver checks), a NAME, kernels; it answers a flush command with a STATS record flagged
// FlagFlushAck.
func fakeLibrary(t *testing.T, path string, kernels int) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	b = append(b, encHello(uint32(os.Getpid()))...)
	b = append(b, encName(1, "k1")...)
	for i := 0; i < kernels; i++ {
		b = append(b, encRecord(TypeKernel, 0, &Kernel{Start: uint64(i), End: uint64(i + 1), NameID: 1}, nil)...)
	}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	go func() {
		cmd := make([]byte, 1)
		for {
			if _, err := c.Read(cmd); err != nil {
				return
			}
			if cmd[0] == cmdFlush {
				c.Write(encRecord(TypeStats, FlagFlushAck, &LibStats{RecordsDelivered: uint64(kernels)}, nil))
			}
		}
	}()
	return c
}

// countHandler counts what it is handed, by connection id.
type countHandler struct {
	mu      sync.Mutex
	opened  map[uint64]bool
	kernels map[uint64]int
	names   map[string]bool
	closed  int
}

func newCountHandler() *countHandler {
	return &countHandler{opened: map[uint64]bool{}, kernels: map[uint64]int{}, names: map[string]bool{}}
}

func (h *countHandler) Open(c *Conn) {
	h.mu.Lock()
	h.opened[c.ID()] = true
	h.mu.Unlock()
}
func (h *countHandler) Records(c *Conn, b *Batch) {
	h.mu.Lock()
	h.kernels[c.ID()] += len(b.Kernels)
	for _, k := range b.Kernels {
		h.names[c.Name(k.NameID)] = true
	}
	h.mu.Unlock()
}
func (h *countHandler) Close(c *Conn, err error) {
	h.mu.Lock()
	h.closed++
	h.mu.Unlock()
}

func TestReceiverConnectionsFlushStats(t *testing.T) {
	h := newCountHandler()
	r, path := startReceiver(t, h)
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o666 {
		t.Errorf("socket mode: %v %v", st.Mode(), err)
	}
	a := fakeLibrary(t, path, 1000)
	defer a.Close()
	for deadline := time.Now().Add(5 * time.Second); len(r.Stats().Open) != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("first connection not accepted")
		}
	}
	b := fakeLibrary(t, path, 10) // connection 2
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The fake libraries wrote everything before their acknowledgement: after FlushWait the
	// handler has seen all of it.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if len(r.Stats().Open) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := r.FlushWait(ctx); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	if h.kernels[1] != 1000 || h.kernels[2] != 10 || !h.names["k1"] || !h.opened[1] || !h.opened[2] {
		t.Errorf("handler saw %v, names %v, opened %v", h.kernels, h.names, h.opened)
	}
	h.mu.Unlock()
	st := r.Stats()
	if st.Accepted != 2 || len(st.Open) != 2 || st.Total.Records[TypeKernel] != 1010 || st.Total.Lib.RecordsDelivered != 1010 {
		t.Errorf("stats %+v", st)
	}
	b.Close()
	for deadline := time.Now().Add(5 * time.Second); len(r.Stats().Open) != 1; {
		if time.Now().After(deadline) {
			t.Fatal("closed connection still open")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := r.Stats(); st.Total.Records[TypeKernel] != 1010 || st.Total.Records[TypeHello] != 2 {
		t.Errorf("totals after a close: %+v", st.Total)
	}
}

func TestListenReplacesOnlyStaleSockets(t *testing.T) {
	dir := t.TempDir()
	// A stale socket (nobody listening) is replaced.
	stale := filepath.Join(dir, "a", "b", "stale.sock")
	os.MkdirAll(filepath.Dir(stale), 0o755)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	r, err := Listen(Config{Path: stale})
	if err != nil {
		t.Fatalf("replacing a stale socket: %v", err)
	}
	// A live one is not.
	if _, err := Listen(Config{Path: stale}); err == nil || !strings.Contains(err.Error(), "another receiver") {
		t.Errorf("second Listen on a live socket: %v", err)
	}
	r.Close()
	if _, err := os.Lstat(stale); !os.IsNotExist(err) {
		t.Errorf("socket left after Close: %v", err)
	}
	// A regular file is never removed.
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	if _, err := Listen(Config{Path: file}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen over a regular file: %v", err)
	}
}

func TestReceiverDropsBrokenStream(t *testing.T) {
	h := newCountHandler()
	r, path := startReceiver(t, h)
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bad := encRecord(TypeKernel, 0, &Kernel{}, nil)
	bad[0] = 3 // length 3
	c.Write(append(encHello(uint32(os.Getpid())), bad...))
	for deadline := time.Now().Add(5 * time.Second); ; {
		st := r.Stats()
		if st.Total.Errors.BadLength == 1 && len(st.Open) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("broken stream not dropped: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// slowHandler is a countHandler that takes its time over every batch, like an agent busy
// elsewhere when a target exits.
type slowHandler struct{ *countHandler }

func (h *slowHandler) Records(c *Conn, b *Batch) {
	time.Sleep(30 * time.Millisecond)
	h.countHandler.Records(c, b)
}

// TestFlushWaitReadsExitedLibrary: a library that wrote its last records and exited (so it
// cannot take a flush request) is read to its end by FlushWait before Close, even when the
// handler is slow and most of those records are still in the socket.
func TestFlushWaitReadsExitedLibrary(t *testing.T) {
	h := &slowHandler{newCountHandler()}
	r, path := startReceiver(t, h)
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	const kernels = 20000 // 1.9 MB: eight reads or more, 30 ms each
	b := append(encHello(uint32(os.Getpid())), encName(1, "k1")...)
	for i := 0; i < kernels; i++ {
		b = append(b, encRecord(TypeKernel, 0, &Kernel{Start: uint64(i), End: uint64(i + 1), NameID: 1}, nil)...)
	}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	c.Close() // the process exited: its last records wait in the socket
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.FlushWait(ctx); err != nil {
		t.Fatal(err)
	}
	r.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.kernels[1] != kernels {
		t.Errorf("the handler saw %d of the %d kernels the exited library sent", h.kernels[1], kernels)
	}
}
