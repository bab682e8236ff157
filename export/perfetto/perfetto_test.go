package perfetto

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specprof/specprof/model"

	"github.com/specprof/specprof/export/internal/exporttest"
)

func write(t *testing.T, tr *Trace) ([]byte, *Parsed) {
	t.Helper()
	var b bytes.Buffer
	if err := tr.Write(&b); err != nil {
		t.Fatal(err)
	}
	p, err := Check(b.Bytes())
	if err != nil {
		t.Fatalf("written trace fails the check: %v", err)
	}
	if len(p.Unnamed) > 0 {
		t.Errorf("unnamed tracks %v", p.Unnamed)
	}
	return b.Bytes(), p
}

func num(t *testing.T, v any) float64 {
	t.Helper()
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("%v is not a number", v)
	}
	f, err := n.Float64()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// fixture: two processes (one with two threads), three cycles per thread.
func fixture() []*model.CycleTrace {
	var cs []*model.CycleTrace
	for n := 1; n <= 3; n++ {
		start := uint64(10_000_000_000 + n*2_000_000)
		second := exporttest.Cycle(100, 101, n, start+500)
		for _, ph := range second.Phases {
			for i := range ph.GPU {
				ph.GPU[i].Stream += 4 // the second thread's own streams
			}
		}
		cs = append(cs, exporttest.Cycle(100, 100, n, start), second, exporttest.Cycle(200, 200, n, start+900))
	}
	for _, x := range cs {
		if x.PID == 200 {
			x.Process, x.Rank = "sglang::scheduler_TP1", 1
			for _, ph := range x.Phases {
				for i := range ph.GPU {
					ph.GPU[i].Device = 1
				}
			}
		}
	}
	return cs
}

