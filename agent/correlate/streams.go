package correlate

import (
	"cmp"
	"slices"
)

// StreamOrder follows each stream's timeline across batches of GPU records
// and tells every record where the work before it on its stream ended
// (GPURecord.PrevEnd). Work on one stream runs in order, and CUPTI hands
// records over as they complete, so a stream's records arrive in start
// order across batches; within a batch the kinds come in separate lists,
// which Annotate merges. A record older than the newest one already seen on
// its stream gets no PrevEnd (it is counted in Inversions), so its hand-over
// gap is left out rather than guessed. The zero value is ready to use.
type StreamOrder struct {
	last map[streamKey]streamPos
	// Inversions counts records that arrived after a later record of their
	// stream.
	Inversions uint64
}

type streamKey struct {
	pid            int
	device, stream uint32
}

type streamPos struct{ start, end uint64 }

// Annotate sets PrevEnd on recs (one batch, any order) and sorts recs by
// (PID, Device, Stream, Start).
func (o *StreamOrder) Annotate(recs []GPURecord) {
	if len(recs) == 0 {
		return
	}
	if o.last == nil {
		o.last = map[streamKey]streamPos{}
	}
	byStream := func(a, b GPURecord) int {
		return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.Device, b.Device),
			cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.Start, b.Start))
	}
	if !slices.IsSortedFunc(recs, byStream) {
		slices.SortFunc(recs, byStream)
	}
	var k streamKey
	var pos streamPos
	have := false
	for i := range recs {
		r := &recs[i]
		if nk := (streamKey{r.PID, r.Device, r.Stream}); !have || nk != k {
			if have {
				o.last[k] = pos
			}
			k, have = nk, true
			pos = o.last[k]
		}
		r.PrevEnd = 0
		if r.Start < pos.start {
			o.Inversions++
			continue
		}
		r.PrevEnd = pos.end
		// The latest end so far, not the previous record's: work that
		// overlaps on one stream id (graph branches) ends in any order.
		pos = streamPos{start: r.Start, end: max(pos.end, r.End)}
	}
	o.last[k] = pos
}

// Forget drops what is known of pid's streams (the process exited).
func (o *StreamOrder) Forget(pid int) {
	for k := range o.last {
		if k.pid == pid {
			delete(o.last, k)
		}
	}
}
