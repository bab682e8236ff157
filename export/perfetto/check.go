package perfetto

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Event is one event of a parsed trace, with times in nanoseconds.
type Event struct {
	Ph, Name, Cat string
	Pid, Tid      int64
	Ts, Dur       int64 // ns; Dur only for ph X
	ID            string
	BP, Scope     string
	Args          map[string]any
}

// End is the end of a complete event (ph X).
func (e *Event) End() int64 { return e.Ts + e.Dur }

// Track is a (pid, tid) pair.
type Track struct{ Pid, Tid int64 }

// Parsed is a trace that passed Check.
type Parsed struct {
	Events        []Event
	ProcessNames  map[int64]string
	ProcessLabels map[int64]string
	ThreadNames   map[Track]string
	OtherData     map[string]any
	// Unnamed lists the tracks with slices but no thread_name, and
	// processes without process_name (pid, tid -1).
	Unnamed []Track
	// Flows is the number of complete flows (an s and its f).
	Flows int
}

// Slices returns the complete events (ph X) with category cat ("" for all).
func (p *Parsed) Slices(cat string) []Event {
	var out []Event
	for _, e := range p.Events {
		if e.Ph == "X" && (cat == "" || e.Cat == cat) {
			out = append(out, e)
		}
	}
	return out
}

var metadataNames = map[string]string{
	"process_name": "name", "process_labels": "labels", "process_sort_index": "sort_index",
	"thread_name": "name", "thread_sort_index": "sort_index",
}

// Check parses a trace in the Trace Event Format (JSON object form) and
// checks the rules viewers rely on: every event has its phase's required
// fields (name, pid, tid, ts; dur for X; id for flows; args for
// metadata); times and durations are non-negative; B/E pairs match per
// thread; every flow has exactly one start and one finish, in time order,
// each bound to a slice of its thread; and complete events on one thread
// nest properly (a slice that starts inside another ends inside it).
func Check(data []byte) (*Parsed, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var top struct {
		TraceEvents []map[string]any `json:"traceEvents"`
		OtherData   map[string]any   `json:"otherData"`
	}
	if err := dec.Decode(&top); err != nil {
		return nil, fmt.Errorf("parse trace JSON: %w", err)
	}
	if top.TraceEvents == nil {
		return nil, errors.New("no traceEvents array")
	}
	p := &Parsed{ProcessNames: map[int64]string{}, ProcessLabels: map[int64]string{}, ThreadNames: map[Track]string{}, OtherData: top.OtherData}
	for i, raw := range top.TraceEvents {
		e, err := parseEvent(raw)
		if err != nil {
			return nil, fmt.Errorf("event %d %v: %w", i, raw, err)
		}
		if e.Ph == "M" {
			switch e.Name {
			case "process_name":
				p.ProcessNames[e.Pid], _ = e.Args["name"].(string)
			case "process_labels":
				p.ProcessLabels[e.Pid], _ = e.Args["labels"].(string)
			case "thread_name":
				p.ThreadNames[Track{e.Pid, e.Tid}], _ = e.Args["name"].(string)
			}
		}
		p.Events = append(p.Events, e)
	}
	if err := p.checkTracks(); err != nil {
		return nil, err
	}
	return p, nil
}

