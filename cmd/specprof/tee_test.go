package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand"
	"strings"
	"testing"
)

// Lines cut anywhere by the pipe reach the log scanner whole, one stream's
// lines in order; a line over the parser's limit is left out.
func TestLineFramerWholeLines(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var in, want bytes.Buffer
	for i := 0; i < 2000; i++ {
		n := rng.Intn(300)
		switch i {
		case 100:
			n = teeMaxPayload + 10 // dropped
		case 200:
			n = teeMaxPayload - 1 // kept: with its terminator, just at the limit
		}
		line := strings.Repeat(string(rune('a'+i%26)), n)
		term := []string{"\n", "\r", "\r\n"}[rng.Intn(3)]
		if n == teeMaxPayload-1 {
			term = "\n"
		}
		in.WriteString(line + term)
		if n < teeMaxPayload {
			want.WriteString(line + term)
		} else if term == "\r\n" {
			want.WriteString("\n") // the empty line after the '\r'
		}
	}
	in.WriteString("last line, no terminator")
	want.WriteString("last line, no terminator")

	var got bytes.Buffer
	var frames int
	f := &lineFramer{tag: teeFrameStderr, emit: func(tag byte, p []byte) {
		if tag != teeFrameStderr {
			t.Fatalf("frame tagged %d", tag)
		}
		if len(p) > teeMaxPayload {
			t.Fatalf("frame of %d bytes, over %d", len(p), teeMaxPayload)
		}
		if got.Len()+len(p) < want.Len() && p[len(p)-1] != '\n' && p[len(p)-1] != '\r' {
			t.Fatalf("frame %d ends inside a line: %q", frames, p[max(0, len(p)-20):])
		}
		frames++
		got.Write(p)
	}}
	b := in.Bytes()
	for len(b) > 0 {
		n := min(len(b), 1+rng.Intn(5000))
		if rng.Intn(10) == 0 {
			n = min(len(b), 1+rng.Intn(200000))
		}
		f.feed(b[:n])
		b = b[n:]
	}
	f.end()
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("framed %d bytes in %d frames, want %d bytes", got.Len(), frames, want.Len())
	}
}

// gatedWriter blocks every Write until the test lets it through, like a
// stopped specprof.
type gatedWriter struct {
	gate chan struct{}
	buf  bytes.Buffer
	fail bool
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	<-w.gate
	if w.fail {
		return 0, errors.New("broken pipe")
	}
	return w.buf.Write(p)
}

// readFrames splits what forward wrote into lines per stream and the last
// drop counts it reported.
func readFrames(t *testing.T, b []byte) (lines map[byte]string, dropLines, dropBytes uint64) {
	t.Helper()
	lines = map[byte]string{}
	for len(b) > 0 {
		if len(b) < teeFrameHeader {
			t.Fatalf("truncated frame header")
		}
		n := int(binary.LittleEndian.Uint32(b[1:]))
		p := b[teeFrameHeader : teeFrameHeader+n]
		switch b[0] {
		case teeFrameDrops:
			dropLines, dropBytes = binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:])
		default:
			lines[b[0]] += string(p)
		}
		b = b[teeFrameHeader+n:]
	}
	return lines, dropLines, dropBytes
}

// While specprof does not read, push goes on, dropping what the queue has
// no room for; specprof then gets what was queued and the count of the
// rest, which together make up every line.
func TestTeeQueueDropsWhenStalled(t *testing.T) {
	q := newTeeQueue(1000)
	w := &gatedWriter{gate: make(chan struct{})}
	done := make(chan struct{})
	go func() { q.forward(w); close(done) }()
	const pushed = 100
	line := []byte(strings.Repeat("x", 99) + "\n")
	for i := 0; i < pushed; i++ {
		q.push(teeFrameStdout, line) // never blocks, or the test hangs here
	}
	q.push(teeFrameStderr, []byte("no terminator"))
	q.close()
	close(w.gate)
	<-done
	lines, dl, db := readFrames(t, w.buf.Bytes())
	got := countLines([]byte(lines[teeFrameStdout])) + countLines([]byte(lines[teeFrameStderr]))
	if dl == 0 || got+dl != pushed+1 {
		t.Fatalf("%d lines delivered, %d dropped, want some dropped and %d in all", got, dl, pushed+1)
	}
	if uint64(len(lines[teeFrameStdout])+len(lines[teeFrameStderr]))+db != pushed*100+13 {
		t.Fatalf("%d bytes delivered, %d dropped, want %d in all", len(lines[teeFrameStdout])+len(lines[teeFrameStderr]), db, pushed*100+13)
	}
}

// A specprof that is gone stops the forward; the pushes after it are only
// counted.
func TestTeeQueueSpecprofGone(t *testing.T) {
	q := newTeeQueue(1 << 20)
	w := &gatedWriter{gate: make(chan struct{}), fail: true}
	close(w.gate)
	done := make(chan struct{})
	go func() { q.forward(w); close(done) }()
	q.push(teeFrameStdout, []byte("a\n"))
	<-done
	for i := 0; i < 10; i++ {
		q.push(teeFrameStdout, []byte("b\nc\n"))
	}
	q.close()
	if q.lines != 21 || q.dropped != 42 || len(q.frames) != 0 {
		t.Fatalf("%d lines (%d bytes) dropped, %d frames held; want 21 (42), none held", q.lines, q.dropped, len(q.frames))
	}
}