func TestTrace(t *testing.T) {
	cs := fixture()
	clock := model.FixedClock(1_700_000_000_000_000_000)
	tr := New(Options{Clock: &clock})
	for _, c := range cs {
		tr.AddCycle(c)
	}
	_, p := write(t, tr)
	base := int64(num(t, p.OtherData["base_monotonic_ns"]))
	if base != int64(cs[0].Start) {
		t.Errorf("base %d, first cycle starts at %d", base, cs[0].Start)
	}
	if w, _ := p.OtherData["base_wall"].(string); !strings.HasPrefix(w, "2023-11-14T22:13:") {
		t.Errorf("base_wall %q", w)
	}
	if got := num(t, p.OtherData["cycles"]); got != 9 {
		t.Errorf("otherData.cycles %v", got)
	}

	// Names: processes, GPU processes per device, stream tracks, lanes.
	names := map[string]bool{}
	for _, n := range p.ProcessNames {
		names[n] = true
	}
	for _, n := range p.ThreadNames {
		names[n] = true
	}
	for _, want := range []string{"sglang::scheduler_TP0 (pid 100)", "sglang::scheduler_TP1 (pid 200)", "GPU 0", "GPU 1",
		"GPU 0 / stream 7", "GPU 0 / stream 9", "GPU 1 / stream 7", "tid 100 (main)", "tid 101", "tid 100 (main) · overlap 1"} {
		if !names[want] {
			t.Errorf("no track named %q (have %v)", want, names)
		}
	}

	if p.ProcessLabels[200] != "rank 1" || p.ProcessLabels[100] != "rank 0" {
		t.Errorf("process labels %v", p.ProcessLabels)
	}

	// Every GPU record is a slice at its exact time on its stream's track;
	// every launch has a flow.
	type gk struct {
		name  string
		start int64
		dev   uint32
	}
	want := map[gk]int{}
	flows := 0
	for _, c := range cs {
		for _, ph := range c.Phases {
			for _, g := range ph.GPU {
				name := g.Name
				if g.Kind != "kernel" {
					name = g.Kind
				}
				want[gk{name, int64(g.Start), g.Device}]++
				flows++
			}
		}
	}
	gpuSlices := 0
	for _, e := range p.Slices("") {
		if e.Cat != "kernel" && e.Cat != "memcpy" {
			continue
		}
		gpuSlices++
		tn := p.ThreadNames[Track{e.Pid, e.Tid}]
		dev := uint32(0)
		if strings.HasPrefix(tn, "GPU 1") {
			dev = 1
		}
		k := gk{e.Name, e.Ts + base, dev}
		if want[k] == 0 {
			t.Errorf("GPU slice %q at %d on %q matches no record", e.Name, e.Ts+base, tn)
			continue
		}
		want[k]--
		if e.Name == exporttest.AttnKernel && (e.Dur != 40_000 || !strings.HasSuffix(tn, "/ stream 7") && tn != "GPU 0 / stream 11") {
			t.Errorf("attention kernel %d ns on %q", e.Dur, tn)
		}
	}
	if gpuSlices != flows {
		t.Errorf("%d GPU slices, %d records", gpuSlices, flows)
	}
	if p.Flows != flows {
		t.Errorf("%d flows, %d launches", p.Flows, flows)
	}
	// Flows start on the launching thread, in the launching phase.
	for _, e := range p.Events {
		if e.Ph != "s" {
			continue
		}
		if tn := p.ThreadNames[Track{e.Pid, e.Tid}]; !strings.HasPrefix(tn, "tid ") {
			t.Errorf("flow starts on %q", tn)
		}
	}

	// Phases nest in cycles; "other" overlaps the others partially and goes
	// to the overlap track; syncs nest in spec.accept.
	phases := map[string]int{}
	for _, e := range p.Slices("phase") {
		phases[e.Name]++
		tn := p.ThreadNames[Track{e.Pid, e.Tid}]
		if (e.Name == "other") != strings.Contains(tn, "overlap") {
			t.Errorf("phase %s on %q", e.Name, tn)
		}
		if e.Name == "spec.verify" && (e.Dur != 500_000 || e.Args["func"] != exporttest.VerifyFunc.String() ||
			e.Args["gpu_active_ns"] == nil || e.Args["gpu_elapsed_ns"] == nil) {
			t.Errorf("verify slice %+v", e)
		}
	}
	if phases["spec.draft"] != 9 || phases["other"] != 9 {
		t.Errorf("phase slices %v", phases)
	}
	syncs := p.Slices("sync")
	if len(syncs) != 27 {
		t.Errorf("%d sync slices, want 27", len(syncs))
	}
	for _, e := range syncs {
		if e.Name == exporttest.SyncAPI && e.Dur == 0 && e.Args["wait_ns"] != "unknown (return not seen)" {
			t.Errorf("unseen sync %+v", e)
		}
	}

	// Collectives wrap their kernel, with bytes, algorithm and bus bandwidth.
	colls := p.Slices("collective")
	if len(colls) != 9 {
		t.Fatalf("%d collective slices, want 9", len(colls))
	}
	for _, e := range colls {
		if e.Name != "AllReduce" || e.Dur != 100_000 || num(t, e.Args["bytes"]) != 8192 || e.Args["algorithm"] != "RING" ||
			num(t, e.Args["busbw_gbps"]) != 0.08192 {
			t.Errorf("collective %+v", e)
		}
		if tn := p.ThreadNames[Track{e.Pid, e.Tid}]; !strings.HasSuffix(tn, "/ stream 9") && !strings.HasSuffix(tn, "/ stream 13") {
			t.Errorf("collective on %q", tn)
		}
	}
}