func parseEvent(raw map[string]any) (Event, error) {
	var e Event
	var ok bool
	if e.Ph, ok = raw["ph"].(string); !ok {
		return e, errors.New(`no "ph"`)
	}
	e.Name, _ = raw["name"].(string)
	e.Cat, _ = raw["cat"].(string)
	e.BP, _ = raw["bp"].(string)
	e.Scope, _ = raw["s"].(string)
	if a, has := raw["args"]; has {
		if e.Args, ok = a.(map[string]any); !ok {
			return e, errors.New(`"args" is not an object`)
		}
	}
	var err error
	if e.Pid, err = intField(raw, "pid"); err != nil {
		return e, err
	}
	needTid := e.Ph != "M" || strings.HasPrefix(e.Name, "thread_")
	if e.Tid, err = intField(raw, "tid"); err != nil && needTid {
		return e, err
	}
	if _, has := raw["name"]; !has && e.Ph != "E" {
		return e, errors.New(`no "name"`)
	}
	if e.Ph != "M" {
		if e.Ts, err = nsField(raw, "ts"); err != nil {
			return e, err
		}
	}
	switch e.Ph {
	case "X":
		if e.Dur, err = nsField(raw, "dur"); err != nil {
			return e, err
		}
	case "B", "E":
	case "M":
		key, known := metadataNames[e.Name]
		if !known {
			return e, fmt.Errorf("unknown metadata %q", e.Name)
		}
		v, has := e.Args[key]
		if !has {
			return e, fmt.Errorf("metadata %s without args.%s", e.Name, key)
		}
		if key == "name" {
			if _, ok := v.(string); !ok {
				return e, fmt.Errorf("metadata %s: args.name is not a string", e.Name)
			}
		}
		if key == "sort_index" {
			if _, ok := v.(json.Number); !ok {
				return e, fmt.Errorf("metadata %s: args.sort_index is not a number", e.Name)
			}
		}
	case "s", "t", "f":
		id, has := raw["id"]
		if !has {
			return e, errors.New("flow event without id")
		}
		switch v := id.(type) {
		case json.Number:
			e.ID = v.String()
		case string:
			e.ID = v
		default:
			return e, fmt.Errorf("flow id %v is neither number nor string", id)
		}
		if e.BP != "" && e.BP != "e" {
			return e, fmt.Errorf("flow binding point %q", e.BP)
		}
	case "i", "I":
		if e.Scope != "" && e.Scope != "g" && e.Scope != "p" && e.Scope != "t" {
			return e, fmt.Errorf("instant scope %q", e.Scope)
		}
	case "C":
	default:
		return e, fmt.Errorf("phase %q is not one specprof writes or checks", e.Ph)
	}
	return e, nil
}

func intField(raw map[string]any, k string) (int64, error) {
	v, has := raw[k]
	if !has {
		return 0, fmt.Errorf("no %q", k)
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("%q is not a number", k)
	}
	i, err := n.Int64()
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer: %w", k, err)
	}
	return i, nil
}

// nsField reads a non-negative time in microseconds as nanoseconds,
// exactly for up to three decimals.
func nsField(raw map[string]any, k string) (int64, error) {
	v, has := raw[k]
	if !has {
		return 0, fmt.Errorf("no %q", k)
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("%q is not a number", k)
	}
	s := n.String()
	var ns int64
	if whole, frac, dot := strings.Cut(s, "."); !strings.ContainsAny(s, "eE") && len(frac) <= 3 {
		w, err := strconv.ParseInt(whole, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q: %w", k, err)
		}
		f := int64(0)
		if dot && frac != "" {
			padded := frac + strings.Repeat("0", 3-len(frac))
			if f, err = strconv.ParseInt(padded, 10, 64); err != nil {
				return 0, fmt.Errorf("%q: %w", k, err)
			}
		}
		if strings.HasPrefix(whole, "-") {
			f = -f
		}
		ns = w*1000 + f
	} else {
		f, err := n.Float64()
		if err != nil {
			return 0, fmt.Errorf("%q: %w", k, err)
		}
		ns = int64(math.Round(f * 1000))
	}
	if ns < 0 {
		return 0, fmt.Errorf("%q is negative (%s)", k, s)
	}
	return ns, nil
}

