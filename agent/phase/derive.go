package phase

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"unicode"
)

// Python 3.10 code objects carry co_name but no co_qualname, so a qualname
// regex cannot be applied there. deriveNameRegex turns a qualname regex Q
// into a co_name regex N that matches exactly the last dotted components of
// the qualnames Q matches: N matches n iff some q matched by Q has
// lastComponent(q) == n. The class part is dropped, so the derived rule is
// broader than the original; that is why presets list explicit 3.10 rules
// with file regexes instead.
//
// One approximation: a branch without a trailing `$` is treated as if its
// match ran to the end of the last component (`^Scheduler\.event_loop_`
// gives `^event_loop_[^.]*$`), so nested `<locals>` functions under a
// matching method are not covered.

// maxBranches caps the anchor distribution below; real rules have a few.
const maxBranches = 256

// errAnchor reports an anchor or word boundary that is not at a branch edge.
var errAnchor = errors.New("anchor or word boundary in the middle of the pattern")

// deriveNameRegex returns the co_name regex for the qualname regex expr.
func deriveNameRegex(expr string) (string, error) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return "", err
	}
	bs, err := anchorBranches(re)
	if err != nil {
		return "", err
	}
	var alts []*syntax.Regexp
	for _, b := range bs {
		d, f, err := lastComponent(b.mid)
		if err != nil {
			return "", err
		}
		var parts []*syntax.Regexp
		if d != nil {
			parts = append(parts, d)
		}
		if f != nil {
			if b.begin {
				parts = append(parts, f)
			} else {
				// An unanchored start lets the match begin inside the
				// last component: any dot-free text may precede it.
				parts = append(parts, concat(notDotStar(), f))
			}
		}
		x := union(parts...)
		if x == nil {
			continue
		}
		if !b.end {
			x = concat(x, notDotStar())
		}
		alts = append(alts, x)
	}
	body := union(alts...)
	if body == nil {
		return "", errors.New("it matches no qualname")
	}
	whole := concat(&syntax.Regexp{Op: syntax.OpBeginText}, body, &syntax.Regexp{Op: syntax.OpEndText})
	// The tree shares subtrees, so printing it can take time quadratic in
	// the pattern: bound it before printing.
	if tooLarge(whole) {
		return "", fmt.Errorf("its co_name regex would be longer than %d bytes or too costly to print", MaxRegexBytes)
	}
	out := whole.String()
	if len(out) > MaxRegexBytes {
		return "", fmt.Errorf("its co_name regex would be %d bytes, longer than %d", len(out), MaxRegexBytes)
	}
	if _, err := regexp.Compile(out); err != nil {
		// Guards against a construction bug rather than user input.
		return "", fmt.Errorf("derived regex %q does not compile: %w", out, err)
	}
	return out, nil
}

// maxFoldRunes bounds the runes of the character classes of a derived
// regex, those that case folding applies to: syntax.Regexp.String calls
// unicode.SimpleFold on each of them, about a millisecond for a class of
// most of Unicode such as [^.]. It allows eight of those.
const maxFoldRunes = 8 * int('\U0001E943'-'A'+1)

// tooLarge reports whether re, its shared subtrees counted once per use,
// prints to more than MaxRegexBytes or has classes of more than
// maxFoldRunes runes. It stops as soon as it knows.
func tooLarge(re *syntax.Regexp) bool {
	size, runes := MaxRegexBytes, maxFoldRunes
	var walk func(*syntax.Regexp) bool
	walk = func(re *syntax.Regexp) bool {
		switch re.Op {
		case syntax.OpLiteral:
			size -= len(re.Rune)
		case syntax.OpCharClass:
			size -= 3 // at least [^x] or [xy]; one rune prints as a literal
			for i := 0; i+1 < len(re.Rune); i += 2 {
				// The range unicode.SimpleFold changes (regexp/syntax's minFold, maxFold).
				if lo, hi := max(re.Rune[i], 'A'), min(re.Rune[i+1], '\U0001E943'); lo <= hi {
					runes -= int(hi - lo + 1)
				}
			}
		default:
			size--
		}
		if size < 0 || runes < 0 {
			return true
		}
		for _, s := range re.Sub {
			if walk(s) {
				return true
			}
		}
		return false
	}
	return walk(re)
}

