package specmetrics

import (
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	sglLine0 = "[2026-03-01 12:34:56 TP0] Decode batch, #running-req: 1, #token: 1234, token usage: 0.01, accept len: 2.00, accept rate: 0.50, cuda graph: True, gen throughput (token/s): 60.00, #queue-req: 0, "
	sglLine1 = "[2026-03-01 12:34:57 TP1] Decode batch, #running-req: 1, #token: 1234, token usage: 0.01, accept len: 3.00, accept rate: 0.75, cuda graph: True, gen throughput (token/s): 80.00, #queue-req: 0, "
	vllmTok  = "INFO 03-01 12:34:56 [loggers.py:116] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 50.0 tokens/s, Running: 1 reqs"
)

func TestLineScannerPartialWritesAndCRLF(t *testing.T) {
	var tr Tracker
	ls := NewLineScanner(&tr)
	stream := "noise line\r\n" + sglLine0 + "\r\n" + "progress 10%\rprogress 20%\r" + sglLine1 + "\r" + sglLine1 + "\n\n" + vllmTok
	// Every split point, byte by byte, must give the same result.
	for i := 0; i < len(stream); i++ {
		n, err := ls.Write([]byte(stream[i : i+1]))
		if n != 1 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	// A lone '\r' ends a line too: the two TP1 lines are two samples.
	if got := tr.Total().Samples; got != 3 {
		t.Fatalf("before Flush: %d samples, want 3 (the last line has no terminator yet)", got)
	}
	ls.Flush()
	sum := tr.Total()
	if sum.Samples != 4 {
		t.Fatalf("after Flush: %d samples, want 4", sum.Samples)
	}
	if !sameFloat(sum.AcceptLen, (2.0+3+3)/3) || !sameFloat(sum.TokPerSec, (60.0+80+80+50)/4) {
		t.Errorf("means = %v, %v", sum.AcceptLen, sum.TokPerSec)
	}
	if len(sum.Ranks) != 2 || sum.Ranks[0].Rank != 0 || sum.Ranks[1].Rank != 1 {
		t.Errorf("ranks = %+v", sum.Ranks)
	}
	// Flush again must not re-add the line.
	ls.Flush()
	if got := tr.Total().Samples; got != 4 {
		t.Errorf("second Flush: %d samples", got)
	}
}

func TestLineScannerChunks(t *testing.T) {
	var tr Tracker
	ls := NewLineScanner(&tr)
	all := strings.Repeat(sglLine0+"\n", 5)
	for _, chunk := range []string{all[:7], all[7:300], all[300:301], all[301:]} {
		if _, err := io.WriteString(ls, chunk); err != nil {
			t.Fatal(err)
		}
	}
	if got := tr.Total().Samples; got != 5 {
		t.Fatalf("%d samples, want 5", got)
	}
}

func TestLineScannerStampsUntimedLines(t *testing.T) {
	var tr Tracker
	ls := NewLineScanner(&tr)
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	ls.now = func() time.Time { return at }
	io.WriteString(ls, vllmTok+"\n")
	if s := tr.Window(); s.Samples != 1 || !s.LastAt.Equal(at) || !sameFloat(s.LastTokPerSec, 50) {
		t.Fatalf("untimed vLLM line: %+v, want LastAt %v", s, at)
	}
	// A line with its own time keeps it.
	io.WriteString(ls, sglLine0+"\n")
	want := time.Date(2026, 3, 1, 12, 34, 56, 0, time.Local)
	if s := tr.Window(); !s.LastAt.Equal(want) {
		t.Fatalf("timed SGLang line: LastAt %v, want %v", s.LastAt, want)
	}
}

func TestLineScannerLongLines(t *testing.T) {
	var tr Tracker
	ls := NewLineScanner(&tr)
	long := strings.Repeat("x", MaxLineLen+10)
	// An overlong line, even one ending in a metric line's text, is dropped
	// whole; the next line is read normally.
	io.WriteString(ls, long[:MaxLineLen/2])
	io.WriteString(ls, long[MaxLineLen/2:])
	io.WriteString(ls, sglLine0+"\n")
	io.WriteString(ls, sglLine1+"\n")
	if got := tr.Total().Samples; got != 1 {
		t.Fatalf("%d samples, want 1", got)
	}
	if len(ls.buf) != 0 || cap(ls.buf) > MaxLineLen {
		t.Errorf("buffer len %d cap %d", len(ls.buf), cap(ls.buf))
	}
	// A line of exactly MaxLineLen bytes is still read.
	pad := strings.Repeat(" ", MaxLineLen-len(sglLine0))
	io.WriteString(ls, pad+sglLine0+"\r\n")
	if got := tr.Total().Samples; got != 2 {
		t.Fatalf("%d samples, want 2", got)
	}
}

func TestLineScannerConcurrent(t *testing.T) {
	var tr Tracker
	out, errw := NewLineScanner(&tr), NewLineScanner(&tr)
	var wg sync.WaitGroup
	for _, w := range []io.Writer{out, errw} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				io.WriteString(w, sglLine0[:50])
				io.WriteString(w, sglLine0[50:]+"\n")
			}
		}()
	}
	wg.Wait()
	if got := tr.Total().Samples; got != 200 {
		t.Fatalf("%d samples, want 200", got)
	}
}
