package perfetto

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// Synthetic ids. Linux pids and tids stay below 1<<22 (PID_MAX_LIMIT), so
// ids from there on never name a real process or thread.
const (
	idSpace    = 1 << 22
	maxLanes   = 255            // extra tracks per track for overlapping slices
	gpuPidBase = idSpace        // GPU processes: gpuPidBase + index
	gpuSortKey = 1 << 30        // process_sort_index of GPU processes: after the CPU ones
	laneSortK  = maxLanes*2 + 2 // thread_sort_index stride per thread
)

// trackKey identifies a track before lanes: a CPU thread (sub-track) or a
// GPU stream of a process's device.
type trackKey struct {
	pid, tid       int
	gpu            bool
	device, stream uint32
	sub            uint8
}

func (s *slice) track() trackKey {
	if s.gpu {
		return trackKey{pid: int(s.pid), gpu: true, device: s.device, stream: s.stream}
	}
	return trackKey{pid: int(s.pid), tid: int(s.tid), sub: s.sub}
}

func compareTracks(a, b trackKey) int {
	return cmp.Or(cmp.Compare(a.pid, b.pid), cmpBool(a.gpu, b.gpu), cmp.Compare(a.device, b.device),
		cmp.Compare(a.stream, b.stream), cmp.Compare(a.tid, b.tid), cmp.Compare(a.sub, b.sub))
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// compareSlices orders slices for nesting: by start, longest first, parent
// level first, then arrival.
func (t *Trace) compareSlices(i, j int) int {
	a, b := &t.slices[i], &t.slices[j]
	return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(b.end, a.end), cmp.Compare(a.level, b.level), cmp.Compare(i, j))
}

// assignLanes places every slice of a track on the first lane where it
// nests properly: inside the innermost open slice, or after it. Lanes
// beyond maxLanes are not placed (lane -1) and counted.
func (t *Trace) assignLanes(idx []int) (unplaced int) {
	slices.SortFunc(idx, t.compareSlices)
	var open [][]uint64 // per lane: ends of the open slices, innermost last
	for _, i := range idx {
		s := &t.slices[i]
		s.lane = -1
		for l := 0; l <= maxLanes; l++ {
			if l == len(open) {
				open = append(open, nil)
			}
			st := open[l]
			for len(st) > 0 && st[len(st)-1] <= s.start && !(st[len(st)-1] == s.start && s.end == s.start) {
				st = st[:len(st)-1]
			}
			if len(st) == 0 || s.end <= st[len(st)-1] {
				open[l] = append(st, s.end)
				s.lane = int16(l)
				break
			}
			open[l] = st
		}
		if s.lane < 0 {
			unplaced++
		}
	}
	return unplaced
}

// outTrack is where a placed slice is written.
type outTrack struct{ pid, tid int }

// layout is the result of placing the slices: output pid/tid per slice,
// with the names and sort order of every track.
type layout struct {
	where    []outTrack // per slice
	procs    map[int]string
	plabels  map[int]string // process_labels (the TP rank)
	psort    map[int]int
	threads  map[outTrack]string
	tsort    map[outTrack]int
	unplaced int
}

