package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/specprof/specprof/agent/specmetrics"
)

// The target's output under --spec-metrics log. specprof reads the
// target's log lines, but the target must never depend on specprof for its
// output: a specprof that is killed must not leave it writing into a pipe
// nobody reads (it would die of EPIPE), and one that is stopped or slow
// must not block it. So the pipes' read ends are held by a helper process,
// specprof itself started with teeArg, which copies the target's output to
// specprof's stdout and stderr (blocking there, as the target would writing
// to them itself) and forwards a copy of its lines to specprof through a
// bounded queue: when specprof does not keep up, lines are dropped from
// the copy and counted, and the target's output goes on.

// teeArg marks the hidden output helper. It gets the read ends of the
// target's stdout and stderr pipes on fds 3 and 4, a stream socket to
// specprof on fd 5, and on fd 6 the write end of a pipe that it closes
// when both of the target's pipes have ended.
const teeArg = "__specprof_tee"

// teeQueueBytes bounds what the helper holds for a specprof that does not
// read: beyond it, lines are dropped from the copy.
const teeQueueBytes = 4 << 20

// teeWaitDelay is how long specprof, once the target has exited, waits for
// its output to end: processes it left behind may hold the pipes for as
// long as they live.
const teeWaitDelay = 2 * time.Second

// teeDrainLimit bounds the wait, once the output has ended, for what the
// helper still holds for specprof (at most teeQueueBytes): it is read in
// full unless the helper is itself stopped.
const teeDrainLimit = 30 * time.Second

// Frames on the forward socket: a tag byte, the payload's length (uint32,
// little endian), the payload. A line frame carries whole lines of one
// stream (the last line of a stream may lack its terminator); a drops
// frame carries the lines and bytes dropped so far (two uint64).
const (
	teeFrameStdout = 1
	teeFrameStderr = 2
	teeFrameDrops  = 3
	teeFrameHeader = 5
	// teeMaxPayload bounds a frame: lines longer than the log parser's
	// limit are not forwarded (it would drop them anyway).
	teeMaxPayload = specmetrics.MaxLineLen
)

// runTee is the output helper's main. It returns when both pipes have
// reached EOF (the target and every process that inherited its output
// closed them) and the copy queued for specprof is delivered, or cannot be.
func runTee() int {
	// Signals for the whole process group (the terminal's Ctrl-C, a hangup,
	// a service manager's SIGTERM) are for the target: it decides when its
	// output ends, and its last lines must still get through. SIGPIPE is
	// ignored so that writes to a closed stdout or socket fail with EPIPE
	// instead of killing the helper.
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGPIPE)
	q := newTeeQueue(teeQueueBytes)
	sock := os.NewFile(5, "specprof")
	fwd := make(chan struct{})
	go func() {
		defer close(fwd)
		q.forward(sock)
	}()
	var wg sync.WaitGroup
	for _, s := range []struct {
		in  *os.File
		out *os.File
		tag byte
	}{{os.NewFile(3, "target stdout"), os.Stdout, teeFrameStdout}, {os.NewFile(4, "target stderr"), os.Stderr, teeFrameStderr}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			teeCopy(s.in, s.out, &lineFramer{tag: s.tag, emit: q.push})
		}()
	}
	wg.Wait()
	// Tell specprof that the output has ended: what is queued for it is
	// all there will be, worth waiting for.
	unix.Close(6)
	q.close()
	<-fwd
	return 0
}

// teeCopy copies in to out, passing what it copies to f, until in ends. A
// write to out that fails (a closed pipe, a full disk) ends the copy and
// closes in, so the target's next write fails as if it had written to out
// itself.
func teeCopy(in, out *os.File, f *lineFramer) {
	defer in.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			_, werr := out.Write(buf[:n])
			f.feed(buf[:n])
			if werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	f.end()
}

// lineFramer cuts a stream into frames of whole lines, so that the log
// parser never sees a line spliced from two around a drop. '\n' and '\r'
// end lines, as for specmetrics.LineScanner.
type lineFramer struct {
	tag      byte
	emit     func(tag byte, lines []byte)
	partial  []byte // the line begun and not yet ended
	overlong bool   // skipping the rest of a line longer than teeMaxPayload
	batch    []byte // whole lines of the current read
}

