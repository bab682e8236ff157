package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// maxFlagHelp bounds one flag's help line: a sentence that fits a wide
// terminal line once cobra has put the flag's name and default around it.
const maxFlagHelp = 200

// notInHelp are the marks of measurement history: benchmark sections,
// machines and measured costs belong in docs/overhead.md, not in --help.
var notInHelp = regexp.MustCompile(`§|H200|h200\.md|bench/gpu/results|µs|[0-9] ?%`)

// sentenceBreak finds the end of one sentence followed by another.
var sentenceBreak = regexp.MustCompile(`[.;!?] +[A-Za-z]|[.;!?]$`)

// TestFlagHelpIsOneSentence checks every flag of every subcommand: its help is
// one short sentence, with no benchmark figures.
func TestFlagHelpIsOneSentence(t *testing.T) {
	for _, c := range []*cobra.Command{newRunCmd(), newAttachCmd(), newPresetsCmd(), newDiffCmd(), newRulesSuggestCmd()} {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			u := f.Usage
			one := strings.NewReplacer("e.g.", "eg", "i.e.", "ie").Replace(u)
			switch {
			case strings.TrimSpace(u) == "":
				t.Errorf("%s --%s: no help", c.Name(), f.Name)
			case len(u) > maxFlagHelp:
				t.Errorf("%s --%s: help is %d bytes, more than %d: %q", c.Name(), f.Name, len(u), maxFlagHelp, u)
			case sentenceBreak.MatchString(one):
				t.Errorf("%s --%s: help is more than one sentence (or ends in a full stop): %q", c.Name(), f.Name, u)
			case notInHelp.MatchString(u):
				t.Errorf("%s --%s: help carries measurement history (%q): move it to docs/overhead.md: %q", c.Name(), f.Name, notInHelp.FindString(u), u)
			}
		})
	}
}

// TestCommandHelpIsShort checks the subcommands' one-line descriptions.
func TestCommandHelpIsShort(t *testing.T) {
	for _, c := range []*cobra.Command{newRunCmd(), newAttachCmd(), newPresetsCmd(), newDiffCmd(), newRulesSuggestCmd()} {
		if c.Short == "" || len(c.Short) > 100 || notInHelp.MatchString(c.Short) {
			t.Errorf("%s: Short must be one line of at most 100 bytes without benchmark figures: %q", c.Name(), c.Short)
		}
	}
}
