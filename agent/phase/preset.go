package phase

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v4"
	"go.yaml.in/yaml/v4/plugin/loaderlimits"
)

//go:embed presets/*.yaml
var presetFS embed.FS

// ErrUnknownPreset is returned (wrapped) for a preset name that is not embedded.
var ErrUnknownPreset = errors.New("unknown preset")

// Other is the phase of a stack that no rule matches. Its id is always 0.
const Other = "other"

// Match selects Python frames. Every condition that is set must hold.
type Match struct {
	// Qualname is a regular expression matched against co_qualname
	// (Python 3.11+), e.g. `^EAGLEWorker\.verify$`. On Python 3.10, which
	// has no co_qualname, Name takes its place when set; otherwise a co_name
	// regex is derived from the last dotted component of Qualname.
	Qualname string `yaml:"qualname,omitempty"`
	// Name is a regular expression matched against co_name.
	Name string `yaml:"name,omitempty"`
	// File is a regular expression matched against co_filename. Empty means
	// the preset's FileRegex; after loading, rules hold the effective value.
	File string `yaml:"file,omitempty"`
	// FirstLine, when non-zero, must equal co_firstlineno. It tells apart
	// same-named functions of one file on Python 3.10.
	FirstLine int `yaml:"first_line,omitempty"`
}

// Rule names the phase of the frames it matches.
type Rule struct {
	// Phase is the phase name, e.g. "spec.verify".
	Phase string `yaml:"phase"`
	Match `yaml:",inline"`
	// RequiresBelow, when set, is a qualname regex: the rule applies only
	// if some frame strictly below the matched one (towards the innermost
	// frame, which counts) matches it. Such a rule must be followed by a
	// fallback rule with the same Match and no RequiresBelow, and one
	// preset uses one RequiresBelow pattern, so that a per-frame cache
	// (see Matcher.Classify) gives the same answer as a full walk.
	RequiresBelow string `yaml:"requires_below,omitempty"`

	where string // "rules file x.yaml: rule 3 (phase "verify", line 12)", for errors
}

// Cycle names the function one call of which is one speculative cycle.
type Cycle struct {
	Match `yaml:",inline"`
	// StartPhase is the phase that begins a cycle. Where one call of the
	// cycle function holds several cycles (HF's while loop), or part of a
	// cycle runs outside it (vLLM's sample_tokens), a cycle begins at each
	// entry into StartPhase.
	StartPhase string `yaml:"start_phase"`
	// Py310, when set, replaces Match on Python 3.10.
	Py310 *Match `yaml:"py310,omitempty"`
	// ContinuePhases lists phases whose calls, made with no cycle-function
	// frame on the stack, still belong to the thread's open cycle instead
	// of closing it: vLLM's sample_tokens after execute_model, SGLang's
	// run_batch tail after forward_batch_generation. After such a call the
	// next call of the cycle function begins a new cycle.
	ContinuePhases []string `yaml:"continue_phases,omitempty"`
	// LatePhases lists phases whose blocking calls wait for an earlier
	// cycle's work: an event synchronize in one of them, on any thread of
	// the process, belongs to the cycle during which that event was last
	// recorded (SGLang's overlap scheduler processes batch N's result after
	// launching batch N+1; vLLM's async output thread). Such a call neither
	// closes nor continues the calling thread's open cycle.
	LatePhases []string `yaml:"late_phases,omitempty"`
	// BeforeStart says where the calls of a cycle-function call made
	// before its first entry into StartPhase go: "cycle" (the default: a
	// cycle's preparation, as in SGLang's forward_batch_generation) or
	// "outside" (one call holds a loop of cycles and what comes before the
	// loop is setup, as in HF's _assisted_decoding).
	BeforeStart string `yaml:"before_start,omitempty"`
}

// Values of Cycle.BeforeStart.
const (
	BeforeStartCycle   = "cycle"
	BeforeStartOutside = "outside"
)

// Process selects the processes (and threads) a preset applies to.
type Process struct {
	// Cmdline is a regular expression matched against the command line;
	// empty matches every process.
	Cmdline string `yaml:"cmdline,omitempty"`
	// MainThread says the phases run on the main thread (TID == PID) only.
	MainThread bool `yaml:"main_thread,omitempty"`
}

