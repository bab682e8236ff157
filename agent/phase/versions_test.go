package phase

import (
	"strings"
	"testing"
)

func TestCheckedAgainstCovers(t *testing.T) {
	c := &CheckedAgainst{Distribution: "sglang", Versions: []string{"0.4..0.5", "0.6.2", "1.2.3..1.3.0"}}
	for _, tc := range []struct {
		v    string
		want bool
	}{
		{"0.4", true}, {"0.4.0", true}, {"0.3.9", false}, {"0.5.9", true}, {"0.5", true},
		{"0.6", false}, {"0.6.2", true}, {"0.6.2.1", true}, {"0.6.3", false}, {"0.6.1", false},
		{"1.2.3", true}, {"1.2.2", false}, {"1.3.0", true}, {"1.3.0.1", true}, {"1.3.1", false},
		// Pre, post, dev and local parts are not compared.
		{"0.5.0rc1", true}, {"0.5.0.post2", true}, {"0.5.0.dev3+g1a2b", true}, {"0.5.0+cu124", true},
		{"0.6.0rc1", false}, {"v0.4.1", true},
		// An epoch other than 0 is outside.
		{"1!0.5.0", false}, {"0!0.5.0", true},
	} {
		got, err := c.Covers(tc.v)
		if err != nil || got != tc.want {
			t.Errorf("Covers(%q) = %v, %v; want %v", tc.v, got, err, tc.want)
		}
	}
	for _, v := range []string{"", "abc", "0.5.x", "0..5"} {
		if _, err := c.Covers(v); err == nil {
			t.Errorf("Covers(%q): no error", v)
		}
	}
}

func TestCheckedAgainstErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"checked_against: {versions: ['1.0']}", "no distribution"},
		{"checked_against: {distribution: 'a b', versions: ['1.0']}", `distribution "a b"`},
		{"checked_against: {distribution: x}", "no versions"},
		{"checked_against: {distribution: x, versions: ['1.0', '1.0rc1']}", `versions entry 2 "1.0rc1": not a release`},
		{"checked_against: {distribution: x, versions: ['0.5..0.4']}", `versions entry 1 "0.5..0.4": the range begins after it ends`},
		{"checked_against: {distribution: x, versions: ['0.4..']}", `versions entry 1 "0.4..": the range's end`},
		{"checked_against: {distribution: x, versions: ['0.4..0.5'], extra: 1}", "extra"},
	} {
		_, err := LoadRules([]byte(tc.yaml+"\nrules: [{phase: a, qualname: '^f$'}]\n"), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.yaml, err, tc.want)
		}
	}
}

func TestCheckedAgainstPresets(t *testing.T) {
	want := map[string]string{"sglang-eagle": "sglang", "vllm-eagle": "vllm", "hf-assisted": "transformers"}
	for _, name := range Presets() {
		p, err := LoadPreset(name)
		if err != nil {
			t.Fatal(err)
		}
		if p.CheckedAgainst == nil || p.CheckedAgainst.Distribution != want[name] {
			t.Errorf("preset %s: checked_against %+v, want distribution %q", name, p.CheckedAgainst, want[name])
		}
	}
	// A rules file extending a preset inherits it, or replaces it.
	p, err := LoadRules([]byte("extends: sglang-eagle\nrules: [{phase: spec.draft, qualname: '^f$'}]\n"), "x.yaml")
	if err != nil || p.CheckedAgainst == nil || p.CheckedAgainst.Distribution != "sglang" {
		t.Fatalf("extends: %+v, %v", p, err)
	}
	p, err = LoadRules([]byte("extends: sglang-eagle\nchecked_against: {distribution: my-fork, versions: ['2.0']}\nrules: [{phase: spec.draft, qualname: '^f$'}]\n"), "x.yaml")
	if err != nil || p.CheckedAgainst.Distribution != "my-fork" {
		t.Fatalf("extends with its own: %+v, %v", p, err)
	}
}

func TestNormalizeDistribution(t *testing.T) {
	for in, want := range map[string]string{"SGLang": "sglang", "vllm_flash-attn": "vllm-flash-attn", "a.._b": "a-b", "Foo-": "foo"} {
		if got := NormalizeDistribution(in); got != want {
			t.Errorf("NormalizeDistribution(%q) = %q, want %q", in, got, want)
		}
	}
}
