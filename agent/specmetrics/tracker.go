package specmetrics

import (
	"math"
	"sort"
	"sync"
	"time"
)

// Stats summarises the samples of one span (a window or the session),
// over all ranks or for one rank.
type Stats struct {
	// Rank is the TP rank, -1 for the all-ranks figures.
	Rank int
	// Samples is the number of samples in the span.
	Samples int
	// AcceptLen is the mean accept length over the span's samples that
	// carry one, NaN if none does.
	AcceptLen float64
	// TokPerSec is the mean throughput over the span's samples that carry
	// one, NaN if none does.
	TokPerSec float64
	// LastAcceptLen and LastTokPerSec are the latest values in the span,
	// NaN if none.
	LastAcceptLen, LastTokPerSec float64
	// LastAt is the At of the latest sample in the span, zero if none; a
	// table can tell a stale reading from a fresh one.
	LastAt time.Time
}

// Summary is what [Tracker.Window] and [Tracker.Total] report.
type Summary struct {
	// Stats is over all samples of the span, whatever their rank. Ranks of
	// one TP group report the same batch, so this is a mean, not a sum.
	Stats
	// HasAccept and HasTok say whether the session has ever seen an accept
	// length or a throughput, so a table can drop a column the server
	// never reports (rather than show it empty only in quiet windows).
	HasAccept, HasTok bool
	// Ranks holds one entry per known rank (≥ 0) seen in the span, by
	// rank; nil when no sample of the span had a rank.
	Ranks []Stats
}

// acc accumulates one span of one rank (or of all ranks).
type acc struct {
	n                  int
	accN, tokN         int
	accSum, tokSum     float64
	lastAcc, lastTok   float64
	hasLastA, hasLastT bool
	lastAt             time.Time
}

func (a *acc) add(s Sample) {
	a.n++
	a.lastAt = s.At
	if s.HasAccept() {
		a.accN++
		a.accSum += s.AcceptLen
		a.lastAcc, a.hasLastA = s.AcceptLen, true
	}
	if s.HasTok() {
		a.tokN++
		a.tokSum += s.TokPerSec
		a.lastTok, a.hasLastT = s.TokPerSec, true
	}
}

func (a *acc) stats(rank int) Stats {
	st := Stats{Rank: rank, Samples: a.n, AcceptLen: math.NaN(), TokPerSec: math.NaN(),
		LastAcceptLen: math.NaN(), LastTokPerSec: math.NaN(), LastAt: a.lastAt}
	if a.accN > 0 {
		st.AcceptLen = a.accSum / float64(a.accN)
	}
	if a.tokN > 0 {
		st.TokPerSec = a.tokSum / float64(a.tokN)
	}
	if a.hasLastA {
		st.LastAcceptLen = a.lastAcc
	}
	if a.hasLastT {
		st.LastTokPerSec = a.lastTok
	}
	return st
}

// span is the all-ranks accumulator plus one per known rank.
type span struct {
	all   acc
	ranks map[int]*acc
}

func (sp *span) add(s Sample) {
	sp.all.add(s)
	if s.Rank < 0 {
		return
	}
	if sp.ranks == nil {
		sp.ranks = make(map[int]*acc)
	}
	a := sp.ranks[s.Rank]
	if a == nil {
		a = &acc{}
		sp.ranks[s.Rank] = a
	}
	a.add(s)
}

func (sp *span) summary() Summary {
	sum := Summary{Stats: sp.all.stats(-1)}
	if len(sp.ranks) > 0 {
		sum.Ranks = make([]Stats, 0, len(sp.ranks))
		for r, a := range sp.ranks {
			sum.Ranks = append(sum.Ranks, a.stats(r))
		}
		sort.Slice(sum.Ranks, func(i, j int) bool { return sum.Ranks[i].Rank < sum.Ranks[j].Rank })
	}
	return sum
}

// Tracker aggregates samples into per-window and per-session means. The
// zero value is ready to use; it is safe for concurrent use, so a log
// scanner and a scraper may feed one Tracker.
type Tracker struct {
	mu                sync.Mutex
	window, total     span
	hasAccept, hasTok bool
}

// Add records s.
func (t *Tracker) Add(s Sample) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.window.add(s)
	t.total.add(s)
	t.hasAccept = t.hasAccept || s.HasAccept()
	t.hasTok = t.hasTok || s.HasTok()
}

// Window summarises the samples added since the previous Window call (or
// since the start) and starts a new window.
func (t *Tracker) Window() Summary {
	t.mu.Lock()
	defer t.mu.Unlock()
	sum := t.window.summary()
	t.window = span{}
	sum.HasAccept, sum.HasTok = t.hasAccept, t.hasTok
	return sum
}

// Total summarises every sample added in the session.
func (t *Tracker) Total() Summary {
	t.mu.Lock()
	defer t.mu.Unlock()
	sum := t.total.summary()
	sum.HasAccept, sum.HasTok = t.hasAccept, t.hasTok
	return sum
}