// Preset is a named rule set: the rules, their phases and the cycle.
type Preset struct {
	// Name identifies the preset ("sglang-eagle"), or a rules file.
	Name string `yaml:"name,omitempty"`
	// Description says what the preset covers, in one line.
	Description string `yaml:"description,omitempty"`
	// CheckedAgainst names the server distribution and the versions of it
	// the rules were checked against; nil when the file does not say. A
	// rules file that extends a preset inherits the preset's unless it
	// gives its own.
	CheckedAgainst *CheckedAgainst `yaml:"checked_against,omitempty"`
	// Extends names the preset a rules file builds on; its rules go in
	// front of the preset's. Informational once loaded.
	Extends string `yaml:"extends,omitempty"`
	// Process selects target processes; nil matches every process.
	Process *Process `yaml:"process,omitempty"`
	// FileRegex is the default File of rules and the cycle.
	FileRegex string `yaml:"file_regex,omitempty"`
	// Phases lists the phase names in display order. "other" goes last
	// unless listed.
	Phases []string `yaml:"phases,omitempty"`
	// Cycle is the cycle definition; nil when the preset has none.
	Cycle *Cycle `yaml:"cycle,omitempty"`
	// Rules are tried in order on every frame, innermost frame first.
	Rules []Rule `yaml:"rules,omitempty"`
	// Py310Rules, when non-empty, replace Rules on Python 3.10.
	Py310Rules []Rule `yaml:"py310_rules,omitempty"`

	source string // "preset sglang-eagle" or "rules file x.yaml", for errors
}

// Presets returns the names of the embedded presets, sorted.
func Presets() []string {
	ents, err := fs.ReadDir(presetFS, "presets")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory
	}
	var names []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// LoadPreset loads the embedded preset name.
func LoadPreset(name string) (*Preset, error) {
	var data []byte
	err := fs.ErrNotExist
	if name != "" && !strings.ContainsAny(name, `/\.`) {
		data, err = presetFS.ReadFile("presets/" + name + ".yaml")
	}
	if err != nil {
		return nil, fmt.Errorf("%w %q: the presets are %s", ErrUnknownPreset, name, strings.Join(Presets(), ", "))
	}
	src := "preset " + name
	p, err := parse(data, src)
	if err != nil {
		return nil, err
	}
	if p.Name != name {
		return nil, fmt.Errorf("%s: name is %q: set it to the file's name", src, p.Name)
	}
	if p.Extends != "" {
		return nil, fmt.Errorf("%s: an embedded preset cannot extend another: remove extends", src)
	}
	p.fillFiles(p.FileRegex)
	p.Phases = displayOrder(p.Phases, nil)
	if err := p.validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// LoadRulesFile loads a user rules file. A file with `extends: <preset>`
// puts its rules in front of that preset's and inherits what it leaves out.
// Files over [MaxRulesFileBytes] are refused unread.
func LoadRulesFile(path string) (*Preset, error) {
	data, err := readRulesFile(path)
	if err != nil {
		return nil, fmt.Errorf("rules file %s: %w", path, err)
	}
	return LoadRules(data, path)
}

// readRulesFile reads at most one byte more than MaxRulesFileBytes, so that
// a huge file or a device such as /dev/zero is refused without reading it.
func readRulesFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxRulesFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	return data, nil
}