// checkTracks checks B/E matching, nesting and flows, per thread.
func (p *Parsed) checkTracks() error {
	byTrack := map[Track][]int{}
	for i := range p.Events {
		e := &p.Events[i]
		if e.Ph == "X" {
			byTrack[Track{e.Pid, e.Tid}] = append(byTrack[Track{e.Pid, e.Tid}], i)
		}
	}
	// B/E in time order per track.
	begins := map[Track][]*Event{}
	for i := range p.Events {
		e := &p.Events[i]
		tr := Track{e.Pid, e.Tid}
		switch e.Ph {
		case "B":
			begins[tr] = append(begins[tr], e)
		case "E":
			st := begins[tr]
			if len(st) == 0 {
				return fmt.Errorf("E at %d ns on %v without a B", e.Ts, tr)
			}
			if b := st[len(st)-1]; e.Ts < b.Ts {
				return fmt.Errorf("E at %d ns before its B %q at %d ns on %v", e.Ts, b.Name, b.Ts, tr)
			}
			begins[tr] = st[:len(st)-1]
		}
	}
	for tr, st := range begins {
		if len(st) > 0 {
			return fmt.Errorf("%d B events without E on %v", len(st), tr)
		}
	}
	// Nesting of complete events.
	for tr, idx := range byTrack {
		slices.SortStableFunc(idx, func(i, j int) int {
			a, b := &p.Events[i], &p.Events[j]
			return cmp.Or(cmp.Compare(a.Ts, b.Ts), cmp.Compare(b.End(), a.End()))
		})
		var open []*Event
		for _, i := range idx {
			e := &p.Events[i]
			for len(open) > 0 && open[len(open)-1].End() <= e.Ts {
				open = open[:len(open)-1]
			}
			if n := len(open); n > 0 && e.End() > open[n-1].End() {
				o := open[n-1]
				return fmt.Errorf("on %v, %q [%d, %d] ns overlaps %q [%d, %d] ns partially", tr, e.Name, e.Ts, e.End(), o.Name, o.Ts, o.End())
			}
			open = append(open, e)
		}
		if _, ok := p.ThreadNames[tr]; !ok {
			p.Unnamed = append(p.Unnamed, tr)
		}
		if _, ok := p.ProcessNames[tr.Pid]; !ok {
			p.Unnamed = append(p.Unnamed, Track{tr.Pid, -1})
		}
	}
	slices.SortFunc(p.Unnamed, func(a, b Track) int { return cmp.Or(cmp.Compare(a.Pid, b.Pid), cmp.Compare(a.Tid, b.Tid)) })
	p.Unnamed = slices.Compact(p.Unnamed)
	// Flows: one s and one f per (cat, id), in order, each bound.
	type key struct{ cat, id string }
	starts, finishes := map[key]*Event{}, map[key]*Event{}
	for i := range p.Events {
		e := &p.Events[i]
		var m map[key]*Event
		switch e.Ph {
		case "s":
			m = starts
		case "f":
			m = finishes
		default:
			continue
		}
		k := key{e.Cat, e.ID}
		if m[k] != nil {
			return fmt.Errorf("flow %v: two %q events", k, e.Ph)
		}
		m[k] = e
	}
	// Per track, slices are sorted by start now.
	firstAfter := func(e *Event) (idx []int, n int) {
		idx = byTrack[Track{e.Pid, e.Tid}]
		n, _ = slices.BinarySearchFunc(idx, e.Ts+1, func(i int, ts int64) int { return cmp.Compare(p.Events[i].Ts, ts) })
		return idx, n
	}
	encloses := func(e *Event) bool {
		idx, n := firstAfter(e)
		for j := n - 1; j >= 0; j-- {
			if p.Events[idx[j]].End() >= e.Ts {
				return true
			}
		}
		return false
	}
	startsAfter := func(e *Event) bool {
		idx, n := firstAfter(e)
		return n > 0 && p.Events[idx[n-1]].Ts == e.Ts || n < len(idx)
	}
	for k, s := range starts {
		f := finishes[k]
		if f == nil {
			return fmt.Errorf("flow %v: start without finish", k)
		}
		if f.Ts < s.Ts {
			return fmt.Errorf("flow %v: finishes at %d ns before it starts at %d ns", k, f.Ts, s.Ts)
		}
		if !encloses(s) {
			return fmt.Errorf("flow %v: start at %d ns on (%d, %d) is inside no slice", k, s.Ts, s.Pid, s.Tid)
		}
		if (f.BP == "e" && !encloses(f)) || (f.BP == "" && !startsAfter(f)) {
			return fmt.Errorf("flow %v: finish at %d ns on (%d, %d) binds to no slice", k, f.Ts, f.Pid, f.Tid)
		}
		p.Flows++
	}
	for k := range finishes {
		if starts[k] == nil {
			return fmt.Errorf("flow %v: finish without start", k)
		}
	}
	return nil
}
