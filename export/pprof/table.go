package pprof

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"

	"github.com/google/pprof/profile"
)

// kind is what a frame stands for; each kind has its own synthetic mapping.
type kind uint8

const (
	kindPython  kind = iota // a Python function
	kindKernel              // a GPU kernel (gpu_time leaf)
	kindAPI                 // a blocking driver call (sync_wait leaf)
	kindNative              // the native leaf of a CPU sample
	kindSpecial             // specprof's own frames (overflow, unknown)
	numKinds
)

// mappingFile names the synthetic mapping of each kind. Names in brackets
// tell pprof there is nothing to symbolize.
var mappingFile = [numKinds]string{"[python]", "[cuda-kernel]", "[cuda-driver]", "[native]", "[specprof]"}

// frameKey identifies a location: a function (kind, name, file) at a line.
type frameKey struct {
	kind kind
	name string
	file string
	line int64
}

type funcKey struct {
	kind kind
	name string
	file string
}

func (f frameKey) fn() funcKey { return funcKey{f.kind, f.name, f.file} }

// labels of one sample. Absent numbers are -1 (and not written).
// Written as string labels phase, device, stream and numeric pid, tid.
type labels struct {
	phase          string
	pid, tid       int64
	device, stream int64
}

// acc is one aggregated sample: a stack with its labels and summed values.
type acc struct {
	stack  []uint32 // frame ids, leaf first
	lab    labels
	values [2]int64
}

// table aggregates samples of one profile by (stack, labels), bounded.
type table struct {
	maxStacks, maxFrames int

	frames map[frameKey]uint32
	list   []frameKey
	starts map[funcKey]int64 // functions' first lines, where known
	phases map[string]uint32 // label strings, interned for the key
	accs   map[string]*acc

	buf     []byte
	scratch []uint32

	// Samples that did not fit (cap on stacks or frames), summed into one
	// overflow sample so that totals stay exact.
	overflow [2]int64
	folded   int64
}

func newTable(maxStacks, maxFrames int) *table {
	return &table{maxStacks: maxStacks, maxFrames: maxFrames, frames: map[frameKey]uint32{},
		starts: map[funcKey]int64{}, phases: map[string]uint32{}, accs: map[string]*acc{}}
}

// startLine records the first line of a function (bounded like frames).
func (t *table) startLine(f funcKey, line int64) {
	if line <= 0 {
		return
	}
	if _, ok := t.starts[f]; ok || len(t.starts) >= t.maxFrames {
		return
	}
	t.starts[f] = line
}

// add adds values to the sample of stack (leaf first) with lab.
func (t *table) add(stack []frameKey, lab labels, values [2]int64) {
	ids := t.scratch[:0]
	for _, f := range stack {
		id, ok := t.frames[f]
		if !ok {
			if len(t.list) >= t.maxFrames {
				t.fold(values)
				return
			}
			id = uint32(len(t.list))
			t.frames[f] = id
			t.list = append(t.list, f)
		}
		ids = append(ids, id)
	}
	t.scratch = ids
	ph, ok := t.phases[lab.phase]
	if !ok {
		if len(t.phases) >= t.maxFrames {
			t.fold(values)
			return
		}
		ph = uint32(len(t.phases))
		t.phases[lab.phase] = ph
	}
	b := t.buf[:0]
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binary.AppendUvarint(b, uint64(id))
	}
	b = binary.AppendUvarint(b, uint64(ph))
	b = binary.AppendVarint(b, lab.pid)
	b = binary.AppendVarint(b, lab.tid)
	b = binary.AppendVarint(b, lab.device)
	b = binary.AppendVarint(b, lab.stream)
	t.buf = b
	a := t.accs[string(b)]
	if a == nil {
		if len(t.accs) >= t.maxStacks {
			t.fold(values)
			return
		}
		a = &acc{stack: slices.Clone(ids), lab: lab}
		t.accs[string(b)] = a
	}
	a.values[0] += values[0]
	a.values[1] += values[1]
}

func (t *table) fold(values [2]int64) {
	t.overflow[0] += values[0]
	t.overflow[1] += values[1]
	t.folded++
}

// overflowFrame is the leaf of the overflow sample.
var overflowFrame = frameKey{kind: kindSpecial, name: "[specprof: distinct-stack cap reached; folded]"}

