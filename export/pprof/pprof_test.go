package pprof

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/specprof/specprof/model"

	"github.com/google/pprof/profile"

	"github.com/specprof/specprof/export/internal/exporttest"
)

const pid, tid = 4242, 4242

func cycles(n int) []*model.CycleTrace {
	var out []*model.CycleTrace
	for i := 1; i <= n; i++ {
		out = append(out, exporttest.Cycle(pid, tid, i, uint64(i)*2_000_000))
	}
	return out
}

// valid checks what CheckValid does plus what it leaves out: 1-based,
// dense IDs and every sample's location in the table.
func valid(t *testing.T, p *profile.Profile) {
	t.Helper()
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	for i, f := range p.Function {
		if f.ID != uint64(i+1) {
			t.Errorf("function %d has ID %d", i, f.ID)
		}
	}
	locs := map[*profile.Location]bool{}
	for i, l := range p.Location {
		if l.ID != uint64(i+1) {
			t.Errorf("location %d has ID %d", i, l.ID)
		}
		if l.Mapping == nil || !l.Mapping.HasFunctions {
			t.Errorf("location %d: no symbolized mapping", l.ID)
		}
		locs[l] = true
	}
	for _, s := range p.Sample {
		for _, l := range s.Location {
			if !locs[l] {
				t.Fatalf("sample location %d not in the table", l.ID)
			}
		}
	}
}

// roundTrip serializes and parses a profile, as go tool pprof would read it.
func roundTrip(t *testing.T, p *profile.Profile) *profile.Profile {
	t.Helper()
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	q, err := profile.Parse(&b)
	if err != nil {
		t.Fatalf("parse written profile: %v", err)
	}
	valid(t, q)
	return q
}

func stackNames(s *profile.Sample) []string {
	var out []string
	for _, l := range s.Location {
		out = append(out, l.Line[0].Function.Name)
	}
	return out
}

// byPhase sums sample values by the phase label.
func byPhase(p *profile.Profile, idx int) map[string]int64 {
	m := map[string]int64{}
	for _, s := range p.Sample {
		m[firstLabel(s.Label, "phase")] += s.Value[idx]
	}
	return m
}

func TestGPUTime(t *testing.T) {
	cs := cycles(5)
	clock := model.FixedClock(1_700_000_000_000_000_000)
	ps := New(Options{Clock: &clock})
	want := map[string][2]int64{}
	for _, c := range cs {
		ps.AddCycle(c)
		for _, ph := range c.Phases {
			w := want[ph.Phase]
			want[ph.Phase] = [2]int64{w[0] + ph.Stats.GPUKernels, w[1] + ph.Stats.GPUKernelNs}
		}
	}
	p := roundTrip(t, ps.GPUTime())
	if got := []string{p.SampleType[0].Type, p.SampleType[1].Type, p.SampleType[1].Unit, p.DefaultSampleType}; !slices.Equal(got, []string{"kernels", "gpu", "nanoseconds", "gpu"}) {
		t.Errorf("sample types %v", got)
	}
	counts, ns := byPhase(p, 0), byPhase(p, 1)
	for ph, w := range want {
		if counts[ph] != w[0] || ns[ph] != w[1] {
			t.Errorf("%s: %d kernels %d ns in profile, cycles have %d kernels %d ns", ph, counts[ph], ns[ph], w[0], w[1])
		}
	}
	if want["spec.verify"][1] != 5*200_000 || want["spec.draft"][0] != 5*exporttest.DraftKernels {
		t.Fatalf("fixture changed: %v", want)
	}
	if p.TimeNanos != clock.Wall(cs[0].Start).UnixNano() || p.DurationNanos != int64(cs[4].End-cs[0].Start) {
		t.Errorf("time %d duration %d", p.TimeNanos, p.DurationNanos)
	}
	// The attention kernel: leaf kernel → site → phase function → cycle
	// function, with lines and labels.
	var found bool
	for _, s := range p.Sample {
		names := stackNames(s)
		if names[0] != exporttest.AttnKernel {
			continue
		}
		found = true
		wantNames := []string{exporttest.AttnKernel, exporttest.VerifySite.Func, exporttest.VerifyFunc.Func, exporttest.CycleFunc.Func}
		if !slices.Equal(names, wantNames) {
			t.Errorf("stack %v, want %v", names, wantNames)
		}
		site := s.Location[1]
		if site.Line[0].Line != int64(exporttest.VerifySite.Line) || site.Line[0].Function.Filename != exporttest.VerifySite.File {
			t.Errorf("site location %+v", site.Line[0])
		}
		if f := s.Location[2].Line[0].Function; f.StartLine != int64(exporttest.VerifyFunc.Line) {
			t.Errorf("phase function start line %d", f.StartLine)
		}
		if s.Label["phase"][0] != "spec.verify" || s.Label["stream"][0] != "7" || s.Label["device"][0] != "0" ||
			s.NumLabel["pid"][0] != pid || s.NumLabel["tid"][0] != tid {
			t.Errorf("labels %v %v", s.Label, s.NumLabel)
		}
		if s.Value[0] != 5 || s.Value[1] != 5*40_000 {
			t.Errorf("attn values %v", s.Value)
		}
	}
	if !found {
		t.Error("no sample for the attention kernel")
	}
	if !slices.ContainsFunc(p.Comments, func(c string) bool { return strings.Contains(c, "memory copies") }) {
		t.Errorf("comments %q do not mention the copies left out", p.Comments)
	}
}