// branch is one top-level alternative with its edge anchors split off.
type branch struct {
	begin, end bool
	mid        *syntax.Regexp
}

// anchorBranches distributes alternations so that every `^` / `$` ends up
// at the edge of a branch; Go's parser factors `^a$|^b$` into `^(?:a$|b$)`.
func anchorBranches(re *syntax.Regexp) ([]branch, error) {
	switch re.Op {
	case syntax.OpAlternate:
		var out []branch
		for _, s := range re.Sub {
			bs, err := anchorBranches(s)
			if err != nil {
				return nil, err
			}
			out = append(out, bs...)
			if len(out) > maxBranches {
				return nil, errors.New("too many alternatives")
			}
		}
		return out, nil
	case syntax.OpCapture:
		return anchorBranches(re.Sub[0])
	case syntax.OpBeginText, syntax.OpBeginLine:
		return []branch{{begin: true, mid: empty()}}, nil
	case syntax.OpEndText, syntax.OpEndLine:
		return []branch{{end: true, mid: empty()}}, nil
	case syntax.OpConcat:
		n := len(re.Sub)
		if n == 0 {
			return []branch{{mid: empty()}}, nil
		}
		first, err := anchorBranches(re.Sub[0])
		if err != nil || n == 1 {
			return first, err
		}
		last, err := anchorBranches(re.Sub[n-1])
		if err != nil {
			return nil, err
		}
		var out []branch
		for _, f := range first {
			if f.end {
				return nil, errAnchor
			}
			for _, l := range last {
				if l.begin {
					return nil, errAnchor
				}
				subs := append([]*syntax.Regexp{f.mid}, re.Sub[1:n-1]...)
				subs = append(subs, l.mid)
				out = append(out, branch{begin: f.begin, end: l.end, mid: concat(subs...)})
				if len(out) > maxBranches {
					return nil, errors.New("too many alternatives")
				}
			}
		}
		return out, nil
	}
	return []branch{{mid: re}}, nil
}

