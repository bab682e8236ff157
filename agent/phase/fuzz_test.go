package phase

import (
	"os"
	"path/filepath"
	"regexp"
	"regexp/syntax"
	"runtime"
	"strings"
	"testing"
)

// maxLoadAlloc bounds what loading and compiling any rules file may
// allocate: the node tree of the largest file allowed, and the regexes of
// a preset at the instruction budget, compiled for both Python versions.
const maxLoadAlloc = 256 << 20

// FuzzLoadRules loads arbitrary rules files. Each either fails with a
// one-line error naming the file or gives a preset that compiles for
// Python 3.11+ (and for 3.10, or fails there naming 3.10), whose matcher
// gives in-range phases and classifies single frames as it resolves them.
func FuzzLoadRules(f *testing.F) {
	for _, n := range Presets() {
		b, err := presetFS.ReadFile("presets/" + n + ".yaml")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	files, err := filepath.Glob("../../testdata/workloads/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range append(files, "../../bench/gpu/spec_loop.yaml") {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, c := range rulesFileErrors {
		if len(c.body) < 4096 {
			f.Add([]byte(c.body))
		}
	}
	for _, c := range hostileRules {
		if len(c.body) < 4096 {
			f.Add([]byte(c.body))
		}
	}
	frames := []Frame{
		{Qualname: "EAGLEWorker.verify", Name: "verify", Filename: "/x/sglang/srt/speculative/eagle_worker.py", FirstLine: 120},
		{Qualname: "GPUModelRunner.execute_model", Name: "execute_model", Filename: "/x/vllm/v1/worker/gpu_model_runner.py", FirstLine: 1},
		{Qualname: "Module._call_impl", Name: "_call_impl", Filename: "/x/torch/nn/modules/module.py", FirstLine: 1},
		{Qualname: "a", Name: "a", Filename: "a", FirstLine: 0},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		p, err := LoadRules(data, "fuzz.yaml")
		if err != nil {
			if s := err.Error(); !strings.HasPrefix(s, "rules file fuzz.yaml: ") || strings.Contains(s, "\n") {
				t.Fatalf("error %q: want one line naming the file", s)
			}
			return
		}
		m, err := p.Compile(false)
		if err != nil {
			t.Fatalf("loaded, but does not compile: %v", err)
		}
		m310, err := p.Compile(true)
		if err != nil && !strings.Contains(err.Error(), "Python 3.10") {
			t.Fatalf("loaded, but does not compile for 3.10: %v", err)
		}
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > maxLoadAlloc {
			t.Fatalf("%d bytes of rules took %d MiB", len(data), n>>20)
		}
		for _, m := range []*Matcher{m, m310} {
			if m == nil {
				continue
			}
			if m.NumPhases() != len(m.Phases()) || m.PhaseName(0) != Other {
				t.Fatalf("phases %v, %d ids", m.Phases(), m.NumPhases())
			}
			for _, fr := range frames {
				if m.Py310() {
					fr.Qualname = fr.Name
				}
				r, c := m.Resolve([]Frame{fr}), m.Classify(fr)
				if int(r.Phase) >= m.NumPhases() || r.Phase != c.Phase || (r.Frame >= 0) != matchesAny(m, fr) || (r.CycleFrame == 0) != c.Cycle {
					t.Fatalf("frame %+v: Resolve %+v, Classify %+v", fr, r, c)
				}
			}
		}
	})
}

// matchesAny reports whether a rule without requires_below matches f.
func matchesAny(m *Matcher, f Frame) bool {
	for i := range m.rules {
		if !m.rules[i].below && m.rules[i].match(f) {
			return true
		}
	}
	return false
}

// FuzzDeriveNameRegex derives co_name regexes from arbitrary qualname
// regexes. A derived regex compiles within the limits, and matches the
// last component of every qualname that the qualname regex matches up to
// the end of its last component (the documented approximation).
func FuzzDeriveNameRegex(f *testing.F) {
	for _, s := range []struct{ q, qual string }{
		{`^EAGLEWorker\.verify$`, "EAGLEWorker.verify"},
		{`^(EagleVerifyInput(V2Mixin)?)\.(verify|sample)$`, "EagleVerifyInputV2Mixin.sample"},
		{`\.forward_batch_generation$`, "TpWorker.forward_batch_generation"},
		{`^GPUModelRunner\.sample_tokens\.<locals>\.propose_draft_token_ids$`, "GPUModelRunner.sample_tokens.<locals>.propose_draft_token_ids"},
		{`^\w*Generator\w*\.(get_candidates|_generate_candidates)$`, "AssistedCandidateGenerator.get_candidates"},
		{`^Module\._(wrapped_)?call_impl$`, "Module._wrapped_call_impl"},
		{`^Scheduler\.event_loop_`, "Scheduler.event_loop_overlap"},
		{`(?i)^foo\.Bar$`, "FOO.bar"},
		{`^(?:a|b\.a)+$`, "ab.a"},
		{`^(a\.b){2}$`, "a.ba.b"},
		{`^a[.b]b$`, "a.b"},
		{`\bverify$`, "x.verify"},
	} {
		f.Add(s.q, s.qual)
	}
	f.Fuzz(func(t *testing.T, q, qual string) {
		re, err := syntax.Parse(q, syntax.Perl)
		if err != nil || len(q) > MaxRegexBytes {
			return
		}
		d, err := deriveNameRegex(q)
		if err != nil {
			return
		}
		var rs regexes
		n, err := rs.compile("derived", "name", d)
		if err != nil {
			t.Fatalf("%q derived %q: %v", q, d, err)
		}
		if strings.Contains(qual, "\n") || tooLarge(re) {
			return // qualnames are one line ((?m) anchors differ on more); String is slow on re
		}
		// A match of q that the rest of the last component may follow:
		// q[^.]*$, built on the parsed q (q may end inside \Q).
		notDot, err := syntax.Parse(`[^.]*$`, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		toEnd := regexp.MustCompile((&syntax.Regexp{Op: syntax.OpConcat, Sub: []*syntax.Regexp{re, notDot}}).String())
		if last := qual[strings.LastIndexByte(qual, '.')+1:]; toEnd.MatchString(qual) && !n.MatchString(last) {
			t.Fatalf("%q matches qualname %q, but its derived %q does not match %q", q, qual, d, last)
		}
	})
}
