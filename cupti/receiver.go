package cupti

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultSocket is where the injected library connects when SPECPROF_SOCKET is unset.
const DefaultSocket = "/run/specprof/cupti.sock"

// readBufSize bounds one read (and so one Batch): it holds several maximal records. It is
// allocated once a connection has passed every check (see Config), never for a stranger's.
const readBufSize = 256 << 10

// Limits a Receiver applies unless its Config sets others. The injected library holds one
// connection per process (a new one only after the last one ended), so the per-process limit
// leaves room for a reconnection; the total bounds the receiver's memory to MaxConns read buffers
// (32 MiB) whatever connects.
const (
	DefaultMaxConns       = 128
	DefaultMaxPending     = 32
	DefaultMaxConnsPerPid = 4
	DefaultHelloTimeout   = 3 * time.Second
)

// maxHelloLen bounds the HELLO record read before a connection is accepted (the library's is 56
// bytes; longer ones are allowed for fields appended later).
const maxHelloLen = 4096

// Config configures a Receiver. Every connection is checked before its records reach the
// Handler: the kernel's account of the peer (SO_PEERCRED) must satisfy Authorize, the peer's
// first record must be a valid HELLO arriving within HelloTimeout, and the pid the HELLO claims
// must be the peer's own pid in its pid namespace. A connection failing any check is closed and
// counted in ReceiverStats.Rejected, by reason, and each reason is logged once.
type Config struct {
	// Path is the socket's path; its directory is the caller's (created 0711 when missing).
	// Empty: Listen makes a fresh session directory under Dir and listens on SocketName in it,
	// and Close removes both.
	Path string
	// Dir is the parent of the session directory when Path is empty (DefaultDir when empty too).
	// Listen creates it (0711) when missing, refuses one that others can write to, and removes
	// what agents that died left in it.
	Dir string
	// Authorize decides whether the peer may deliver records; a non-nil error rejects the
	// connection (ReceiverStats.Rejected.NotTraced). ctx ends at the HELLO deadline or at Close.
	// Nil: every peer may, as long as its HELLO names it.
	Authorize func(ctx context.Context, peer Peer) error
	// MaxConns bounds the connections accepted and open at once, MaxPending those still being
	// checked, MaxConnsPerPid both together for one peer pid; HelloTimeout is how long a new
	// connection has to be authorized and send its HELLO. Zero: the Default values.
	MaxConns       int
	MaxPending     int
	MaxConnsPerPid int
	HelloTimeout   time.Duration
	// Logger receives the first rejection of each reason and the stale sockets removed (nil:
	// slog.Default()).
	Logger *slog.Logger
}

// RejectReason is why a connection was closed before its records were read.
type RejectReason int

// The reasons, in ReceiverStats.Rejected.
const (
	RejectNotTraced   RejectReason = iota // Config.Authorize refused the peer
	RejectPidMismatch                     // the HELLO claims another pid than the peer's own
	RejectOverLimit                       // MaxConns, MaxPending or MaxConnsPerPid reached
	RejectNoHello                         // no complete HELLO within HelloTimeout (or the peer left first)
	RejectBadHello                        // the first record is no valid HELLO
	RejectNoPeer                          // the peer's credentials or pid namespaces could not be read
	numRejectReasons
)

var rejectNames = [numRejectReasons]string{"not traced", "pid mismatch", "over limit", "no hello in time",
	"bad hello", "peer unknown"}

// String names the reason.
func (r RejectReason) String() string {
	if r < 0 || r >= numRejectReasons {
		return fmt.Sprintf("reason %d", int(r))
	}
	return rejectNames[r]
}

// Rejects counts rejected connections by reason.
type Rejects struct {
	NotTraced   uint64
	PidMismatch uint64
	OverLimit   uint64
	NoHello     uint64
	BadHello    uint64
	NoPeer      uint64
}

// Total is the number of rejected connections.
func (r Rejects) Total() uint64 {
	return r.NotTraced + r.PidMismatch + r.OverLimit + r.NoHello + r.BadHello + r.NoPeer
}

func (r *Rejects) add(why RejectReason) {
	switch why {
	case RejectNotTraced:
		r.NotTraced++
	case RejectPidMismatch:
		r.PidMismatch++
	case RejectOverLimit:
		r.OverLimit++
	case RejectNoHello:
		r.NoHello++
	case RejectBadHello:
		r.BadHello++
	case RejectNoPeer:
		r.NoPeer++
	}
}