// lastComponent returns, for the anchor-free regex re, d: the regex of the
// text after the last dot of every match that contains a dot, and f: the
// regex of the matches that contain no dot. nil stands for "no string".
func lastComponent(re *syntax.Regexp) (d, f *syntax.Regexp, err error) {
	switch re.Op {
	case syntax.OpNoMatch:
		return nil, nil, nil
	case syntax.OpEmptyMatch:
		return nil, empty(), nil
	case syntax.OpLiteral:
		for i := len(re.Rune) - 1; i >= 0; i-- {
			if re.Rune[i] == '.' {
				return lit(re.Rune[i+1:], re.Flags), nil, nil
			}
		}
		return nil, re, nil
	case syntax.OpCharClass:
		return classSplit(re.Rune)
	case syntax.OpAnyCharNotNL:
		return classSplit([]rune{0, '\n' - 1, '\n' + 1, unicode.MaxRune})
	case syntax.OpAnyChar:
		return classSplit([]rune{0, unicode.MaxRune})
	case syntax.OpCapture:
		return lastComponent(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		sd, sf, err := lastComponent(re.Sub[0])
		if err != nil {
			return nil, nil, err
		}
		return repeatSplit(re, sd, sf), repeatF(re, sf), nil
	case syntax.OpConcat:
		// A dotted match of x1…xn has its last dot in some xi, with every
		// later xj dot-free: d = ∪ d(xi)·f(xi+1)…f(xn), f = f(x1)…f(xn).
		ds := make([]*syntax.Regexp, len(re.Sub))
		fs := make([]*syntax.Regexp, len(re.Sub))
		for i, s := range re.Sub {
			if ds[i], fs[i], err = lastComponent(s); err != nil {
				return nil, nil, err
			}
		}
		var dAlts []*syntax.Regexp
		for i := range re.Sub {
			dAlts = append(dAlts, concat(append([]*syntax.Regexp{ds[i]}, fs[i+1:]...)...))
		}
		return union(dAlts...), concat(fs...), nil
	case syntax.OpAlternate:
		var dAlts, fAlts []*syntax.Regexp
		for _, s := range re.Sub {
			sd, sf, err := lastComponent(s)
			if err != nil {
				return nil, nil, err
			}
			dAlts, fAlts = append(dAlts, sd), append(fAlts, sf)
		}
		return union(dAlts...), union(fAlts...), nil
	}
	return nil, nil, errAnchor
}

// repeatF is the dot-free part of a repetition: the same repetition of f.
func repeatF(re, sf *syntax.Regexp) *syntax.Regexp {
	lo := 0
	switch re.Op {
	case syntax.OpPlus:
		lo = 1
	case syntax.OpRepeat:
		lo = re.Min
	}
	if sf == nil {
		if lo == 0 {
			return empty()
		}
		return nil
	}
	return &syntax.Regexp{Op: re.Op, Flags: re.Flags, Min: re.Min, Max: re.Max, Sub: []*syntax.Regexp{sf}}
}

// repeatSplit is the dotted part of a repetition: the last iteration that
// holds a dot, followed by dot-free iterations.
func repeatSplit(re, sd, sf *syntax.Regexp) *syntax.Regexp {
	if sd == nil {
		return nil
	}
	maxRest := -1 // unbounded
	switch re.Op {
	case syntax.OpQuest:
		maxRest = 0
	case syntax.OpRepeat:
		if re.Max == 0 {
			return nil
		}
		if re.Max > 0 {
			maxRest = re.Max - 1
		}
	}
	if sf == nil || maxRest == 0 {
		return sd
	}
	rest := &syntax.Regexp{Op: syntax.OpStar, Flags: re.Flags, Sub: []*syntax.Regexp{sf}}
	if maxRest > 0 {
		rest = &syntax.Regexp{Op: syntax.OpRepeat, Flags: re.Flags, Min: 0, Max: maxRest, Sub: []*syntax.Regexp{sf}}
	}
	return concat(sd, rest)
}

// classSplit splits a character class (pairs of inclusive ranges) into
// "matches the dot" (d = empty text after it) and the class without the dot.
func classSplit(ranges []rune) (d, f *syntax.Regexp, err error) {
	var out []rune
	hasDot := false
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		if lo <= '.' && '.' <= hi {
			hasDot = true
			if lo < '.' {
				out = append(out, lo, '.'-1)
			}
			if hi > '.' {
				out = append(out, '.'+1, hi)
			}
			continue
		}
		out = append(out, lo, hi)
	}
	if hasDot {
		d = empty()
	}
	if len(out) > 0 {
		f = &syntax.Regexp{Op: syntax.OpCharClass, Rune: out}
	}
	return d, f, nil
}

func empty() *syntax.Regexp { return &syntax.Regexp{Op: syntax.OpEmptyMatch} }

func lit(r []rune, flags syntax.Flags) *syntax.Regexp {
	if len(r) == 0 {
		return empty()
	}
	return &syntax.Regexp{Op: syntax.OpLiteral, Flags: flags, Rune: append([]rune(nil), r...)}
}

// notDotStar is `[^.]*`: any text inside one qualname component.
func notDotStar() *syntax.Regexp {
	_, f, _ := classSplit([]rune{0, unicode.MaxRune})
	return &syntax.Regexp{Op: syntax.OpStar, Sub: []*syntax.Regexp{f}}
}

// concat concatenates; any nil operand makes the whole language empty.
func concat(xs ...*syntax.Regexp) *syntax.Regexp {
	var subs []*syntax.Regexp
	for _, x := range xs {
		switch {
		case x == nil:
			return nil
		case x.Op == syntax.OpEmptyMatch:
		case x.Op == syntax.OpConcat:
			subs = append(subs, x.Sub...)
		default:
			subs = append(subs, x)
		}
	}
	switch len(subs) {
	case 0:
		return empty()
	case 1:
		return subs[0]
	}
	return &syntax.Regexp{Op: syntax.OpConcat, Sub: subs}
}

// union is the union; nil operands (empty languages) drop out.
func union(xs ...*syntax.Regexp) *syntax.Regexp {
	var subs []*syntax.Regexp
	for _, x := range xs {
		if x != nil {
			subs = append(subs, x)
		}
	}
	switch len(subs) {
	case 0:
		return nil
	case 1:
		return subs[0]
	}
	return &syntax.Regexp{Op: syntax.OpAlternate, Sub: subs}
}
