package phase

import (
	"fmt"
	"regexp"
	"regexp/syntax"
)

// Limits on what a rules file may ask of the YAML parser and the matcher.
// specprof runs next to the inference server, so a mistyped or hostile
// file must fail at once with an error saying what to change, not take the
// host's memory or CPU. Each limit is many times what a real rules file
// needs: the embedded presets are under 9 KB, nest 3 levels, have up to 62
// rules, 13 phases and patterns under 400 bytes that compile to under 400
// instructions, 1500 for all of a preset's rules.
const (
	// MaxRulesFileBytes bounds a rules file. The parsed node tree of the
	// worst file takes about 120 bytes per byte of it.
	MaxRulesFileBytes = 256 << 10
	// MaxDepth bounds the nesting of mappings and sequences.
	MaxDepth = 16
	// MaxAliasNodes bounds the nodes that aliases expand to, all together.
	MaxAliasNodes = 10000
	// MaxRules bounds rules, and py310_rules, of one file.
	MaxRules = 1000
	// MaxPhases bounds the phases list of one file.
	MaxPhases = 1000
	// MaxPhaseNameBytes bounds a phase name, a label in every profile.
	MaxPhaseNameBytes = 256
	// MaxRegexBytes bounds the length of one regular expression.
	MaxRegexBytes = 1024
	// MaxRegexInsts bounds the compiled size of one regular expression.
	// Go's RE2 engine matches in time linear in the input, but its memory
	// and time per byte grow with the program, which a short pattern can
	// make large (`\pL{1000}` is a thousand instructions).
	MaxRegexInsts = 10000
	// MaxTotalRegexInsts bounds the compiled size of all the regular
	// expressions of one preset, which the matcher keeps and runs on
	// every new code object. Loading and compiling a preset at this bound
	// allocates about 120 MB along the way.
	MaxTotalRegexInsts = 100000
)

// regexes compiles the regular expressions of one preset within the
// limits. The zero value is ready.
type regexes struct {
	insts int // compiled so far
}

// compile compiles re, which where (the rule) and what (the field) name.
func (rs *regexes) compile(where, what, re string) (*regexp.Regexp, error) {
	if len(re) > MaxRegexBytes {
		return nil, fmt.Errorf("%s: %s regex is %d bytes, longer than %d: match less, or split it over several rules", where, what, len(re), MaxRegexBytes)
	}
	n, err := regexSize(re)
	if err != nil {
		return nil, fmt.Errorf("%s: bad %s regex %q: %w: fix the regular expression", where, what, re, err)
	}
	if n > MaxRegexInsts {
		return nil, fmt.Errorf("%s: %s regex compiles to %d instructions, more than %d: use smaller repetition counts ({n}) or fewer alternatives", where, what, n, MaxRegexInsts)
	}
	if rs.insts += n; rs.insts > MaxTotalRegexInsts {
		return nil, fmt.Errorf("%s: %s regex takes the preset's regexes past %d compiled instructions in all: use fewer or simpler regexes (a file_regex counts once for every rule it applies to)", where, what, MaxTotalRegexInsts)
	}
	x, err := regexp.Compile(re)
	if err != nil {
		return nil, fmt.Errorf("%s: bad %s regex %q: %w: fix the regular expression", where, what, re, err)
	}
	return x, nil
}

// regexSize returns the number of instructions re compiles to, as
// regexp.Compile compiles it.
func regexSize(re string) (int, error) {
	x, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return 0, err
	}
	prog, err := syntax.Compile(x.Simplify())
	if err != nil {
		return 0, err
	}
	return len(prog.Inst), nil
}