// Handler consumes what a Receiver decodes. For one connection the calls are serial: Open once
// (after its HELLO), Records any number of times, Close once. Different connections call
// concurrently, from their own goroutines.
type Handler interface {
	// Open announces a new connection; c.Info() holds its HELLO.
	Open(c *Conn)
	// Records delivers the records decoded from one read. b is reused after the call returns.
	Records(c *Conn, b *Batch)
	// Close announces the end of the connection: err is nil at a clean end of stream.
	Close(c *Conn, err error)
}

// ConnInfo identifies a connection: the receiver's id for it, its peer and the library's HELLO.
type ConnInfo struct {
	ID uint64
	// Pid is the process's pid in the receiver's pid namespace (the peer's, from the kernel):
	// the pid records are attributed to. Hello.Pid is the pid the library claimed, the same
	// process as its own pid namespace numbers it (the two differ inside a container).
	Pid  uint32
	Peer Peer
	Hello
}

// ConnStats is one connection's counters.
type ConnStats struct {
	ID  uint64
	Pid uint32 // as ConnInfo.Pid
	DecoderStats
	// TidsUnmapped counts the thread ids in API and graph node records of a process in
	// another pid namespace that could not be translated to the receiver's (the thread had
	// exited before its records were read): those records carry tid 0.
	TidsUnmapped uint64
}

// ReceiverStats holds the counters of every open connection and totals over all connections
// the receiver has had (closed ones included).
type ReceiverStats struct {
	// Accepted counts connections that passed every check and were handed to the Handler;
	// Rejected those closed before, by reason. Pending is the number being checked now, and
	// PeakOpen the most connections (checked or being checked) held at once.
	Accepted uint64
	Rejected Rejects
	Pending  int
	PeakOpen int
	Open     []ConnStats
	// Total sums Records, Bytes, Errors and NamesDropped over every accepted connection; its
	// Lib sums each connection's latest library counters.
	Total ConnStats
}

// Conn is one library connection (one process).
type Conn struct {
	id       uint64
	nc       *net.UnixConn
	peer     Peer
	accepted time.Time
	ready    bool // passed every check: handed to the Handler (under Receiver.mu)
	dec      *Decoder
	// tids translates the thread ids of a library in another pid namespace (nil when the
	// peer shares the receiver's); only the connection's goroutine uses it.
	tids     *tidMap
	unmapped atomic.Uint64 // thread ids tids could not translate (see ConnStats)
	acks     chan struct{} // one token per flush acknowledgement
	closed   chan struct{}
}

// ID is the receiver's number for the connection (from 1, in accept order).
func (c *Conn) ID() uint64 { return c.id }

// Info returns the connection's id, peer and HELLO.
func (c *Conn) Info() ConnInfo {
	h, _ := c.dec.Hello()
	return ConnInfo{ID: c.id, Pid: uint32(c.peer.Pid), Peer: c.peer, Hello: h}
}

// Name resolves a Kernel.NameID of this connection ("" when unknown).
func (c *Conn) Name(id uint32) string { return c.dec.Name(id) }

// Stats returns the connection's counters.
func (c *Conn) Stats() ConnStats {
	return ConnStats{ID: c.id, Pid: uint32(c.peer.Pid), DecoderStats: c.dec.Stats(), TidsUnmapped: c.unmapped.Load()}
}

// Flush asks the library to hand over everything CUPTI holds; it answers with a STATS record
// flagged FlagFlushAck (Batch.FlushAck).
func (c *Conn) Flush() error { return c.command(cmdFlush, "to flush") }

// RequestWindow tells the library that its process is running decode cycles now: a library
// whose duty windows wait for that (SPECPROF_CUPTI_DUTY_START=cycles) opens its next window, no
// sooner than a period after the last one opened; others ignore it.
func (c *Conn) RequestWindow() error { return c.command(cmdWindow, "for a tracing window") }

// command writes a one-byte command to the library (at most a second's wait: the socket is
// the library's to drain).
func (c *Conn) command(b byte, what string) error {
	if err := c.nc.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
		return fmt.Errorf("asking connection %d %s: %w", c.id, what, err)
	}
	if _, err := c.nc.Write([]byte{b}); err != nil {
		return fmt.Errorf("asking connection %d %s: %w", c.id, what, err)
	}
	return nil
}

