package phase

import (
	"regexp"
	"strings"
	"testing"
)

func lastComp(q string) string { return q[strings.LastIndexByte(q, '.')+1:] }

// strs returns every string over alphabet of length ≤ n.
func strs(alphabet string, n int) []string {
	out := []string{""}
	prev := []string{""}
	for range n {
		var next []string
		for _, s := range prev {
			for _, c := range alphabet {
				next = append(next, s+string(c))
			}
		}
		out = append(out, next...)
		prev = next
	}
	return out
}

// The derived co_name regex matches exactly the last components of the
// qualnames the qualname regex matches (checked exhaustively over short
// strings).
func TestDeriveNameRegexExact(t *testing.T) {
	quals := strs("ab.", 7)
	names := strs("ab", 3)
	for _, q := range []string{
		`^a\.b$`, `\.b$`, `^(a|b)\.(ab|b)$|^aa$`, `^a*\.b+$`, `b$`, `^a.b$`, `^a[.b]b$`,
		`^(a\.)?b$`, `^(?:a|b\.a)+$`, `^a(\.b)*$`, `^(a\.b){2}$`, `^ab?$`, `(?:^a|b)\.a$`,
		`^a\.b{1,2}$`, `^(?:a\.|b)b$`, `^[^b]*a$`, `^a\.(?:)$`, `^a\.\.b$`,
	} {
		d, err := deriveNameRegex(q)
		if err != nil {
			t.Errorf("%s: %v", q, err)
			continue
		}
		qre, dre := regexp.MustCompile(q), regexp.MustCompile(d)
		want := map[string]bool{}
		for _, s := range quals {
			if qre.MatchString(s) {
				want[lastComp(s)] = true
			}
		}
		for _, n := range names {
			if got := dre.MatchString(n); got != want[n] {
				t.Errorf("%s → %s: name %q matched %v, want %v", q, d, n, got, want[n])
			}
		}
	}
}

func TestDeriveNameRegexPresets(t *testing.T) {
	for _, c := range []struct{ q, match, nomatch string }{
		{`^EAGLEWorker\.verify$`, "verify", "verify2"},
		{`^(EagleVerifyInput(V2Mixin)?)\.(verify|sample)$`, "sample", "draft"},
		{`\.forward_batch_generation$`, "forward_batch_generation", "x_forward_batch_generation"},
		{`^GPUModelRunner\.sample_tokens\.<locals>\.propose_draft_token_ids$`, "propose_draft_token_ids", "sample_tokens"},
		{`^\w*Generator\w*\.(get_candidates|_generate_candidates)$`, "_generate_candidates", "Generator"},
		{`^Module\._(wrapped_)?call_impl$`, "_wrapped_call_impl", "call_impl"},
		{`^build_tree_kernel_efficient$`, "build_tree_kernel_efficient", "build_tree"},
		// No trailing $: taken to run to the end of the last component.
		{`^Scheduler\.event_loop_`, "event_loop_overlap", "run_event_loop_x"},
		{`(?i)^foo\.Bar$`, "BAR", "baz"},
	} {
		d, err := deriveNameRegex(c.q)
		if err != nil {
			t.Errorf("%s: %v", c.q, err)
			continue
		}
		re := regexp.MustCompile(d)
		if !re.MatchString(c.match) || re.MatchString(c.nomatch) {
			t.Errorf("%s → %s: %q should match, %q should not", c.q, d, c.match, c.nomatch)
		}
	}
}

func TestDeriveNameRegexErrors(t *testing.T) {
	for _, q := range []string{`\bverify$`, `^a(?:^b)$`, `^a$b`, `[`,
		// Short patterns whose derived regex is large, or slow to print:
		// a dozen [^.] classes took String 120 ms (FuzzDeriveNameRegex).
		`^.c........`, "^" + strings.Repeat(".", 1000), strings.Repeat("(?:.|x)", 100)} {
		if d, err := deriveNameRegex(q); err == nil {
			t.Errorf("%s: derived %s, want an error", q, d)
		}
	}
}