// feed takes the next bytes of the stream and emits the lines they end.
func (f *lineFramer) feed(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			f.addPartial(p)
			break
		}
		f.addPartial(p[:i+1])
		if !f.overlong {
			if len(f.batch)+len(f.partial) > teeMaxPayload {
				f.flush()
			}
			f.batch = append(f.batch, f.partial...)
		}
		f.partial, f.overlong = f.partial[:0], false
		p = p[i+1:]
	}
	f.flush()
}

func (f *lineFramer) addPartial(p []byte) {
	if f.overlong {
		return
	}
	if len(f.partial)+len(p) > teeMaxPayload {
		f.partial, f.overlong = f.partial[:0], true
		return
	}
	f.partial = append(f.partial, p...)
}

func (f *lineFramer) flush() {
	if len(f.batch) > 0 {
		f.emit(f.tag, f.batch)
		f.batch = f.batch[:0]
	}
}

// end emits a last line that lacks its terminator.
func (f *lineFramer) end() {
	if len(f.partial) > 0 && !f.overlong {
		f.emit(f.tag, f.partial)
	}
	f.partial = nil
}

// countLines counts the lines of a frame the way specmetrics.LineScanner
// splits them: a terminator each, and a last line without one.
func countLines(p []byte) uint64 {
	n := uint64(bytes.Count(p, []byte{'\n'}) + bytes.Count(p, []byte{'\r'}))
	if len(p) > 0 && p[len(p)-1] != '\n' && p[len(p)-1] != '\r' {
		n++
	}
	return n
}

// teeQueue holds the frames for specprof, up to a number of bytes; a push
// beyond it, or after specprof has gone, is dropped and counted. push
// never blocks on specprof.
type teeQueue struct {
	mu      sync.Mutex
	cond    *sync.Cond
	frames  [][]byte
	size    int
	limit   int
	closed  bool // no more pushes: forward sends what is left and returns
	gone    bool // the socket failed: specprof is dead or closed its end
	lines   uint64
	dropped uint64 // bytes
	sent    uint64 // the lines count last sent in a drops frame
}

func newTeeQueue(limit int) *teeQueue {
	q := &teeQueue{limit: limit}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *teeQueue) push(tag byte, lines []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.gone || q.size+len(lines) > q.limit {
		q.lines += countLines(lines)
		q.dropped += uint64(len(lines))
		return
	}
	q.frames = append(q.frames, frame(tag, lines))
	q.size += len(lines)
	q.cond.Signal()
}

func (q *teeQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.cond.Signal()
	q.mu.Unlock()
}

// forward writes the queued frames to w, each preceded by a drops frame
// when more lines were dropped since the last one, until the queue is
// closed and empty or a write fails. Its writes block: a stopped specprof
// holds up forward, never push.
func (q *teeQueue) forward(w io.Writer) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		for len(q.frames) == 0 && !q.closed {
			q.cond.Wait()
		}
		var out [][]byte
		if q.lines != q.sent {
			var p [16]byte
			binary.LittleEndian.PutUint64(p[:], q.lines)
			binary.LittleEndian.PutUint64(p[8:], q.dropped)
			out = append(out, frame(teeFrameDrops, p[:]))
			q.sent = q.lines
		}
		out = append(out, q.frames...)
		for _, f := range q.frames {
			q.size -= len(f) - teeFrameHeader
		}
		q.frames = nil
		done := q.closed
		if len(out) == 0 && done {
			return
		}
		q.mu.Unlock()
		var err error
		i := 0
		for ; i < len(out); i++ {
			if _, err = w.Write(out[i]); err != nil {
				break
			}
		}
		q.mu.Lock()
		if err != nil {
			// The frames not written, and all pushed from now on, are
			// dropped.
			q.gone = true
			for _, f := range append(out[i:], q.frames...) {
				if f[0] != teeFrameDrops {
					q.lines += countLines(f[teeFrameHeader:])
					q.dropped += uint64(len(f) - teeFrameHeader)
				}
			}
			q.frames, q.size = nil, 0
			return
		}
		if done && len(q.frames) == 0 && q.lines == q.sent {
			return
		}
	}
}

func frame(tag byte, payload []byte) []byte {
	f := make([]byte, teeFrameHeader, teeFrameHeader+len(payload))
	f[0] = tag
	binary.LittleEndian.PutUint32(f[1:], uint32(len(payload)))
	return append(f, payload...)
}

