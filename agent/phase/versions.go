package phase

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// CheckedAgainst names the server distribution whose code a preset's rules
// were read from, and the versions of it they were checked against.
//
//	checked_against: {distribution: sglang, versions: ['0.4..0.5', '0.5.6']}
//
// A versions entry is a release, e.g. '0.5.6', or an inclusive range of
// releases 'A..B'. Releases are compared by their PEP 440 release segments
// only, each one as many segments deep as the entry gives: '0.5' covers
// 0.5, 0.5.0 and 0.5.9, and the range '0.4..0.5' covers 0.4 up to every
// 0.5.x. An installed version's pre-release, post-release, dev-release and
// local parts are not compared: 0.5.0rc1, 0.5.0.post2, 0.5.0.dev3+g1a2b and
// 0.5.0+cu124 all count as 0.5.0. A version with an epoch other than 0
// ('1!2.0') is outside every entry.
type CheckedAgainst struct {
	// Distribution is the installed distribution's name, as in its
	// *.dist-info directory and METADATA (PEP 503 names compare equal
	// whatever their case and runs of '-', '_' and '.').
	Distribution string `yaml:"distribution"`
	// Versions lists releases and inclusive ranges of releases.
	Versions []string `yaml:"versions"`
}

// Release is the release segment of a version, e.g. [0 5 6].
type Release []int

// String formats the release as "0.5.6".
func (r Release) String() string {
	s := make([]string, len(r))
	for i, v := range r {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ".")
}

// cmpPrefix compares v with r over r's segments (v padded with zeros).
func cmpPrefix(v, r Release) int {
	for i, x := range r {
		y := 0
		if i < len(v) {
			y = v[i]
		}
		switch {
		case y < x:
			return -1
		case y > x:
			return 1
		}
	}
	return 0
}

var (
	releaseRe = regexp.MustCompile(`^[0-9]{1,9}(\.[0-9]{1,9}){0,9}$`)
	// PEP 440's public and local version (normalized or not), loosely: the
	// release is what is compared; the rest only has to look like a
	// version.
	versionRe = regexp.MustCompile(`(?i)^v?(?:([0-9]+)!)?([0-9]{1,9}(?:\.[0-9]{1,9}){0,9})((?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview|post|rev|r|dev)[-_.]?[0-9]*)*)(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?$`)
	distRe    = regexp.MustCompile(`(?i)^([a-z0-9]|[a-z0-9][a-z0-9._-]{0,198}[a-z0-9])$`)
)

func parseRelease(s string) (Release, bool) {
	if !releaseRe.MatchString(s) {
		return nil, false
	}
	parts := strings.Split(s, ".")
	r := make(Release, len(parts))
	for i, p := range parts {
		r[i], _ = strconv.Atoi(p)
	}
	return r, true
}

// ParseVersion reads an installed version string (PEP 440): its release
// segment, and whether its epoch is other than 0.
func ParseVersion(s string) (rel Release, epoch bool, err error) {
	m := versionRe.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return nil, false, fmt.Errorf("version %q is not a PEP 440 version", trimQuote(s))
	}
	rel, _ = parseRelease(m[2])
	return rel, m[1] != "" && strings.Trim(m[1], "0") != "", nil
}

// NormalizeDistribution returns the PEP 503 normalized form of a
// distribution name: lower case, runs of '-', '_' and '.' as one '-'.
func NormalizeDistribution(name string) string {
	var b strings.Builder
	sep := false
	for _, c := range strings.ToLower(name) {
		if c == '-' || c == '_' || c == '.' {
			sep = true
			continue
		}
		if sep && b.Len() > 0 {
			b.WriteByte('-')
		}
		sep = false
		b.WriteRune(c)
	}
	return b.String()
}

// versionRange is one versions entry: lo..hi, or lo == hi.
type versionRange struct{ lo, hi Release }

// ranges parses the entries; where names the key in errors.
func (c *CheckedAgainst) ranges(where string) ([]versionRange, error) {
	var out []versionRange
	for i, e := range c.Versions {
		bad := func(why string) error {
			return fmt.Errorf("%s: versions entry %d %q: %s", where, i+1, trimQuote(e), why)
		}
		a, b, isRange := strings.Cut(strings.TrimSpace(e), "..")
		lo, ok := parseRelease(a)
		if !ok {
			return nil, bad("not a release such as '0.5.6' or a range such as '0.4..0.5' (release segments only: digits and dots, no rc/dev/post/local parts)")
		}
		hi := lo
		if isRange {
			if hi, ok = parseRelease(b); !ok {
				return nil, bad("the range's end is not a release such as '0.5' (digits and dots)")
			}
			if cmpPrefix(lo, hi) > 0 {
				return nil, bad("the range begins after it ends: write the lower release first")
			}
		}
		out = append(out, versionRange{lo, hi})
	}
	return out, nil
}

func (c *CheckedAgainst) validate(src string) error {
	where := src + ": checked_against"
	switch {
	case strings.TrimSpace(c.Distribution) == "":
		return fmt.Errorf("%s: no distribution: name the installed distribution the rules were checked against (e.g. sglang)", where)
	case !distRe.MatchString(c.Distribution):
		return fmt.Errorf("%s: distribution %q is not a distribution name (letters, digits, '.', '_', '-')", where, trimQuote(c.Distribution))
	case len(c.Versions) == 0:
		return fmt.Errorf("%s: no versions: list the releases ('0.5.6') or ranges ('0.4..0.5') the rules were checked against", where)
	case len(c.Versions) > MaxRules:
		return fmt.Errorf("%s: %d versions entries, more than %d: merge them into ranges", where, len(c.Versions), MaxRules)
	}
	_, err := c.ranges(where)
	return err
}

// Covers reports whether version (an installed version string) is one of
// the checked versions. The error says why a version cannot be compared.
func (c *CheckedAgainst) Covers(version string) (bool, error) {
	rel, epoch, err := ParseVersion(version)
	if err != nil {
		return false, err
	}
	rs, err := c.ranges("checked_against")
	if err != nil {
		return false, err
	}
	if epoch {
		return false, nil
	}
	for _, r := range rs {
		if cmpPrefix(rel, r.lo) >= 0 && cmpPrefix(rel, r.hi) <= 0 {
			return true, nil
		}
	}
	return false, nil
}

// trimQuote bounds a value quoted in an error.
func trimQuote(s string) string {
	if len(s) > 64 {
		return strings.ToValidUTF8(s[:64], "") + "…"
	}
	return s
}