// LoadRules loads the contents of a rules file, as [LoadRulesFile] does.
// path names the file in errors and, when the file sets no name, gives the
// preset its name.
func LoadRules(data []byte, path string) (*Preset, error) {
	src := "rules file " + path
	u, err := parse(data, src)
	if err != nil {
		return nil, err
	}
	if u.Name == "" {
		u.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	if u.Extends == "" {
		if len(u.Rules) == 0 && len(u.Py310Rules) == 0 {
			return nil, fmt.Errorf("%s: no rules: add rules, or extends to build on a preset (%s)", src, strings.Join(Presets(), ", "))
		}
		u.fillFiles(u.FileRegex)
		u.Phases = displayOrder(u.Phases, nil, u.Rules, u.Py310Rules)
		if err := u.validate(); err != nil {
			return nil, err
		}
		return u, nil
	}
	base, err := LoadPreset(u.Extends)
	if err != nil {
		return nil, fmt.Errorf("%s: extends: %w: fix extends", src, err)
	}
	def := u.FileRegex
	if def == "" {
		def = base.FileRegex
	}
	u.fillFiles(def)
	p := merge(base, u)
	if err := p.validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// parse decodes one YAML file strictly and labels its rules for errors.
// The limits are checked before parsing (size), as the parser goes
// (nesting) and as it builds the Go values (alias expansion), so that no
// file costs more than its bounded size allows.
func parse(data []byte, src string) (*Preset, error) {
	if len(data) > MaxRulesFileBytes {
		return nil, fmt.Errorf("%s: larger than %d KiB: rules files are short lists of patterns; shorten it", src, MaxRulesFileBytes>>10)
	}
	doc, err := parseTree(data, src)
	if err != nil {
		return nil, err
	}
	var p Preset
	// The library counts the nodes it builds from aliases as it builds
	// them, so a bomb stops after MaxAliasNodes of its 9^9.
	aliases := loaderlimits.New(loaderlimits.AliasFunc(func(expanded, _ int) error {
		if expanded > MaxAliasNodes {
			return errTooManyAliases
		}
		return nil
	}))
	if err := doc.Load(&p, yaml.WithKnownFields(), yaml.WithPlugin(aliases)); err != nil {
		if errors.Is(err, errTooManyAliases) {
			return nil, fmt.Errorf("%s: aliases expand to more than %d nodes%s: remove the aliases, or write the values out", src, MaxAliasNodes, atLine(err))
		}
		return nil, fmt.Errorf("%s: %w: fix the YAML", src, wrapYAML(err))
	}
	p.source = src
	top := topMapping(doc)
	if err := checkLen(src, "phases", top, len(p.Phases), MaxPhases); err != nil {
		return nil, err
	}
	for _, l := range []struct {
		key, label string
		rules      []Rule
	}{{"rules", "rule", p.Rules}, {"py310_rules", "py310 rule", p.Py310Rules}} {
		if err := checkLen(src, l.key, top, len(l.rules), MaxRules); err != nil {
			return nil, err
		}
		items := value(top, l.key)
		for i := range l.rules {
			r := &l.rules[i]
			r.where = fmt.Sprintf("%s: %s %d (phase %q", src, l.label, i+1, r.Phase)
			if items != nil && i < len(items.Content) {
				r.where += fmt.Sprintf(", line %d", items.Content[i].Line)
			}
			r.where += ")"
			// Checked before files are defaulted, which would hide it.
			if r.Qualname == "" && r.Name == "" && r.File == "" && r.FirstLine == 0 {
				return nil, fmt.Errorf("%s: selects nothing: give it a qualname, name, file or first_line", r.where)
			}
		}
	}
	return &p, nil
}

// parseTree parses the file's one document into a node tree, refusing
// nesting deeper than MaxDepth as soon as the parser reaches it.
func parseTree(data []byte, src string) (*yaml.Node, error) {
	// The scanner keeps only the message of the error returned here.
	tooDeep := false
	depth := loaderlimits.New(loaderlimits.DepthFunc(func(d int, _ *yaml.DepthContext) error {
		if d > MaxDepth {
			tooDeep = true
			return errTooDeep
		}
		return nil
	}))
	ld, err := yaml.NewLoader(bytes.NewReader(data), yaml.WithPlugin(depth))
	if err != nil {
		return nil, fmt.Errorf("%s: set up the YAML parser: %w", src, err)
	}
	var doc, next yaml.Node
	switch err := ld.Load(&doc); {
	case errors.Is(err, io.EOF):
		return nil, fmt.Errorf("%s: the file is empty: give it rules (and extends to build on a preset)", src)
	case err != nil && tooDeep:
		return nil, deepError(src, atLine(err))
	case err != nil:
		return nil, fmt.Errorf("%s: %w: fix the YAML", src, wrapYAML(err))
	}
	if line := deepest(&doc, 0); line > 0 {
		return nil, deepError(src, fmt.Sprintf(" at line %d", line))
	}
	switch err := ld.Load(&next); {
	case errors.Is(err, io.EOF):
		return &doc, nil
	case err != nil && tooDeep:
		return nil, deepError(src, atLine(err))
	case err != nil:
		return nil, fmt.Errorf("%s: %w: fix the YAML", src, wrapYAML(err))
	}
	return nil, fmt.Errorf("%s: a second YAML document at line %d: a rules file holds one; remove the '---' and what follows", src, next.Line)
}

var (
	errTooDeep        = errors.New("nesting too deep")
	errTooManyAliases = errors.New("aliases expand too far")
)

func deepError(src, at string) error {
	return fmt.Errorf("%s: nesting deeper than %d levels%s: rules files are flat lists of rules, nested 3 levels deep; simplify it", src, MaxDepth, at)
}

// deepest returns the line of the first collection nested deeper than
// MaxDepth, counting block and flow nesting together (the parser bounds
// each alone), or 0. Aliases are not followed: they are bounded when
// decoding, and may refer to their own ancestors.
func deepest(n *yaml.Node, depth int) int {
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		if depth++; depth > MaxDepth {
			return n.Line
		}
	}
	for _, c := range n.Content {
		if line := deepest(c, depth); line > 0 {
			return line
		}
	}
	return 0
}

// topMapping returns the document's top-level mapping, or nil.
func topMapping(doc *yaml.Node) *yaml.Node {
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if doc.Kind == yaml.AliasNode {
		doc = doc.Alias
	}
	if doc == nil || doc.Kind != yaml.MappingNode {
		return nil
	}
	return doc
}

// value returns the value of key in mapping m, an alias resolved, or nil.
func value(m *yaml.Node, key string) *yaml.Node {
	if m == nil {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			v := m.Content[i+1]
			if v.Kind == yaml.AliasNode {
				v = v.Alias
			}
			return v
		}
	}
	return nil
}

