package phase

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestPresets(t *testing.T) {
	want := []string{"hf-assisted", "sglang-eagle", "vllm-eagle"}
	if got := Presets(); !slices.Equal(got, want) {
		t.Fatalf("Presets() = %v, want %v", got, want)
	}
	for _, n := range want {
		p, err := LoadPreset(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if p.Name != n || p.Description == "" || p.Cycle == nil || p.Cycle.StartPhase == "" || p.Process == nil && n != "hf-assisted" {
			t.Errorf("%s: incomplete preset %+v", n, p)
		}
		if len(p.Py310Rules) == 0 {
			t.Errorf("%s: no py310_rules", n)
		}
		if p.Phases[len(p.Phases)-1] != Other {
			t.Errorf("%s: phases %v do not end with other", n, p.Phases)
		}
		for _, r := range slices.Concat(p.Rules, p.Py310Rules) {
			if r.File == "" {
				t.Errorf("%s: rule %q has no effective file regex", n, r.Phase)
			}
		}
	}
}

func TestPresetPhases(t *testing.T) {
	for preset, want := range map[string][]string{
		"sglang-eagle": {"spec.draft", "spec.verify", "spec.accept", "spec.draft_extend", "spec.cycle_other", "spec.prefill",
			"sched.result", "sched.metrics", "sched.batch", "sched.recv", "sched.run_other", "sched.loop", "other"},
		"vllm-eagle": {"spec.target_fwd", "spec.logits", "spec.accept", "spec.sample_other", "spec.draft", "spec.bookkeep",
			"spec.prepare", "spec.output", "step_other", "loop", "other"},
		"hf-assisted": {"spec.draft", "spec.verify", "spec.accept", "spec.kv_rollback", "spec.strategy", "spec.cycle_other", "other"},
	} {
		p, err := LoadPreset(preset)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.Phases, want) {
			t.Errorf("%s: phases %v, want %v", preset, p.Phases, want)
		}
	}
}

func TestUnknownPreset(t *testing.T) {
	for _, n := range []string{"sglang", "", "../presets/sglang-eagle", "sglang-eagle.yaml"} {
		_, err := LoadPreset(n)
		if !errors.Is(err, ErrUnknownPreset) {
			t.Fatalf("LoadPreset(%q) = %v, want ErrUnknownPreset", n, err)
		}
		for _, s := range []string{"unknown preset", "hf-assisted, sglang-eagle, vllm-eagle"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("LoadPreset(%q): %q lacks %q", n, err, s)
			}
		}
	}
}