func (t *Trace) layout() *layout {
	lo := &layout{where: make([]outTrack, len(t.slices)), procs: map[int]string{}, plabels: map[int]string{}, psort: map[int]int{},
		threads: map[outTrack]string{}, tsort: map[outTrack]int{}}
	groups := map[trackKey][]int{}
	for i := range t.slices {
		k := t.slices[i].track()
		groups[k] = append(groups[k], i)
	}
	keys := make([]trackKey, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareTracks)

	// GPU processes: one per (traced process, device), in order; a device
	// used by several traced processes names the process in its track.
	gpuPid := map[gpuKey]int{}
	devUsers := map[uint32]map[int]bool{}
	for _, k := range keys {
		if !k.gpu {
			continue
		}
		g := gpuKey{k.pid, k.device}
		if _, ok := gpuPid[g]; !ok {
			gpuPid[g] = gpuPidBase + len(gpuPid)
		}
		if devUsers[k.device] == nil {
			devUsers[k.device] = map[int]bool{}
		}
		devUsers[k.device][k.pid] = true
	}
	gpuTids := map[int]int{} // synthetic pid → tracks so far
	for _, k := range keys {
		idx := groups[k]
		lo.unplaced += t.assignLanes(idx)
		lanes := 0
		for _, i := range idx {
			lanes = max(lanes, int(t.slices[i].lane)+1)
		}
		if !k.gpu {
			pi := t.procs[k.pid]
			if _, ok := lo.procs[k.pid]; !ok && pi != nil {
				lo.procs[k.pid] = pi.name(k.pid)
				lo.psort[k.pid] = k.pid
				if pi.rank >= 0 {
					lo.plabels[k.pid] = fmt.Sprintf("rank %d", pi.rank)
				}
			} else if !ok {
				lo.procs[k.pid] = fmt.Sprintf("pid %d", k.pid)
				lo.psort[k.pid] = k.pid
			}
		}
		tracks := make([]outTrack, lanes)
		for l := range lanes {
			var ot outTrack
			var name string
			if k.gpu {
				g := gpuKey{k.pid, k.device}
				ot.pid = gpuPid[g]
				gpuTids[ot.pid]++
				ot.tid = gpuTids[ot.pid]
				if _, ok := lo.procs[ot.pid]; !ok {
					pn := fmt.Sprintf("GPU %d", k.device)
					if len(devUsers[k.device]) > 1 {
						pn += fmt.Sprintf(" · pid %d", k.pid)
					}
					lo.procs[ot.pid] = pn
					lo.psort[ot.pid] = gpuSortKey + ot.pid
				}
				name = fmt.Sprintf("GPU %d / stream %d", k.device, k.stream)
				lo.tsort[ot] = ot.tid
			} else {
				ot.pid = k.pid
				ot.tid = k.tid + (l*2+int(k.sub))*idSpace
				name = fmt.Sprintf("tid %d", k.tid)
				if k.tid == k.pid {
					name += " (main)"
				}
				if k.sub == subColl {
					name += " · NCCL calls"
				}
				lo.tsort[ot] = k.tid*laneSortK + l*2 + int(k.sub)
			}
			if l > 0 {
				name += fmt.Sprintf(" · overlap %d", l)
			}
			lo.threads[ot] = name
			tracks[l] = ot
		}
		for _, i := range idx {
			if l := t.slices[i].lane; l >= 0 {
				lo.where[i] = tracks[l]
			}
		}
	}
	return lo
}