// checkLen refuses a list longer than limit: the checks after parsing
// compare every rule with the others.
func checkLen(src, key string, top *yaml.Node, n, limit int) error {
	if n <= limit {
		return nil
	}
	at := ""
	if v := value(top, key); v != nil {
		at = fmt.Sprintf(" at line %d", v.Line)
	}
	return fmt.Errorf("%s: %s has %d entries%s, more than %d: a preset needs a few dozen; merge rules with alternations (a|b)", src, key, n, at, limit)
}

// atLine returns " at line N" for a YAML error that has a line, or "".
func atLine(err error) string {
	var le *yaml.LoadError
	if errors.As(err, &le) && le.Mark.Line > 0 {
		return fmt.Sprintf(" at line %d", le.Mark.Line)
	}
	return ""
}

// yamlError is a YAML error on one line, without the library's stage name.
type yamlError struct {
	line, col int
	msg       string
	err       error
}

func (e *yamlError) Error() string {
	if e.line == 0 {
		return e.msg
	}
	return fmt.Sprintf("line %d, column %d: %s", e.line, e.col, e.msg)
}

func (e *yamlError) Unwrap() error { return e.err }

// maxYAMLMessage bounds the YAML library's part of an error.
const maxYAMLMessage = 200

// wrapYAML keeps the first of the library's errors (a file with several
// mistakes gets them fixed one at a time) with its position.
func wrapYAML(err error) error {
	var le *yaml.LoadError // of a *yaml.LoadErrors, its first
	if !errors.As(err, &le) {
		return err
	}
	// Messages quote the file's scalars: keep them on one line and short.
	msg := strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(le.Message)
	if len(msg) > maxYAMLMessage {
		msg = strings.ToValidUTF8(msg[:maxYAMLMessage], "") + "…"
	}
	if cm := le.ContextMark; le.ContextMsg != "" {
		if cm.Line > 0 && cm != le.Mark {
			msg += fmt.Sprintf(" (%s that begins at line %d, column %d)", le.ContextMsg, cm.Line, cm.Column)
		} else {
			msg += " (" + le.ContextMsg + ")"
		}
	}
	return &yamlError{line: le.Mark.Line, col: le.Mark.Column, msg: msg, err: err}
}

// fillFiles gives every rule and the cycle its file's default file regex,
// so merged presets keep each file's own default.
func (p *Preset) fillFiles(def string) {
	for _, rs := range [][]Rule{p.Rules, p.Py310Rules} {
		for i := range rs {
			if rs[i].File == "" {
				rs[i].File = def
			}
		}
	}
	if c := p.Cycle; c != nil {
		if c.File == "" {
			c.File = def
		}
		if c.Py310 != nil && c.Py310.File == "" {
			c.Py310.File = def
		}
	}
}