// TestOverlapsAndClamps: kernels that ran concurrently on one stream go to
// an overlap track; a launch recorded after the phase's last call still
// starts its arrow inside the phase; a collective without a kernel is an
// instant on the thread's NCCL track; names are escaped.
func TestOverlapsAndClamps(t *testing.T) {
	c := exporttest.Cycle(300, 300, 1, 5_000_000)
	v := c.Phases[2]
	if v.Phase != "spec.verify" {
		t.Fatalf("fixture order changed: %s", v.Phase)
	}
	v.GPU = append(v.GPU, model.GPUActivity{Kind: "kernel", Name: "k \"quoted\"\n\xff", Start: v.GPU[0].Start + 1000,
		End: v.GPU[0].End + 50_000, Stream: 7, Launch: v.GPU[0].Launch + 500, Corr: 1},
		model.GPUActivity{Kind: "kernel", Name: "late", Start: v.End + 5000, End: v.End + 9000, Stream: 7, Launch: v.End + 3000, Corr: 2},
		model.GPUActivity{Kind: "kernel", Name: "skewed", Start: v.Start - 9000, End: v.Start - 8000, Stream: 7, Launch: v.Start - 10000, Corr: 3})
	v.Collectives = append(v.Collectives, model.Collective{Op: "AllGather", Time: v.Start + 100, Bytes: 64, Peer: -1})
	tr := New(Options{})
	tr.AddCycle(c)
	_, p := write(t, tr)
	var odd *Event
	for i := range p.Events {
		if e := &p.Events[i]; e.Ph == "X" && strings.HasPrefix(e.Name, "k ") {
			odd = e
		}
	}
	if odd == nil || odd.Name != "k \"quoted\"\n\uFFFD" {
		t.Fatalf("escaped kernel name: %+v", odd)
	}
	if tn := p.ThreadNames[Track{odd.Pid, odd.Tid}]; tn != "GPU 0 / stream 7 · overlap 1" {
		t.Errorf("concurrent kernel on %q", tn)
	}
	// The late launch's arrow starts at the phase's end; the skewed one
	// (GPU work before the phase began) has none, and is counted.
	var late bool
	for _, e := range p.Events {
		if e.Ph == "s" && e.Ts+int64(num(t, p.OtherData["base_monotonic_ns"])) == int64(v.End) {
			late = true
		}
	}
	if !late || p.Flows != len(v.GPU)+len(c.Phases[0].GPU)+len(c.Phases[3].GPU)-1 || num(t, p.OtherData["flows_without_arrow"]) != 1 {
		t.Errorf("late arrow %v, %d flows, otherData %v", late, p.Flows, p.OtherData)
	}
	var inst bool
	for _, e := range p.Slices("collective") {
		if e.Name == "AllGather" {
			inst = e.Dur == 0 && strings.HasSuffix(p.ThreadNames[Track{e.Pid, e.Tid}], "NCCL calls")
		}
	}
	if !inst {
		t.Error("collective without kernel: no instant on the NCCL calls track")
	}
}

// TestCap: whole cycles are kept up to the cap; the rest are counted and
// the file says so.
func TestCap(t *testing.T) {
	one := New(Options{})
	c := exporttest.Cycle(1, 1, 1, 1000)
	one.AddCycle(c)
	per := one.events()
	if per != cycleEvents(c) {
		t.Fatalf("cycleEvents %d, AddCycle made %d", cycleEvents(c), per)
	}
	tr := New(Options{MaxEvents: 3*per + per/2})
	for n := 1; n <= 10; n++ {
		tr.AddCycle(exporttest.Cycle(1, 1, n, uint64(n)*2_000_000))
	}
	if tr.Cycles() != 3 {
		t.Errorf("%d cycles kept, want 3", tr.Cycles())
	}
	dc, de := tr.Dropped()
	if dc != 7 || de != int64(7*per) {
		t.Errorf("dropped %d cycles %d events, want 7 and %d", dc, de, 7*per)
	}
	_, p := write(t, tr)
	if num(t, p.OtherData["dropped_cycles"]) != 7 || len(p.Slices("cycle")) != 3 {
		t.Errorf("otherData %v, %d cycle slices", p.OtherData, len(p.Slices("cycle")))
	}
	var note bool
	for _, e := range p.Events {
		if e.Ph == "i" && strings.Contains(e.Name, "7 cycles") {
			note = true
		}
	}
	if !note {
		t.Error("no instant event saying cycles were dropped")
	}
}