// Write writes the trace as JSON.
func (t *Trace) Write(w io.Writer) error {
	lo := t.layout()
	var base uint64
	for i := range t.slices {
		if s := &t.slices[i]; s.lane >= 0 && (base == 0 || s.start < base) {
			base = s.start
		}
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	e := &encoder{w: bw, buf: make([]byte, 0, 256)}
	e.raw(`{"displayTimeUnit":"ns","traceEvents":[`)

	// Metadata: names and order of processes and threads.
	pids := make([]int, 0, len(lo.procs))
	for p := range lo.procs {
		pids = append(pids, p)
	}
	slices.Sort(pids)
	for _, p := range pids {
		e.begin()
		e.raw(`"ph":"M","name":"process_name","pid":`)
		e.int(int64(p))
		e.raw(`,"tid":0,"args":{"name":`)
		e.str(lo.procs[p])
		e.raw(`}}`)
		if l, ok := lo.plabels[p]; ok {
			e.begin()
			e.raw(`"ph":"M","name":"process_labels","pid":`)
			e.int(int64(p))
			e.raw(`,"tid":0,"args":{"labels":`)
			e.str(l)
			e.raw(`}}`)
		}
		e.begin()
		e.raw(`"ph":"M","name":"process_sort_index","pid":`)
		e.int(int64(p))
		e.raw(`,"tid":0,"args":{"sort_index":`)
		e.int(int64(lo.psort[p]))
		e.raw(`}}`)
	}
	tracks := make([]outTrack, 0, len(lo.threads))
	for k := range lo.threads {
		tracks = append(tracks, k)
	}
	slices.SortFunc(tracks, func(a, b outTrack) int { return cmp.Or(cmp.Compare(a.pid, b.pid), cmp.Compare(a.tid, b.tid)) })
	for _, k := range tracks {
		e.begin()
		e.raw(`"ph":"M","name":"thread_name","pid":`)
		e.int(int64(k.pid))
		e.raw(`,"tid":`)
		e.int(int64(k.tid))
		e.raw(`,"args":{"name":`)
		e.str(lo.threads[k])
		e.raw(`}}`)
		e.begin()
		e.raw(`"ph":"M","name":"thread_sort_index","pid":`)
		e.int(int64(k.pid))
		e.raw(`,"tid":`)
		e.int(int64(k.tid))
		e.raw(`,"args":{"sort_index":`)
		e.int(int64(lo.tsort[k]))
		e.raw(`}}`)
	}

	// Slices, by track then time.
	order := make([]int, 0, len(t.slices))
	for i := range t.slices {
		if t.slices[i].lane >= 0 {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(i, j int) int {
		a, b := lo.where[i], lo.where[j]
		return cmp.Or(cmp.Compare(a.pid, b.pid), cmp.Compare(a.tid, b.tid), t.compareSlices(i, j))
	})
	var last uint64
	for _, i := range order {
		s := &t.slices[i]
		last = max(last, s.end)
		e.begin()
		e.raw(`"ph":"X","name":`)
		e.str(s.name)
		e.raw(`,"cat":`)
		e.str(s.cat)
		e.track(lo.where[i])
		e.raw(`,"ts":`)
		e.us(s.start - base)
		e.raw(`,"dur":`)
		e.us(s.end - s.start)
		args := s.args
		if s.gpu && s.level == levelGPU {
			args = t.gpuArgs(s)
		}
		e.args(args)
		e.raw(`}`)
	}

	// Flows: launch (on the launching phase's track, inside its slice) →
	// GPU work (bound to the GPU slice that starts there).
	// The launch's driver call may start a little after the last call the
	// agent saw of the phase: its time is clamped into the phase's slice,
	// so the arrow binds to it. A GPU record that starts before the
	// phase's slice (clock skew beyond the join's slack) gets no arrow.
	fl := make([]flow, 0, len(t.flows))
	var skipped int64
	for _, f := range t.flows {
		src, dst := &t.slices[f.src], &t.slices[f.dst]
		if src.lane < 0 || dst.lane < 0 {
			continue
		}
		f.ts = min(max(f.ts, src.start), src.end)
		if f.ts > dst.start {
			skipped++
			continue
		}
		fl = append(fl, f)
	}
	slices.SortFunc(fl, func(a, b flow) int {
		return cmp.Or(cmp.Compare(a.ts, b.ts), cmp.Compare(t.slices[a.dst].start, t.slices[b.dst].start), cmp.Compare(a.dst, b.dst))
	})
	for n, f := range fl {
		dst := &t.slices[f.dst]
		ts := f.ts
		id := int64(n + 1)
		e.begin()
		e.raw(`"ph":"s","name":"launch","cat":"launch","id":`)
		e.int(id)
		e.track(lo.where[f.src])
		e.raw(`,"ts":`)
		e.us(ts - base)
		e.raw(`}`)
		e.begin()
		e.raw(`"ph":"f","bp":"e","name":"launch","cat":"launch","id":`)
		e.int(id)
		e.track(lo.where[f.dst])
		e.raw(`,"ts":`)
		e.us(dst.start - base)
		e.raw(`}`)
	}
	if t.droppedCycles > 0 || lo.unplaced > 0 {
		first := 0
		if len(pids) > 0 {
			first = pids[0]
		}
		e.begin()
		e.raw(`"ph":"i","s":"g","name":`)
		e.str(fmt.Sprintf("specprof: %d cycles (%d events) not kept: the cap is %d events; %d slices beyond %d overlapping tracks not shown",
			t.droppedCycles, t.droppedEvents, t.opts.MaxEvents, lo.unplaced, maxLanes))
		e.raw(`,"cat":"specprof","pid":`)
		e.int(int64(first))
		e.raw(`,"tid":0,"ts":`)
		e.us(max(last, base) - base)
		e.raw(`}`)
	}
	e.raw(`],"otherData":{"producer":"specprof","clock":"CLOCK_MONOTONIC; ts in microseconds from base_monotonic_ns","base_monotonic_ns":`)
	e.int(int64(base))
	if t.opts.Clock != nil && base != 0 {
		e.raw(`,"base_wall":`)
		e.str(t.opts.Clock.Wall(base).UTC().Format(time.RFC3339Nano))
	}
	e.raw(`,"cycles":`)
	e.int(t.cycles)
	e.raw(`,"dropped_cycles":`)
	e.int(t.droppedCycles)
	e.raw(`,"dropped_events":`)
	e.int(t.droppedEvents)
	e.raw(`,"max_events":`)
	e.int(int64(t.opts.MaxEvents))
	e.raw(`,"unplaced_slices":`)
	e.int(int64(lo.unplaced))
	e.raw(`,"flows_without_arrow":`)
	e.int(skipped)
	e.raw("}}\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	return nil
}

// WriteFile writes the trace to path.
func (t *Trace) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create trace: %w", err)
	}
	if err := t.Write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close trace %s: %w", path, err)
	}
	return nil
}