// build writes the table into p (whose sample and period types are set):
// mappings, functions, locations and samples, sorted, with 1-based IDs
// (0 is reserved by the format).
func (t *table) build(p *profile.Profile) {
	type sample struct {
		stack  []frameKey
		lab    labels
		values [2]int64
	}
	samples := make([]sample, 0, len(t.accs)+1)
	for _, a := range t.accs {
		s := sample{lab: a.lab, values: a.values}
		for _, id := range a.stack {
			s.stack = append(s.stack, t.list[id])
		}
		samples = append(samples, s)
	}
	if t.folded > 0 {
		samples = append(samples, sample{stack: []frameKey{overflowFrame}, lab: labels{pid: -1, tid: -1, device: -1, stream: -1},
			values: t.overflow})
		p.Comments = append(p.Comments, fmt.Sprintf("specprof: %d additions beyond the cap of %d stacks / %d frames folded into the sample %q (totals are exact)",
			t.folded, t.maxStacks, t.maxFrames, overflowFrame.name))
	}

	// Functions, sorted by name, file, kind.
	fnSet := map[funcKey]*profile.Function{}
	locSet := map[frameKey]*profile.Location{}
	for _, s := range samples {
		for _, f := range s.stack {
			fnSet[f.fn()] = nil
			locSet[f] = nil
		}
	}
	fns := make([]funcKey, 0, len(fnSet))
	for f := range fnSet {
		fns = append(fns, f)
	}
	slices.SortFunc(fns, func(a, b funcKey) int {
		return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.file, b.file), cmp.Compare(a.kind, b.kind))
	})
	var maps [numKinds]*profile.Mapping
	for _, f := range fns {
		if maps[f.kind] == nil {
			maps[f.kind] = &profile.Mapping{File: mappingFile[f.kind], HasFunctions: true,
				HasFilenames: f.kind == kindPython, HasLineNumbers: f.kind == kindPython}
		}
	}
	for _, m := range maps {
		if m != nil {
			m.ID = uint64(len(p.Mapping) + 1)
			p.Mapping = append(p.Mapping, m)
		}
	}
	for i, f := range fns {
		pf := &profile.Function{ID: uint64(i + 1), Name: f.name, SystemName: f.name, Filename: f.file, StartLine: t.starts[f]}
		fnSet[f] = pf
		p.Function = append(p.Function, pf)
	}
	// Locations, sorted by function then line.
	locs := make([]frameKey, 0, len(locSet))
	for f := range locSet {
		locs = append(locs, f)
	}
	slices.SortFunc(locs, func(a, b frameKey) int {
		return cmp.Or(cmp.Compare(fnSet[a.fn()].ID, fnSet[b.fn()].ID), cmp.Compare(a.line, b.line))
	})
	for i, f := range locs {
		l := &profile.Location{ID: uint64(i + 1), Mapping: maps[f.kind],
			Line: []profile.Line{{Function: fnSet[f.fn()], Line: f.line}}}
		locSet[f] = l
		p.Location = append(p.Location, l)
	}
	// Samples, sorted by stack (location IDs) then labels.
	for _, s := range samples {
		ps := &profile.Sample{Value: []int64{s.values[0], s.values[1]}}
		for _, f := range s.stack {
			ps.Location = append(ps.Location, locSet[f])
		}
		// Device and stream are string labels: the format drops a numeric
		// label of value 0 without a unit, and device 0 is the usual one.
		str := map[string][]string{}
		if s.lab.phase != "" {
			str["phase"] = []string{s.lab.phase}
		}
		if s.lab.device >= 0 {
			str["device"] = []string{strconv.FormatInt(s.lab.device, 10)}
		}
		if s.lab.stream >= 0 {
			str["stream"] = []string{strconv.FormatInt(s.lab.stream, 10)}
		}
		if len(str) > 0 {
			ps.Label = str
		}
		num := map[string][]int64{}
		if s.lab.pid > 0 {
			num["pid"] = []int64{s.lab.pid}
		}
		if s.lab.tid > 0 {
			num["tid"] = []int64{s.lab.tid}
		}
		if len(num) > 0 {
			ps.NumLabel = num
		}
		p.Sample = append(p.Sample, ps)
	}
	slices.SortFunc(p.Sample, compareSamples)
}

func compareSamples(a, b *profile.Sample) int {
	if c := slices.CompareFunc(a.Location, b.Location, func(x, y *profile.Location) int { return cmp.Compare(x.ID, y.ID) }); c != 0 {
		return c
	}
	for _, k := range []string{"phase", "device", "stream"} {
		if c := cmp.Compare(firstLabel(a.Label, k), firstLabel(b.Label, k)); c != 0 {
			return c
		}
	}
	for _, k := range []string{"pid", "tid"} {
		if c := cmp.Compare(firstNum(a.NumLabel, k), firstNum(b.NumLabel, k)); c != 0 {
			return c
		}
	}
	return 0
}

func firstLabel(m map[string][]string, k string) string {
	if v := m[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func firstNum(m map[string][]int64, k string) int64 {
	if v := m[k]; len(v) > 0 {
		return v[0]
	}
	return -1
}