// displayOrder completes a display order: the listed phases, then the
// base's, then (when none are listed) the file's rule phases in order of
// first use; "other" last unless listed.
func displayOrder(listed []string, base []string, own ...[]Rule) []string {
	out := slices.Clone(listed)
	add := func(n string) {
		if n != "" && n != Other && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for _, n := range base {
		add(n)
	}
	if len(listed) == 0 {
		for _, rs := range own {
			for _, r := range rs {
				add(r.Phase)
			}
		}
	}
	if !slices.Contains(out, Other) {
		out = append(out, Other)
	}
	return out
}

// merge builds the preset of user file u extending base.
func merge(base, u *Preset) *Preset {
	p := &Preset{
		Name:        u.Name,
		Description: u.Description,
		Extends:     u.Extends,
		Process:     base.Process,
		FileRegex:   base.FileRegex,
		Cycle:       base.Cycle,
		Rules:       slices.Concat(u.Rules, base.Rules),
		source:      u.source,
	}
	if p.Description == "" {
		p.Description = base.Description
	}
	p.CheckedAgainst = base.CheckedAgainst
	if u.CheckedAgainst != nil {
		p.CheckedAgainst = u.CheckedAgainst
	}
	if u.Process != nil {
		p.Process = u.Process
	}
	if u.FileRegex != "" {
		p.FileRegex = u.FileRegex
	}
	if u.Cycle != nil {
		p.Cycle = u.Cycle
	}
	if len(u.Py310Rules) > 0 || len(base.Py310Rules) > 0 {
		p.Py310Rules = slices.Concat(orRules(u.Py310Rules, u.Rules), orRules(base.Py310Rules, base.Rules))
	}
	p.Phases = displayOrder(u.Phases, base.Phases, u.Rules, u.Py310Rules)
	return p
}

func orRules(a, b []Rule) []Rule {
	if len(a) > 0 {
		return a
	}
	return b
}

// where returns how errors name rule i of a list.
func (p *Preset) ruleWhere(r *Rule, label string, i int) string {
	if r.where != "" {
		return r.where
	}
	return fmt.Sprintf("%s: %s %d (phase %q)", p.src(), label, i+1, r.Phase)
}

func (p *Preset) src() string {
	if p.source != "" {
		return p.source
	}
	return fmt.Sprintf("preset %q", p.Name)
}

// phaseList is the display order; a Preset built in code may leave Phases
// empty to take the rules' phases in order of first use.
func (p *Preset) phaseList() []string {
	return displayOrder(p.Phases, nil, p.Rules, p.Py310Rules)
}

// validate checks everything that does not depend on the Python version.
func (p *Preset) validate() error {
	src := p.src()
	var rs regexes
	declared := map[string]bool{}
	phases := p.phaseList()
	for i, n := range phases {
		switch {
		case strings.TrimSpace(n) == "":
			return fmt.Errorf("%s: phases entry %d is empty: give every phase a name", src, i+1)
		case len(n) > MaxPhaseNameBytes:
			return fmt.Errorf("%s: phases entry %d is %d bytes, longer than %d: shorten the phase name", src, i+1, len(n), MaxPhaseNameBytes)
		case strings.IndexFunc(n, unicode.IsControl) >= 0:
			return fmt.Errorf("%s: phase %q has a control character: phase names label profiles; use printable characters", src, n)
		case declared[n]:
			return fmt.Errorf("%s: phase %q is listed twice in phases: remove one", src, n)
		}
		declared[n] = true
	}
	if len(phases) > 0xffff {
		return fmt.Errorf("%s: %d phases: at most 65535 fit a phase id", src, len(phases))
	}
	checkPhase := func(where, what, n string) error {
		switch {
		case strings.TrimSpace(n) == "" && what == "phase":
			return fmt.Errorf("%s: empty phase name: set phase to the phase this rule assigns", where)
		case strings.TrimSpace(n) == "":
			return fmt.Errorf("%s: empty %s: name the phase that begins a cycle", where, what)
		case n == Other:
			return fmt.Errorf("%s: %s %q is reserved for frames no rule matches: pick another name", where, what, n)
		case !declared[n]:
			return fmt.Errorf("%s: %s %q is not in phases [%s]: add it to phases or fix the name", where, what, n, phaseList(phases))
		}
		return nil
	}
	for _, l := range []struct {
		label string
		rules []Rule
	}{{"rule", p.Rules}, {"py310 rule", p.Py310Rules}} {
		for i := range l.rules {
			r := &l.rules[i]
			where := p.ruleWhere(r, l.label, i)
			if err := checkPhase(where, "phase", r.Phase); err != nil {
				return err
			}
			if err := rs.checkMatch(where, r.Match); err != nil {
				return err
			}
			if r.Qualname == "" && r.Name == "" && r.File == "" && r.FirstLine == 0 {
				return fmt.Errorf("%s: selects nothing: give it a qualname, name, file or first_line", where)
			}
			if err := rs.check(where, "requires_below", r.RequiresBelow); err != nil {
				return err
			}
		}
		if err := p.checkRequiresBelow(l.label, l.rules); err != nil {
			return err
		}
	}
	if c := p.Cycle; c != nil {
		where := src + ": cycle"
		if c.Qualname == "" && c.Name == "" {
			return fmt.Errorf("%s: no qualname or name: name the function one call of which is one cycle", where)
		}
		if err := rs.checkMatch(where, c.Match); err != nil {
			return err
		}
		if c.Py310 != nil {
			if c.Py310.Qualname == "" && c.Py310.Name == "" {
				return fmt.Errorf("%s: py310: no name: give the cycle function's co_name", where)
			}
			if err := rs.checkMatch(where+": py310", *c.Py310); err != nil {
				return err
			}
		}
		if err := checkPhase(where, "start_phase", c.StartPhase); err != nil {
			return err
		}
		switch c.BeforeStart {
		case "", BeforeStartCycle, BeforeStartOutside:
		default:
			return fmt.Errorf("%s: before_start %q: want %q (calls before the start phase belong to the cycle) or %q (they are outside cycles)", where, c.BeforeStart, BeforeStartCycle, BeforeStartOutside)
		}
		seen := map[string]string{}
		for _, l := range []struct {
			key   string
			names []string
		}{{"continue_phases", c.ContinuePhases}, {"late_phases", c.LatePhases}} {
			for _, n := range l.names {
				if err := checkPhase(where+": "+l.key, "phase", n); err != nil {
					return err
				}
				if n == c.StartPhase {
					return fmt.Errorf("%s: %s: %q is the start_phase, which begins cycles: remove it from %s", where, l.key, n, l.key)
				}
				if k, dup := seen[n]; dup {
					return fmt.Errorf("%s: phase %q is listed in %s and in %s: list it once", where, n, k, l.key)
				}
				seen[n] = l.key
			}
		}
	}
	if p.Process != nil {
		if err := rs.check(src+": process", "cmdline", p.Process.Cmdline); err != nil {
			return err
		}
	}
	if p.CheckedAgainst != nil {
		if err := p.CheckedAgainst.validate(src); err != nil {
			return err
		}
	}
	return nil
}

func (rs *regexes) checkMatch(where string, m Match) error {
	for _, f := range []struct{ what, re string }{{"qualname", m.Qualname}, {"name", m.Name}, {"file", m.File}} {
		if err := rs.check(where, f.what, f.re); err != nil {
			return err
		}
	}
	if m.FirstLine < 0 {
		return fmt.Errorf("%s: first_line %d is negative: give co_firstlineno or leave it out", where, m.FirstLine)
	}
	return nil
}

// phaseList lists phases for an error, the first 20 of a longer list.
func phaseList(phases []string) string {
	if len(phases) > 20 {
		return strings.Join(phases[:20], ", ") + fmt.Sprintf(" and %d more", len(phases)-20)
	}
	return strings.Join(phases, ", ")
}

// check checks that re, when set, compiles within the limits.
func (rs *regexes) check(where, what, re string) error {
	if re == "" {
		return nil
	}
	_, err := rs.compile(where, what, re)
	return err
}

// checkRequiresBelow enforces what keeps Classify per-frame: one marker
// pattern, and a fallback after every requires_below rule, so a frame that
// an requires_below rule matches always has a phase without the marker.
func (p *Preset) checkRequiresBelow(label string, rules []Rule) error {
	first := -1
	for i := range rules {
		r := &rules[i]
		if r.RequiresBelow == "" {
			continue
		}
		where := p.ruleWhere(r, label, i)
		if first < 0 {
			first = i
		} else if f := &rules[first]; r.RequiresBelow != f.RequiresBelow {
			fWhere := p.ruleWhere(f, label, first)
			if !strings.HasPrefix(where, p.src()+":") && strings.HasPrefix(fWhere, p.src()+":") {
				// Blame the rule of the file being loaded, not the preset it extends.
				r, f, where, fWhere = f, r, fWhere, where
			}
			return fmt.Errorf("%s: requires_below %q differs from %q of %s: a preset may use only one requires_below pattern: use the same one",
				where, r.RequiresBelow, f.RequiresBelow, fWhere)
		}
		fallback := -1
		for j := range rules {
			if rules[j].RequiresBelow == "" && rules[j].Match == r.Match {
				fallback = j
				break
			}
		}
		switch {
		case fallback < 0:
			return fmt.Errorf("%s: requires_below needs a fallback: add after it a rule with the same qualname, name, file and first_line and no requires_below, naming the phase when no %q frame is below", where, r.RequiresBelow)
		case fallback < i:
			return fmt.Errorf("%s: never applies, %s matches the same frames first: move the requires_below rule before its fallback", where, p.ruleWhere(&rules[fallback], label, fallback))
		}
	}
	return nil
}