// encoder writes JSON by hand (the trace can hold a million events).
type encoder struct {
	w   *bufio.Writer
	n   int
	buf []byte
}

func (e *encoder) raw(s string) { e.w.WriteString(s) }

// begin starts an event object in the traceEvents array.
func (e *encoder) begin() {
	if e.n > 0 {
		e.w.WriteString(",\n{")
	} else {
		e.w.WriteString("\n{")
	}
	e.n++
}

func (e *encoder) int(v int64) { e.w.Write(strconv.AppendInt(e.buf[:0], v, 10)) }

// us writes ns as microseconds with three decimals, exactly.
func (e *encoder) us(ns uint64) {
	b := strconv.AppendUint(e.buf[:0], ns/1000, 10)
	frac := ns % 1000
	b = append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
	e.w.Write(b)
}

func (e *encoder) track(t outTrack) {
	e.raw(`,"pid":`)
	e.int(int64(t.pid))
	e.raw(`,"tid":`)
	e.int(int64(t.tid))
}

func (e *encoder) args(a []arg) {
	if len(a) == 0 {
		return
	}
	e.raw(`,"args":{`)
	for i, kv := range a {
		if i > 0 {
			e.raw(",")
		}
		e.str(kv.key)
		e.raw(":")
		switch kv.kind {
		case 's':
			e.str(kv.s)
		case 'i':
			e.int(kv.i)
		default:
			if math.IsNaN(kv.f) || math.IsInf(kv.f, 0) {
				e.raw("null")
			} else {
				e.w.Write(strconv.AppendFloat(e.buf[:0], kv.f, 'g', -1, 64))
			}
		}
	}
	e.raw("}")
}

// str writes a JSON string (invalid UTF-8 becomes U+FFFD).
func (e *encoder) str(s string) {
	const hex = "0123456789abcdef"
	b := append(e.buf[:0], '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, "\ufffd"...)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	b = append(b, '"')
	e.buf = b[:0]
	e.w.Write(b)
}