// tee is specprof's side of the output helper.
type tee struct {
	stdout, stderr *os.File // the pipes' write ends, for the target
	helper         *exec.Cmd
	sock           *os.File
	done           chan struct{} // read has returned
	err            error         // why read returned, if not at EOF
	ended          chan struct{} // the helper saw both pipes end
	endedR         *os.File

	mu           sync.Mutex
	lines, bytes uint64 // dropped, as the helper last reported
}

// startTee starts the output helper, which passes the target's output to
// specprof's own stdout and stderr and its lines to out and errw (the
// target gets t.stdout and t.stderr).
func startTee(self string, out, errw io.Writer) (t *tee, err error) {
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("create the target's stdout pipe: %w", err)
	}
	closers = append(closers, outR)
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return nil, fmt.Errorf("create the target's stderr pipe: %w", err)
	}
	closers = append(closers, errR)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		outW.Close()
		errW.Close()
		return nil, fmt.Errorf("create the output helper's socket: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "output helper")
	closers = append(closers, theirs)
	// Non-blocking, so that Go's poller reads it and a deadline can end
	// the read once the target is gone.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		outW.Close()
		errW.Close()
		return nil, fmt.Errorf("set up the output helper's socket: %w", err)
	}
	t = &tee{stdout: outW, stderr: errW, sock: os.NewFile(uintptr(fds[0]), "output helper"), done: make(chan struct{}),
		ended: make(chan struct{})}
	var endedW *os.File
	if t.endedR, endedW, err = os.Pipe(); err != nil {
		t.sock.Close()
		outW.Close()
		errW.Close()
		return nil, fmt.Errorf("create the output helper's pipe: %w", err)
	}
	closers = append(closers, endedW)
	t.helper = exec.Command(self, teeArg)
	t.helper.Stdout, t.helper.Stderr = os.Stdout, os.Stderr
	t.helper.ExtraFiles = []*os.File{outR, errR, theirs, endedW}
	if err := t.helper.Start(); err != nil {
		t.sock.Close()
		t.endedR.Close()
		outW.Close()
		errW.Close()
		return nil, fmt.Errorf("start the output helper: %w", err)
	}
	go func() { _ = t.helper.Wait() }()
	go func() {
		_, _ = io.Copy(io.Discard, t.endedR)
		close(t.ended)
	}()
	go t.read(out, errw)
	return t, nil
}

// started closes specprof's copies of the pipes' write ends once the target
// has its own (or failed to start), so that the helper sees EOF when the
// target's side closes them.
func (t *tee) started() {
	t.stdout.Close()
	t.stderr.Close()
}

// read passes the helper's frames on until the helper closes the socket.
func (t *tee) read(out, errw io.Writer) {
	defer close(t.done)
	r := bufio.NewReaderSize(t.sock, 256<<10)
	var hdr [teeFrameHeader]byte
	payload := make([]byte, teeMaxPayload)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if !errors.Is(err, io.EOF) {
				t.err = fmt.Errorf("read the target's output from the output helper: %w", err)
			}
			return
		}
		n := binary.LittleEndian.Uint32(hdr[1:])
		if n > teeMaxPayload {
			t.err = fmt.Errorf("read the target's output from the output helper: frame of %d bytes", n)
			return
		}
		p := payload[:n]
		if _, err := io.ReadFull(r, p); err != nil {
			t.err = fmt.Errorf("read the target's output from the output helper: %w", err)
			return
		}
		switch hdr[0] {
		case teeFrameStdout:
			_, _ = out.Write(p)
		case teeFrameStderr:
			_, _ = errw.Write(p)
		case teeFrameDrops:
			if n == 16 {
				t.mu.Lock()
				t.lines, t.bytes = binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:])
				t.mu.Unlock()
			}
		}
	}
}

// finish waits, once the target has exited, up to teeWaitDelay for its
// output to end, and then for the helper to deliver what it holds; then it
// stops reading. The helper lives on while processes the target left
// behind hold the pipes, passing their output to the terminal. It returns
// the lines and bytes the helper dropped.
func (t *tee) finish() (lines, bytes uint64, err error) {
	cut := false
	limit := time.After(teeWaitDelay)
	select {
	case <-t.ended:
		limit = time.After(teeDrainLimit)
	case <-t.done:
	case <-limit:
		cut = true
	}
	if !cut {
		select {
		case <-t.done:
		case <-limit:
			cut = true
		}
	}
	if cut {
		_ = t.sock.SetReadDeadline(time.Now())
		<-t.done
		t.err = nil // cut short on purpose
	}
	t.endedR.Close()
	t.sock.Close()
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lines, t.bytes, t.err
}
