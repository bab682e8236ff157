package specmetrics

import (
	"bytes"
	"sync"
	"time"
)

// MaxLineLen bounds the line a [LineScanner] buffers. Metric lines are
// well under 1 KiB; a longer line (a dumped tensor, a JSON blob) is
// dropped rather than buffered without bound.
const MaxLineLen = 64 << 10

// LineScanner is an io.Writer that splits what is written into lines and
// adds the samples [ParseLogLine] finds in them to a Tracker. It is fed a
// copy of the target's output: the caller passes the output itself on to
// the terminal, so that it is never held back waiting for a newline, nor
// for the scanner.
//
// '\n' and '\r' both end a line (CRLF, and progress bars that redraw with
// '\r'). A sample whose line has no time gets the time its line ended.
// It is safe for concurrent use, but use one LineScanner per stream:
// stdout and stderr written into one would splice partial lines.
type LineScanner struct {
	mu       sync.Mutex
	t        *Tracker
	buf      []byte
	overlong bool             // dropping the rest of a line past MaxLineLen
	now      func() time.Time // replaced in tests
}

// NewLineScanner returns a LineScanner feeding t.
func NewLineScanner(t *Tracker) *LineScanner {
	return &LineScanner{t: t, now: time.Now}
}

// Write scans p. It never fails and always consumes all of p, so it
// cannot break the tee it sits in.
func (ls *LineScanner) Write(p []byte) (int, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			ls.appendPart(p)
			break
		}
		ls.appendPart(p[:i])
		ls.endLine()
		p = p[i+1:]
	}
	return n, nil
}

// Flush parses a final line that had no line terminator; call it when
// the stream ends.
func (ls *LineScanner) Flush() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.endLine()
}

func (ls *LineScanner) appendPart(p []byte) {
	if ls.overlong {
		return
	}
	if len(ls.buf)+len(p) > MaxLineLen {
		ls.overlong = true
		ls.buf = ls.buf[:0]
		return
	}
	ls.buf = append(ls.buf, p...)
}

func (ls *LineScanner) endLine() {
	line, overlong := ls.buf, ls.overlong
	ls.buf, ls.overlong = ls.buf[:0], false
	if overlong || !candidate(line) {
		return
	}
	s, ok := ParseLogLine(string(line))
	if !ok {
		return
	}
	if s.At.IsZero() {
		s.At = ls.now()
	}
	ls.t.Add(s)
}

// candidate is ParseLogLine's cheap reject, run before the line is copied
// into a string.
func candidate(line []byte) bool {
	return bytes.Contains(line, []byte(sglMarker)) ||
		bytes.Contains(line, []byte(vllmTokMarker)) ||
		bytes.Contains(line, []byte(vllmAcceptMarker))
}
