package cupti

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultSocket is where the injected library connects unless SPECPROF_SOCKET says otherwise.
const DefaultSocket = "/run/specprof/cupti.sock"

// readBufSize bounds one read (and so one Batch): it holds several maximal records.
const readBufSize = 256 << 10

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

// ConnInfo identifies a connection: the receiver's id for it and the library's HELLO.
type ConnInfo struct {
	ID uint64
	Hello
}

// ConnStats is one connection's counters.
type ConnStats struct {
	ID  uint64
	Pid uint32
	DecoderStats
}

// ReceiverStats holds the counters of every open connection and totals over all connections
// the receiver has had (closed ones included).
type ReceiverStats struct {
	Accepted uint64
	Open     []ConnStats
	// Total sums Records, Bytes, Errors and NamesDropped over every connection; its Lib sums
	// each connection's latest library counters.
	Total ConnStats
}

// Conn is one library connection (one process).
type Conn struct {
	id     uint64
	nc     *net.UnixConn
	dec    *Decoder
	acks   chan struct{} // one token per flush acknowledgement
	closed chan struct{}
}

// ID is the receiver's number for the connection (from 1, in accept order).
func (c *Conn) ID() uint64 { return c.id }

// Info returns the connection's id and HELLO (zero until the HELLO was decoded).
func (c *Conn) Info() ConnInfo {
	h, _ := c.dec.Hello()
	return ConnInfo{ID: c.id, Hello: h}
}

// Name resolves a Kernel.NameID of this connection ("" when unknown).
func (c *Conn) Name(id uint32) string { return c.dec.Name(id) }

// Stats returns the connection's counters.
func (c *Conn) Stats() ConnStats {
	h, _ := c.dec.Hello()
	return ConnStats{ID: c.id, Pid: h.Pid, DecoderStats: c.dec.Stats()}
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

	mu       sync.Mutex
	conns    map[uint64]*Conn
	done     ConnStats // totals of closed connections
	accepted uint64
	closed   bool
	wg       sync.WaitGroup
	nextID   atomic.Uint64
}

// Listen creates the socket at path (DefaultSocket when empty), creating its directory (0755)
// when needed and replacing a stale socket left by a dead agent. It refuses to replace a
// socket another receiver still listens on, or a file that is not a socket. Any local process
// may connect (the socket is 0666): targets often run as other users, and decoding trusts
// nothing it reads.
func Listen(path string) (*Receiver, error) {
	if path == "" {
		path = DefaultSocket
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating the socket directory for %s: %w", path, err)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("listening on %s: a file that is not a socket is in the way", path)
		}
		if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
			c.Close()
			return nil, fmt.Errorf("listening on %s: another receiver is listening there", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing the stale socket %s: %w", path, err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("making %s connectable by every user: %w", path, err)
	}
	return &Receiver{ln: ln, path: path, conns: make(map[uint64]*Conn)}, nil
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
		c := &Conn{id: r.nextID.Add(1), nc: nc, dec: NewDecoder(), acks: make(chan struct{}, 1),
			closed: make(chan struct{})}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			nc.Close()
			continue
		}
		r.conns[c.id] = c
		r.accepted++
		r.wg.Add(1)
		r.mu.Unlock()
		go r.serveConn(c, h)
	}
}

func (r *Receiver) serveConn(c *Conn, h Handler) {
	defer r.wg.Done()
	err := r.readLoop(c, h)
	c.nc.Close()
	close(c.closed)
	h.Close(c, err)
	st := c.Stats()
	r.mu.Lock()
	delete(r.conns, c.id)
	addStats(&r.done, &st)
	r.mu.Unlock()
}

func (r *Receiver) readLoop(c *Conn, h Handler) error {
	buf := make([]byte, readBufSize)
	var b Batch
	n, opened := 0, false
	for {
		m, rerr := c.nc.Read(buf[n:])
		n += m
		used, derr := c.dec.Decode(buf[:n], &b)
		if !opened {
			if _, ok := c.dec.Hello(); ok {
				opened = true
				h.Open(c)
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
		out = append(out, c)
	}
	return out
}

// Stats returns per-connection counters and totals.
func (r *Receiver) Stats() ReceiverStats {
	conns := r.openConns()
	r.mu.Lock()
	s := ReceiverStats{Accepted: r.accepted, Total: r.done}
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
	t.Errors.add(s.Errors)
	t.NamesDropped += s.NamesDropped
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
	return nil
}