func TestDeterministic(t *testing.T) {
	cs := fixture()
	a, b := New(Options{}), New(Options{})
	for i := range cs {
		a.AddCycle(cs[i])
		b.AddCycle(cs[len(cs)-1-i])
	}
	x, _ := write(t, a)
	y, _ := write(t, b)
	if !bytes.Equal(x, y) {
		t.Error("output depends on the order cycles arrive in")
	}
}

func TestWriteFile(t *testing.T) {
	tr := New(Options{})
	tr.AddCycle(exporttest.Cycle(1, 1, 1, 1000))
	if err := tr.WriteFile(filepath.Join(t.TempDir(), FileName)); err != nil {
		t.Fatal(err)
	}
	if err := tr.WriteFile(filepath.Join(t.TempDir(), "missing", FileName)); err == nil || !strings.Contains(err.Error(), "create trace") {
		t.Errorf("missing directory: %v", err)
	}
	// An empty trace is valid too.
	write(t, New(Options{}))
}

// TestCheckRejects: the checker fails traces that break the rules.
func TestCheckRejects(t *testing.T) {
	const name = `{"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"t"}},`
	for _, c := range []struct{ why, events, err string }{
		{"no dur", `{"ph":"X","name":"a","pid":1,"tid":1,"ts":1}`, `no "dur"`},
		{"negative dur", `{"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":-2}`, "negative"},
		{"no pid", `{"ph":"X","name":"a","tid":1,"ts":1,"dur":2}`, `no "pid"`},
		{"no name", `{"ph":"X","pid":1,"tid":1,"ts":1,"dur":2}`, `no "name"`},
		{"partial overlap", `{"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":2},{"ph":"X","name":"b","pid":1,"tid":1,"ts":2,"dur":2}`, "partially"},
		{"flow without finish", `{"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":2},{"ph":"s","name":"l","cat":"c","id":1,"pid":1,"tid":1,"ts":1.5}`, "without finish"},
		{"flow backwards", `{"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":2},{"ph":"s","name":"l","cat":"c","id":1,"pid":1,"tid":1,"ts":2},{"ph":"f","bp":"e","name":"l","cat":"c","id":1,"pid":1,"tid":1,"ts":1.5}`, "before it starts"},
		{"unbound flow", `{"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":2},{"ph":"s","name":"l","cat":"c","id":1,"pid":1,"tid":1,"ts":5},{"ph":"f","bp":"e","name":"l","cat":"c","id":1,"pid":1,"tid":1,"ts":6}`, "inside no slice"},
		{"B without E", `{"ph":"B","name":"a","pid":1,"tid":1,"ts":1}`, "without E"},
		{"bad metadata", `{"ph":"M","name":"process_name","pid":1,"args":{}}`, "without args.name"},
		{"unknown phase", `{"ph":"Q","name":"a","pid":1,"tid":1,"ts":1}`, "phase"},
	} {
		_, err := Check([]byte(`{"traceEvents":[` + name + c.events + `]}`))
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %v, want an error with %q", c.why, err, c.err)
		}
	}
	if _, err := Check([]byte(`{"traceEvents":[` + name + `{"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":2},{"ph":"X","name":"b","pid":1,"tid":1,"ts":1.5,"dur":0.5}]}`)); err != nil {
		t.Errorf("proper nesting rejected: %v", err)
	}
}

func BenchmarkAddCycle(b *testing.B) {
	cs := fixture()
	tr := New(Options{MaxEvents: 1 << 30})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%100_000 == 0 {
			tr = New(Options{MaxEvents: 1 << 30})
		}
		tr.AddCycle(cs[i%len(cs)])
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
}