func writeRules(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// rulesFileErrors are rules files with one mistake each and what their
// error must say; FuzzLoadRules starts from them.
var rulesFileErrors = []struct {
	name, body string
	want       []string // substrings of the error
}{
	{"syntax error", "rules:\n  - {phase: x, qualname: a\n",
		[]string{"rules file ", "rules.yaml: line 3, column 1: did not find expected ',' or '}' (while parsing a flow mapping that begins at line 2, column 5): fix the YAML"}},
	{"bad tab indentation", "rules:\n\t- phase: x\n",
		[]string{"line 2", "fix the YAML"}},
	{"unknown field in a rule", "rules:\n  - phase: x\n    qualnme: 'a'\n",
		[]string{"line 3, column 5: field qualnme not found", "fix the YAML"}},
	{"unknown top-level field", "rule:\n  - phase: x\n",
		[]string{"line 1, column 1: field rule not found"}},
	{"wrong type", "rules: 3\n", []string{"line 1", "fix the YAML"}},
	{"empty file", "# nothing\n", []string{"the file is empty"}},
	{"no rules", "description: x\n", []string{"no rules: add rules, or extends"}},
	{"bad regex", "rules:\n  - phase: x\n    qualname: a\n  - phase: verify\n    qualname: '('\n",
		[]string{`rules.yaml: rule 2 (phase "verify", line 4): bad qualname regex "(": error parsing regexp`, "fix the regular expression"}},
	{"bad file regex", "rules:\n  - {phase: x, name: a, file: '[z-a]'}\n",
		[]string{`rule 1 (phase "x", line 2): bad file regex "[z-a]"`}},
	{"bad py310 rule regex", "rules:\n  - {phase: x, qualname: a}\npy310_rules:\n  - {phase: x, name: '*'}\n",
		[]string{`py310 rule 1 (phase "x", line 4): bad name regex "*"`}},
	{"bad default file regex", "file_regex: '('\nrules:\n  - {phase: x, qualname: a}\n",
		[]string{`rule 1 (phase "x", line 3): bad file regex "("`}},
	{"unknown extends", "extends: sglang\nrules:\n  - {phase: x, qualname: a}\n",
		[]string{`extends: unknown preset "sglang"`, "hf-assisted, sglang-eagle, vllm-eagle", "fix extends"}},
	{"empty phase name", "rules:\n  - {phase: '', qualname: a}\n",
		[]string{`rule 1 (phase "", line 2): empty phase name`}},
	{"missing phase", "rules:\n  - {qualname: a}\n",
		[]string{`rule 1 (phase "", line 2): empty phase name`}},
	{"reserved phase other", "rules:\n  - {phase: other, qualname: a}\n",
		[]string{`phase "other" is reserved`}},
	{"rule selects nothing", "rules:\n  - {phase: x}\n",
		[]string{`rule 1 (phase "x", line 2): selects nothing`}},
	{"phase not listed", "phases: [spec.verify]\nrules:\n  - {phase: spec.verfy, qualname: a}\n",
		[]string{`phase "spec.verfy" is not in phases [spec.verify, other]`, "add it to phases or fix the name"}},
	{"phase listed twice", "phases: [a, a]\nrules:\n  - {phase: a, qualname: a}\n",
		[]string{`phase "a" is listed twice`}},
	{"negative first_line", "rules:\n  - {phase: x, name: a, first_line: -3}\n",
		[]string{"first_line -3 is negative"}},
	{"requires_below without fallback",
		"rules:\n  - {phase: v, qualname: '^A\\.f$', requires_below: '^M$'}\n  - {phase: o, qualname: '^A\\.g$'}\n",
		[]string{`rule 1 (phase "v", line 2): requires_below needs a fallback`, "same qualname, name, file and first_line"}},
	{"requires_below fallback with other file",
		"rules:\n  - {phase: v, qualname: '^A\\.f$', requires_below: '^M$'}\n  - {phase: o, qualname: '^A\\.f$', file: 'x'}\n",
		[]string{"requires_below needs a fallback"}},
	{"requires_below after its fallback",
		"rules:\n  - {phase: o, qualname: '^A\\.f$'}\n  - {phase: v, qualname: '^A\\.f$', requires_below: '^M$'}\n",
		[]string{`rule 2 (phase "v", line 3): never applies`, `rule 1 (phase "o", line 2) matches the same frames first`}},
	{"two requires_below patterns",
		"rules:\n  - {phase: v, qualname: '^A$', requires_below: '^M$'}\n  - {phase: o, qualname: '^A$'}\n" +
			"  - {phase: w, qualname: '^B$', requires_below: '^N$'}\n  - {phase: o, qualname: '^B$'}\n",
		[]string{`rule 3 (phase "w", line 4): requires_below "^N$" differs from "^M$" of`, "only one requires_below pattern"}},
	{"bad requires_below regex",
		"rules:\n  - {phase: v, qualname: '^A$', requires_below: '(('}\n  - {phase: o, qualname: '^A$'}\n",
		[]string{`bad requires_below regex "(("`}},
	{"requires_below restriction in an extension",
		"extends: hf-assisted\nrules:\n  - {phase: spec.verify, qualname: '^Mine\\.run$', requires_below: '^Module\\._call_impl$'}\n  - {phase: spec.cycle_other, qualname: '^Mine\\.run$'}\n",
		[]string{`differs from "^Module\\._(wrapped_)?call_impl$" of`}},
	{"cycle start phase unknown", "cycle: {qualname: '^A\\.run$', start_phase: drft}\nrules:\n  - {phase: draft, qualname: a}\n",
		[]string{`cycle: start_phase "drft" is not in phases`}},
	{"cycle without start phase", "cycle: {qualname: '^A\\.run$'}\nrules:\n  - {phase: draft, qualname: a}\n",
		[]string{"cycle: empty start_phase: name the phase that begins a cycle"}},
	{"cycle without function", "cycle: {start_phase: draft}\nrules:\n  - {phase: draft, qualname: a}\n",
		[]string{"cycle: no qualname or name"}},
	{"bad process regex", "process: {cmdline: '(('}\nrules:\n  - {phase: draft, qualname: a}\n",
		[]string{`process: bad cmdline regex "(("`}},
	{"multi-line scalar in a YAML error", "rules: |\n  a\n  b\n",
		[]string{"line 1, column 8: cannot construct !!str `a\\nb\\n` into []phase.Rule"}},
	{"long scalar in a YAML error", "rules: " + strings.Repeat("a", 1000) + "\n",
		[]string{"line 1, column 8: cannot construct !!str `aaaa", "...` into []phase.Rule: fix the YAML"}},
	{"long unknown field", "rules:\n  - {phase: x, qualname: a, " + strings.Repeat("k", 1000) + ": 1}\n",
		[]string{"line 2, column 29: field kkkk", "k…: fix the YAML"}},
	{"phase name with a newline", "rules:\n  - {phase: \"a\\nb\", qualname: a}\n",
		[]string{`phase "a\nb" has a control character`}},
	{"phase name too long", "rules:\n  - {phase: " + strings.Repeat("p", MaxPhaseNameBytes+1) + ", qualname: a}\n",
		[]string{"phases entry 1 is 257 bytes, longer than 256"}},
	{"second document", "rules:\n  - {phase: x, qualname: a}\n---\nrules: []\n",
		[]string{"a second YAML document at line 3", "remove the '---'"}},
	{"file too large", strings.Repeat("#", MaxRulesFileBytes+1),
		[]string{"rules.yaml: larger than 256 KiB"}},
	{"nesting too deep", "rules:\n  - phase: x\n    qualname: " + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + "\n",
		[]string{"rules.yaml: nesting deeper than 16 levels at line 3", "simplify it"}},
	{"too many rules", "rules:\n" + strings.Repeat("  - {phase: x, qualname: a}\n", MaxRules+1),
		[]string{"rules.yaml: rules has 1001 entries at line 2, more than 1000"}},
	{"too many py310 rules", "rules: [{phase: x, qualname: a}]\npy310_rules:\n" + strings.Repeat("  - {phase: x, name: a}\n", MaxRules+1),
		[]string{"rules.yaml: py310_rules has 1001 entries at line 3, more than 1000"}},
	{"too many phases", "phases: [" + strings.Repeat("p,", MaxPhases) + "x]\nrules: [{phase: x, qualname: a}]\n",
		[]string{"rules.yaml: phases has 1001 entries at line 1, more than 1000"}},
	{"regex too long", "rules:\n  - {phase: x, qualname: '" + strings.Repeat("a", MaxRegexBytes+1) + "'}\n",
		[]string{`rule 1 (phase "x", line 2): qualname regex is 1025 bytes, longer than 1024`}},
	{"regex program too large", "rules:\n  - {phase: x, name: '" + strings.Repeat(`\pL{1000}`, 11) + "'}\n",
		[]string{`rule 1 (phase "x", line 2): name regex compiles to 11002 instructions, more than 10000`, "smaller repetition counts"}},
	{"regexes too large together", "rules:\n" + strings.Repeat("  - {phase: x, qualname: '\\pL{1000}\\pL{1000}\\pL{1000}'}\n", 100),
		[]string{`rule 34 (phase "x", line 35): qualname regex takes the preset's regexes past 100000 compiled instructions in all`}},
}

func TestRulesFileErrors(t *testing.T) {
	for _, c := range rulesFileErrors {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadRulesFile(writeRules(t, c.body))
			if err == nil {
				t.Fatal("no error")
			}
			for _, s := range c.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestRulesFileMissing(t *testing.T) {
	_, err := LoadRulesFile(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "rules file ") {
		t.Fatalf("got %v", err)
	}
}

// A qualname regex that cannot be turned into a co_name regex is reported
// when compiling for 3.10, naming the rule and the fix.
func TestRulesFilePy310Underivable(t *testing.T) {
	p, err := LoadRulesFile(writeRules(t, "rules:\n  - {phase: x, qualname: '\\bverify$'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Compile(false); err != nil {
		t.Fatal(err)
	}
	_, err = p.Compile(true)
	for _, s := range []string{`rule 1 (phase "x", line 2): qualname regex "\\bverify$" cannot be used on Python 3.10`, "add a name regex"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("error %v lacks %q", err, s)
		}
	}
	// An explicit name makes it usable.
	p, err = LoadRulesFile(writeRules(t, "rules:\n  - {phase: x, qualname: '\\bverify$', name: '^verify$'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Compile(true); err != nil {
		t.Fatal(err)
	}
}

func TestRulesFileStandalone(t *testing.T) {
	p, err := LoadRulesFile(writeRules(t, `
description: my server
process: {cmdline: '^myserver'}
file_regex: 'myapp/'
cycle: {qualname: '^Engine\.step$', start_phase: draft}
rules:
  - {phase: draft, qualname: '^Engine\.draft$'}
  - {phase: verify, qualname: '^Engine\.verify$'}
  - {phase: draft, name: '^propose$'}
`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "rules" || !slices.Equal(p.Phases, []string{"draft", "verify", "other"}) {
		t.Errorf("name %q phases %v", p.Name, p.Phases)
	}
	for _, py310 := range []bool{false, true} {
		m, err := p.Compile(py310)
		if err != nil {
			t.Fatal(err)
		}
		mk := frameAt("/srv/myapp/")
		stack := []Frame{mk("Engine.verify", "engine.py"), mk("Engine.step", "engine.py")}
		if py310 {
			stack = as310(stack)
		}
		r := m.Resolve(stack)
		if m.PhaseName(r.Phase) != "verify" || r.Frame != 0 || r.CycleFrame != 1 {
			t.Errorf("py310=%v: got %+v", py310, r)
		}
		// Outside file_regex nothing matches.
		if r := m.Resolve([]Frame{frameAt("/srv/other/")("Engine.verify", "engine.py")}); r.Phase != 0 {
			t.Errorf("py310=%v: matched outside file_regex: %+v", py310, r)
		}
		if !m.MatchProcess("myserver --port 1") || m.MatchProcess("python x") {
			t.Error("MatchProcess")
		}
	}
}

func TestRulesFileExtends(t *testing.T) {
	p, err := LoadRulesFile(writeRules(t, `
name: tweaks
extends: sglang-eagle
file_regex: 'myfork/'
rules:
  # Count the acceptance as part of verify, and label my own hook.
  - {phase: spec.verify, qualname: '^EagleVerifyInput\.verify$', file: 'sglang/srt/'}
  - {phase: mine, qualname: '^Hook\.run$'}
`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "tweaks" || p.Extends != "sglang-eagle" || p.Cycle == nil || p.Process == nil || p.Process.Cmdline != "^sglang::scheduler" {
		t.Fatalf("inherited fields missing: %+v", p)
	}
	base, _ := LoadPreset("sglang-eagle")
	wantPhases := append(slices.Clone(base.Phases[:len(base.Phases)-1]), "mine", Other)
	if !slices.Equal(p.Phases, wantPhases) {
		t.Errorf("phases %v, want %v", p.Phases, wantPhases)
	}
	if len(p.Rules) != len(base.Rules)+2 || len(p.Py310Rules) != len(base.Py310Rules)+2 {
		t.Errorf("rules %d/%d, want %d/%d", len(p.Rules), len(p.Py310Rules), len(base.Rules)+2, len(base.Py310Rules)+2)
	}
	// The user's default file regex applies to the user's rules only.
	if p.Rules[1].File != "myfork/" || p.Rules[2].File != "sglang/srt/" {
		t.Errorf("files %q %q", p.Rules[1].File, p.Rules[2].File)
	}
	accept := []Frame{
		sg("EagleVerifyInput.verify", "speculative/eagle_info.py"),
		sg("EAGLEWorker.verify", "speculative/eagle_worker.py"),
		sgV1Cycle,
	}
	hook := []Frame{frameAt("/srv/myfork/")("Hook.run", "hook.py"), sgV1Cycle}
	for _, py310 := range []bool{false, true} {
		m, err := p.Compile(py310)
		if err != nil {
			t.Fatal(err)
		}
		a, h := accept, hook
		want := "spec.verify"
		if py310 {
			a, h = as310(a), as310(h)
			// The user rule's qualname becomes the name `verify` in
			// sglang/srt/, in front of the preset's 3.10 rules.
		}
		if got := m.PhaseName(m.Resolve(a).Phase); got != want {
			t.Errorf("py310=%v: accept frame gives %s, want %s", py310, got, want)
		}
		if got := m.PhaseName(m.Resolve(h).Phase); got != "mine" {
			t.Errorf("py310=%v: hook gives %s, want mine", py310, got)
		}
		// The rest of the preset still works.
		if got := m.PhaseName(m.Resolve(cat(st(sgTpFwd, sg("EAGLEWorker.verify", "speculative/eagle_worker.py"), sgV1Cycle), sgOuterV1)).Phase); got != "spec.verify" {
			t.Errorf("py310=%v: verify gives %s", py310, got)
		}
	}
}

// A rules file can replace the preset's cycle and list its phases.
func TestRulesFileExtendsOverrides(t *testing.T) {
	p, err := LoadRulesFile(writeRules(t, `
extends: hf-assisted
phases: [spec.verify, spec.draft]
cycle: {qualname: '^MyLoop\.step$', start_phase: spec.verify}
rules:
  - {phase: spec.draft, qualname: '^MyDrafter\.propose$', file: 'myapp/'}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"spec.verify", "spec.draft", "spec.accept", "spec.kv_rollback", "spec.strategy", "spec.cycle_other", "other"}
	if !slices.Equal(p.Phases, want) {
		t.Errorf("phases %v, want %v", p.Phases, want)
	}
	m, err := p.Compile(false)
	if err != nil {
		t.Fatal(err)
	}
	if m.PhaseName(m.CycleStartPhase()) != "spec.verify" {
		t.Errorf("start phase %s", m.PhaseName(m.CycleStartPhase()))
	}
	r := m.Resolve([]Frame{frameAt("/srv/myapp/")("MyDrafter.propose", "d.py"), hf("MyLoop.step", "generation/x.py")})
	if m.PhaseName(r.Phase) != "spec.draft" || r.CycleFrame != 1 {
		t.Errorf("got %+v", r)
	}
}

// Compile validates presets built in code, too.
func TestCompileValidates(t *testing.T) {
	p := &Preset{Name: "code", Rules: []Rule{
		{Phase: "v", Match: Match{Qualname: `^A$`}, RequiresBelow: `^M$`},
	}}
	_, err := p.Compile(false)
	if err == nil || !strings.Contains(err.Error(), `preset "code": rule 1 (phase "v"): requires_below needs a fallback`) {
		t.Fatalf("got %v", err)
	}
	p.Rules = append(p.Rules, Rule{Phase: "o", Match: Match{Qualname: `^A$`}})
	m, err := p.Compile(false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Phases(), []string{"v", "o", "other"}) {
		t.Errorf("phases %v", m.Phases())
	}
	a, marker := Frame{Qualname: "A", Name: "A"}, Frame{Qualname: "M", Name: "M"}
	if got := m.PhaseName(m.Resolve([]Frame{marker, a}).Phase); got != "v" {
		t.Errorf("with marker: %s", got)
	}
	if got := m.PhaseName(m.Resolve([]Frame{a, marker}).Phase); got != "o" {
		t.Errorf("marker above: %s", got)
	}
	c := m.Classify(a)
	if m.PhaseName(c.Phase) != "o" || m.PhaseName(c.AltPhase) != "v" || c.Marker || !m.Classify(marker).Marker {
		t.Errorf("Classify: %+v", c)
	}
}

// A qualname regex within the limits whose derived co_name regex is not
// is refused when compiling for 3.10, with the way out.
func TestRulesFilePy310DerivedTooLong(t *testing.T) {
	p, err := LoadRulesFile(writeRules(t, "rules:\n  - {phase: x, qualname: '"+strings.Repeat("a", MaxRegexBytes-4)+"'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Compile(false); err != nil {
		t.Fatal(err)
	}
	_, err = p.Compile(true)
	for _, s := range []string{"cannot be used on Python 3.10", "its co_name regex would be longer than 1024 bytes", "add a name regex"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("error %v lacks %q", err, s)
		}
	}
}