func TestSyncWait(t *testing.T) {
	ps := New(Options{})
	for _, c := range cycles(3) {
		ps.AddCycle(c)
	}
	p := roundTrip(t, ps.SyncWait())
	ns := byPhase(p, 1)
	if ns["spec.accept"] != 3*150_000 || ns["other"] != 3*5_000 {
		t.Errorf("wait by phase %v", ns)
	}
	counts := byPhase(p, 0)
	if counts["spec.accept"] != 3 {
		t.Errorf("syncs counted %v (the unseen returns must not be)", counts)
	}
	for _, s := range p.Sample {
		names := stackNames(s)
		switch firstLabel(s.Label, "phase") {
		case "spec.accept":
			// The site is in the phase function itself: one frame for it,
			// at the site's line.
			want := []string{exporttest.SyncAPI, exporttest.AcceptFunc.Func, exporttest.CycleFunc.Func}
			if !slices.Equal(names, want) {
				t.Errorf("accept stack %v, want %v", names, want)
			}
			if l := s.Location[1].Line[0].Line; l != int64(exporttest.AcceptSite.Line) {
				t.Errorf("accept site line %d", l)
			}
		case "other":
			want := []string{exporttest.CopyAPI, exporttest.OtherSite.Func, exporttest.CycleFunc.Func}
			if !slices.Equal(names, want) {
				t.Errorf("other stack %v, want %v", names, want)
			}
		}
		if _, ok := s.Label["stream"]; ok {
			t.Errorf("sync sample has a stream label")
		}
	}
	if !slices.ContainsFunc(p.Comments, func(c string) bool { return strings.Contains(c, "3 blocking calls whose return") }) {
		t.Errorf("comments %q", p.Comments)
	}
}

func TestCPU(t *testing.T) {
	ps := New(Options{})
	for i := 0; i < 10; i++ {
		ps.AddSample(exporttest.Sample(pid, tid, uint64(1_000_000+i*10_101_010)))
	}
	ps.AddSample(&model.CPUSample{PID: pid, TID: tid + 1, Phase: "other", Weight: 1_000_000_000 / 99})
	p := roundTrip(t, ps.CPU())
	if p.Period != 1_000_000_000/99 || p.PeriodType.Type != "cpu" || p.PeriodType.Unit != "nanoseconds" {
		t.Errorf("period %d %+v", p.Period, p.PeriodType)
	}
	if len(p.Sample) != 2 {
		t.Fatalf("%d samples, want 2", len(p.Sample))
	}
	var tot, n int64
	for _, s := range p.Sample {
		n += s.Value[0]
		tot += s.Value[1]
		names := stackNames(s)
		if s.NumLabel["tid"][0] == tid+1 {
			if !slices.Equal(names, []string{"[unknown]"}) {
				t.Errorf("stackless sample: %v", names)
			}
			continue
		}
		want := []string{"cuLaunchKernel", exporttest.VerifySite.Func, exporttest.VerifyFunc.Func, exporttest.CycleFunc.Func}
		if !slices.Equal(names, want) {
			t.Errorf("stack %v, want %v", names, want)
		}
		if s.Location[0].Mapping.File != "[native]" || s.Location[1].Mapping.File != "[python]" {
			t.Errorf("mappings %s %s", s.Location[0].Mapping.File, s.Location[1].Mapping.File)
		}
	}
	if n != 11 || tot != 11*(1_000_000_000/99) {
		t.Errorf("%d samples, %d ns", n, tot)
	}
	empty := roundTrip(t, New(Options{CPUPeriodNs: 10_101_010}).CPU())
	if len(empty.Sample) != 0 || empty.Period != 10_101_010 || !strings.Contains(strings.Join(empty.Comments, " "), "no CPU samples") {
		t.Errorf("empty profile: %d samples, period %d, comments %q", len(empty.Sample), empty.Period, empty.Comments)
	}
}