// Receiver accepts library connections on a unix socket.
type Receiver struct {
	ln   *net.UnixListener
	path string
	dir  string // the session directory Listen made (removed by Close); "" with Config.Path
	cfg  Config
	log  *slog.Logger
	ctx  context.Context // ends at Close: pending authorizations stop waiting
	stop context.CancelFunc

	mu       sync.Mutex
	conns    map[uint64]*Conn // being checked and accepted
	pending  int
	open     int         // accepted and not yet closed
	perPid   map[int]int // conns by peer pid
	done     ConnStats   // totals of closed connections
	accepted uint64
	rejected Rejects
	logged   [numRejectReasons]bool
	peak     int
	closed   bool
	wg       sync.WaitGroup
	nextID   atomic.Uint64
}

// Listen creates the socket that cfg says and returns the Receiver listening on it. With
// cfg.Path it replaces a stale socket there (nobody listening) but refuses to replace a live one
// or a file that is not a socket. The socket is 0666 (see sessionMode for why that is safe).
func Listen(cfg Config) (*Receiver, error) {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = DefaultMaxPending
	}
	if cfg.MaxConnsPerPid <= 0 {
		cfg.MaxConnsPerPid = DefaultMaxConnsPerPid
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = DefaultHelloTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	path, dir := cfg.Path, ""
	if path == "" {
		parent := cfg.Dir
		if parent == "" {
			parent = DefaultDir
		}
		if err := prepareParent(parent); err != nil {
			return nil, err
		}
		removed, err := removeStale(parent)
		for _, p := range removed {
			log.Info("removed the CUPTI socket of an agent that is gone", "path", p)
		}
		if err != nil {
			log.Warn("removing stale CUPTI sockets", "err", err)
		}
		if dir, err = makeSessionDir(parent); err != nil {
			return nil, fmt.Errorf("listening in %s: %w", parent, err)
		}
		path = filepath.Join(dir, SocketName)
	} else {
		if err := os.MkdirAll(filepath.Dir(path), parentMode); err != nil {
			return nil, fmt.Errorf("creating the socket directory for %s: %w", path, err)
		}
		if err := replaceStale(path); err != nil {
			return nil, err
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err == nil {
		if err = os.Chmod(path, socketMode); err != nil {
			ln.Close()
			err = fmt.Errorf("making %s connectable by the targets: %w", path, err)
		}
	} else {
		err = fmt.Errorf("listening on %s: %w", path, err)
	}
	if err != nil {
		if dir != "" {
			os.RemoveAll(dir)
		}
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Receiver{ln: ln, path: path, dir: dir, cfg: cfg, log: log, ctx: ctx, stop: stop,
		conns: make(map[uint64]*Conn), perPid: make(map[int]int)}, nil
}

// replaceStale removes a socket at path that nobody listens on; it refuses a live one and any
// other file.
func replaceStale(path string) error {
	st, err := os.Lstat(path)
	if err != nil {
		return nil
	}
	if st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("listening on %s: a file that is not a socket is in the way", path)
	}
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return fmt.Errorf("listening on %s: another receiver is listening there", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("removing the stale socket %s: %w", path, err)
	}
	return nil
}

// Path is the socket's path.
func (r *Receiver) Path() string { return r.path }

// Serve accepts connections and decodes them into h until Close. It returns nil after Close,
// or the accept error that stopped it.
func (r *Receiver) Serve(h Handler) error {
	for {
		nc, err := r.ln.AcceptUnix()
		if err != nil {
			r.mu.Lock()
			closed := r.closed
			r.mu.Unlock()
			if closed {
				r.wg.Wait()
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accepting on %s: %w", r.path, err)
		}
		c := &Conn{id: r.nextID.Add(1), nc: nc, accepted: time.Now(), dec: NewDecoder(),
			acks: make(chan struct{}, 1), closed: make(chan struct{})}
		peer, perr := peerOf(nc)
		c.peer = peer
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			nc.Close()
			continue
		}
		switch {
		case perr != nil:
			r.rejectLocked(c, RejectNoPeer, perr)
		case r.pending >= r.cfg.MaxPending || r.perPid[peer.Pid] >= r.cfg.MaxConnsPerPid:
			r.rejectLocked(c, RejectOverLimit, fmt.Errorf("%d connections being checked (at most %d), %d of this peer's (at most %d)",
				r.pending, r.cfg.MaxPending, r.perPid[peer.Pid], r.cfg.MaxConnsPerPid))
		default:
			r.conns[c.id] = c
			r.pending++
			r.perPid[peer.Pid]++
			r.peak = max(r.peak, r.pending+r.open)
			r.wg.Add(1)
			go r.serveConn(c, h)
		}
		r.mu.Unlock()
	}
}

// rejectLocked closes a connection that was never handed to the Handler, counts it and logs the
// first one of its reason (under r.mu).
func (r *Receiver) rejectLocked(c *Conn, why RejectReason, err error) {
	c.nc.Close()
	r.rejected.add(why)
	if r.logged[why] {
		return
	}
	r.logged[why] = true
	h, _ := c.dec.Hello()
	r.log.Warn("CUPTI connection rejected; later ones for the same reason are counted in the report, not logged",
		"reason", why.String(), "peer_pid", c.peer.Pid, "peer_uid", c.peer.Uid, "claimed_pid", h.Pid, "err", err)
}

// handshake checks a new connection (see Config); on success the HELLO is decoded.
func (r *Receiver) handshake(c *Conn) (RejectReason, error) {
	deadline := c.accepted.Add(r.cfg.HelloTimeout)
	if r.cfg.Authorize != nil {
		ctx, cancel := context.WithDeadline(r.ctx, deadline)
		err := r.cfg.Authorize(ctx, c.peer)
		cancel()
		if err != nil {
			return RejectNotTraced, err
		}
	}
	if err := c.nc.SetReadDeadline(deadline); err != nil {
		return RejectNoHello, fmt.Errorf("setting the HELLO deadline: %w", err)
	}
	var hdr [SizeofHeader]byte
	if _, err := io.ReadFull(c.nc, hdr[:]); err != nil {
		return RejectNoHello, fmt.Errorf("reading the HELLO: %w", err)
	}
	n := int(binary.LittleEndian.Uint32(hdr[:]))
	if typ := RecordType(binary.LittleEndian.Uint16(hdr[4:])); typ != TypeHello || n < SizeofHeader+SizeofHello ||
		n > maxHelloLen || n%8 != 0 {
		return RejectBadHello, fmt.Errorf("first record: type %d, %d bytes", typ, n)
	}
	rec := make([]byte, n)
	copy(rec, hdr[:])
	if _, err := io.ReadFull(c.nc, rec[SizeofHeader:]); err != nil {
		return RejectNoHello, fmt.Errorf("reading the HELLO: %w", err)
	}
	var b Batch
	if _, err := c.dec.Decode(rec, &b); err != nil {
		return RejectBadHello, err
	}
	h, _ := c.dec.Hello()
	own, err := ownPid(c.peer.Pid)
	if err != nil {
		return RejectNoPeer, err
	}
	if h.Pid != own {
		return RejectPidMismatch, fmt.Errorf("the HELLO claims pid %d, the peer is pid %d in its own namespace", h.Pid, own)
	}
	// The threads that exist at the HELLO are mapped now; later ones when their first
	// records come.
	if c.tids, err = newTidMap(c.peer.Pid); err != nil {
		return RejectNoPeer, err
	}
	if err := c.nc.SetReadDeadline(time.Time{}); err != nil {
		return RejectNoHello, fmt.Errorf("clearing the HELLO deadline: %w", err)
	}
	return 0, nil
}

func (r *Receiver) serveConn(c *Conn, h Handler) {
	defer r.wg.Done()
	why, err := r.handshake(c)
	r.mu.Lock()
	r.pending--
	if err == nil && r.open >= r.cfg.MaxConns {
		why, err = RejectOverLimit, fmt.Errorf("%d connections open (at most %d)", r.open, r.cfg.MaxConns)
	}
	if err != nil || r.closed {
		if !r.closed { // not the receiver's own Close cutting the check short
			r.rejectLocked(c, why, err)
		}
		c.nc.Close()
		r.forgetLocked(c)
		r.mu.Unlock()
		return
	}
	c.ready = true
	r.open++
	r.accepted++
	r.mu.Unlock()
	h.Open(c)
	err = r.readLoop(c, h)
	c.nc.Close()
	close(c.closed)
	h.Close(c, err)
	st := c.Stats()
	r.mu.Lock()
	r.open--
	r.forgetLocked(c)
	addStats(&r.done, &st)
	r.mu.Unlock()
}

// forgetLocked drops a connection from the receiver's tables (under r.mu).
func (r *Receiver) forgetLocked(c *Conn) {
	delete(r.conns, c.id)
	if r.perPid[c.peer.Pid]--; r.perPid[c.peer.Pid] <= 0 {
		delete(r.perPid, c.peer.Pid)
	}
}

func (r *Receiver) readLoop(c *Conn, h Handler) error {
	buf := make([]byte, readBufSize)
	var b Batch
	n := 0
	for {
		m, rerr := c.nc.Read(buf[n:])
		n += m
		used, derr := c.dec.Decode(buf[:n], &b)
		if c.tids != nil && (len(b.APIs) > 0 || len(b.GraphNodes) > 0) {
			if u := c.tids.translate(&b); u > 0 {
				c.unmapped.Add(u)
			}
		}
		if b.Len() > 0 || b.Stats != nil {
			h.Records(c, &b)
			if b.FlushAck {
				select {
				case c.acks <- struct{}{}:
				default:
				}
			}
			b.Reset()
		}
		n = copy(buf, buf[used:n])
		if derr != nil {
			return fmt.Errorf("decoding connection %d: %w", c.id, derr)
		}
		if rerr != nil {
			c.dec.Finish(n)
			if errors.Is(rerr, io.EOF) || errors.Is(rerr, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("reading connection %d: %w", c.id, rerr)
		}
	}
}

// Flush asks every open connection to flush (see Conn.Flush) without waiting, and returns how
// many were asked.
func (r *Receiver) Flush() int {
	n := 0
	for _, c := range r.openConns() {
		if c.Flush() == nil {
			n++
		}
	}
	return n
}

// FlushWait asks every open connection to flush and waits until each has acknowledged (its
// STATS with FlagFlushAck has been handed to the Handler) or closed, or ctx ends. A connection
// that cannot take the request, because its process has exited, is waited for until it has been
// read to its end: its last records are still in the socket, and Close would lose them.
func (r *Receiver) FlushWait(ctx context.Context) error {
	conns := r.openConns()
	acked := make([]bool, len(conns))
	for i, c := range conns {
		select { // forget an acknowledgement of an earlier flush
		case <-c.acks:
		default:
		}
		acked[i] = c.Flush() == nil
	}
	for i, c := range conns {
		var acks chan struct{} // nil: wait for the end of the connection only
		if acked[i] {
			acks = c.acks
		}
		select {
		case <-acks:
		case <-c.closed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for connection %d to flush: %w", c.id, ctx.Err())
		}
	}
	return nil
}

func (r *Receiver) openConns() []*Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Conn, 0, len(r.conns))
	for _, c := range r.conns {
		if c.ready {
			out = append(out, c)
		}
	}
	return out
}

// Stats returns per-connection counters and totals.
func (r *Receiver) Stats() ReceiverStats {
	conns := r.openConns()
	r.mu.Lock()
	s := ReceiverStats{Accepted: r.accepted, Rejected: r.rejected, Pending: r.pending, PeakOpen: r.peak, Total: r.done}
	r.mu.Unlock()
	for _, c := range conns {
		st := c.Stats()
		s.Open = append(s.Open, st)
		addStats(&s.Total, &st)
	}
	return s
}

func addStats(t, s *ConnStats) {
	for i := range t.Records {
		t.Records[i] += s.Records[i]
	}
	t.Bytes += s.Bytes
	t.Errors.Add(s.Errors)
	t.NamesDropped += s.NamesDropped
	t.TidsUnmapped += s.TidsUnmapped
	l, o := &t.Lib, &s.Lib
	l.RecordsDelivered += o.RecordsDelivered
	l.DroppedCUPTI += o.DroppedCUPTI
	l.DroppedNoAgent += o.DroppedNoAgent
	l.DroppedBackpressure += o.DroppedBackpressure
	l.DroppedDisconnect += o.DroppedDisconnect
	l.DroppedGraphNodes += o.DroppedGraphNodes
	l.BuffersCompleted += o.BuffersCompleted
	l.BuffersRefused += o.BuffersRefused
	l.BytesSent += o.BytesSent
	l.RecordsUnknown += o.RecordsUnknown
	l.Connects += o.Connects
	l.NamesDropped += o.NamesDropped
}

// Close stops accepting, closes every connection and waits for their handlers to finish.
func (r *Receiver) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.stop()
	conns := make([]*Conn, 0, len(r.conns))
	for _, c := range r.conns {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	err := r.ln.Close()
	for _, c := range conns {
		c.nc.Close()
	}
	r.wg.Wait()
	if err != nil {
		return fmt.Errorf("closing the listener on %s: %w", r.path, err)
	}
	if r.dir != "" {
		if err := os.RemoveAll(r.dir); err != nil {
			return fmt.Errorf("removing the session directory %s: %w", r.dir, err)
		}
	}
	return nil
}