// TestDeterministic: the same cycles in another order give the same bytes.
func TestDeterministic(t *testing.T) {
	cs := cycles(6)
	a, b := New(Options{}), New(Options{})
	for i := range cs {
		a.AddCycle(cs[i])
		b.AddCycle(cs[len(cs)-1-i])
		a.AddSample(exporttest.Sample(pid, tid+i%2, uint64(i)))
		b.AddSample(exporttest.Sample(pid, tid+(len(cs)-1-i)%2, uint64(len(cs)-1-i)))
	}
	for _, f := range []func(*Profiles) *profile.Profile{(*Profiles).GPUTime, (*Profiles).SyncWait, (*Profiles).CPU} {
		var x, y bytes.Buffer
		if err := f(a).WriteUncompressed(&x); err != nil {
			t.Fatal(err)
		}
		if err := f(b).WriteUncompressed(&y); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x.Bytes(), y.Bytes()) {
			t.Errorf("profiles differ with the input order (%d vs %d bytes)", x.Len(), y.Len())
		}
	}
}

// TestBounded: beyond the caps, samples fold into one overflow sample and
// totals stay exact.
func TestBounded(t *testing.T) {
	for _, o := range []Options{{MaxStacks: 2}, {MaxFrames: 3}} {
		ps := New(o)
		var want int64
		for i := 0; i < 50; i++ {
			c := exporttest.Cycle(pid+i, tid, 1, 0)
			for _, ph := range c.Phases {
				for j := range ph.GPU {
					ph.GPU[j].Name += string(rune('a' + i%26)) // many distinct kernels
				}
				want += ph.Stats.GPUKernelNs
			}
			ps.AddCycle(c)
		}
		p := roundTrip(t, ps.GPUTime())
		var tot int64
		var overflow *profile.Sample
		for _, s := range p.Sample {
			tot += s.Value[1]
			if s.Location[0].Line[0].Function.Name == overflowFrame.name {
				overflow = s
			}
		}
		if tot != want {
			t.Errorf("%+v: total %d ns, want %d", o, tot, want)
		}
		if overflow == nil || ps.Folded() == 0 {
			t.Fatalf("%+v: no overflow sample (folded %d)", o, ps.Folded())
		}
		if len(p.Sample) > 3 || len(p.Function) > 8 {
			t.Errorf("%+v: %d samples %d functions: not bounded", o, len(p.Sample), len(p.Function))
		}
		if !strings.Contains(strings.Join(p.Comments, " "), "folded") {
			t.Errorf("comments %q", p.Comments)
		}
	}
}

func TestWriteFile(t *testing.T) {
	ps := New(Options{})
	ps.AddCycle(exporttest.Cycle(pid, tid, 1, 0))
	path := filepath.Join(t.TempDir(), GPUTimeFile)
	if err := WriteFile(ps.GPUTime(), path); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(ps.GPUTime(), filepath.Join(t.TempDir(), "missing", "x.pb.gz")); err == nil ||
		!strings.Contains(err.Error(), "create profile") {
		t.Errorf("writing into a missing directory: %v", err)
	}
}

func BenchmarkAddCycle(b *testing.B) {
	cs := cycles(64)
	ps := New(Options{})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ps.AddCycle(cs[i%len(cs)])
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
}
