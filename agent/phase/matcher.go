package phase

import (
	"fmt"
	"regexp"
	"strings"
)

// Frame is one Python frame as the symbolizer yields it. On Python 3.10
// Qualname == Name: there is no co_qualname.
type Frame struct {
	Qualname  string // co_qualname (3.11+)
	Name      string // co_name
	Filename  string // co_filename
	FirstLine int    // co_firstlineno
}

// Class is what one frame contributes to the phase of any stack holding
// it. It depends on the frame alone, so it can be cached per code object.
type Class struct {
	// Phase is the phase if this frame is the innermost match; 0 if it
	// matches no rule.
	Phase uint16
	// AltPhase replaces Phase when a Marker frame lies strictly below
	// this one (requires_below); 0 if none.
	AltPhase uint16
	// Marker says this frame satisfies the preset's requires_below.
	Marker bool
	// Cycle says this frame is a call of the cycle function.
	Cycle bool
}

// Result is the phase of one stack.
type Result struct {
	// Phase is the phase id; 0 (other) when no frame matched.
	Phase uint16
	// Frame is the index of the frame that gave the phase, -1 if none.
	Frame int
	// CycleFrame is the index of the innermost cycle-function frame, -1
	// if none.
	CycleFrame int
}

// Matcher assigns phases to stacks for one preset and Python version.
// It is safe for concurrent use.
type Matcher struct {
	name       string
	py310      bool
	phases     []string // display order, "other" included
	byID       []string // id → name; byID[0] == "other"
	ids        map[string]uint16
	rules      []crule
	marker     *regexp.Regexp // on qualname, or on co_name on 3.10; nil if unused
	cycle      *cmatch
	startPhase uint16
	cont, late []bool // by phase id: Cycle.ContinuePhases, Cycle.LatePhases
	atStart    bool   // Cycle.BeforeStart "outside"
	process    *regexp.Regexp
	mainThread bool
}

type crule struct {
	cmatch
	phase uint16
	below bool // has requires_below
}

// cmatch is a compiled Match; nil regexes are absent conditions.
type cmatch struct {
	qual, name, file *regexp.Regexp
	firstLine        int
}

func (c *cmatch) match(f Frame) bool {
	return (c.qual == nil || c.qual.MatchString(f.Qualname)) &&
		(c.name == nil || c.name.MatchString(f.Name)) &&
		(c.file == nil || c.file.MatchString(f.Filename)) &&
		(c.firstLine == 0 || c.firstLine == f.FirstLine)
}

// Compile builds the matcher for frames of Python 3.11+ (py310 false) or of
// Python 3.10 (py310 true: qualnames are unknown, so rules match on co_name,
// file and first line, and Py310Rules replace Rules when present).
func (p *Preset) Compile(py310 bool) (*Matcher, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	m := &Matcher{
		name:   p.Name,
		py310:  py310,
		phases: p.phaseList(),
		byID:   []string{Other},
		ids:    map[string]uint16{Other: 0},
	}
	for _, n := range m.phases {
		if n != Other {
			m.ids[n] = uint16(len(m.byID))
			m.byID = append(m.byID, n)
		}
	}
	var rs regexes
	rules, label := p.Rules, "rule"
	if py310 && len(p.Py310Rules) > 0 {
		rules, label = p.Py310Rules, "py310 rule"
	}
	for i := range rules {
		r := &rules[i]
		where := p.ruleWhere(r, label, i)
		cm, err := rs.compileMatch(where, r.Match, p.FileRegex, py310)
		if err != nil {
			return nil, err
		}
		m.rules = append(m.rules, crule{cmatch: *cm, phase: m.ids[r.Phase], below: r.RequiresBelow != ""})
		if r.RequiresBelow != "" && m.marker == nil {
			if m.marker, err = rs.compileQualname(where, "requires_below", r.RequiresBelow, py310); err != nil {
				return nil, err
			}
		}
	}
	if c := p.Cycle; c != nil {
		cm := c.Match
		if py310 && c.Py310 != nil {
			cm = *c.Py310
		}
		var err error
		if m.cycle, err = rs.compileMatch(p.src()+": cycle", cm, p.FileRegex, py310); err != nil {
			return nil, err
		}
		m.startPhase = m.ids[c.StartPhase]
		m.cont = m.phaseSet(c.ContinuePhases)
		m.late = m.phaseSet(c.LatePhases)
		m.atStart = c.BeforeStart == BeforeStartOutside
	}
	if pr := p.Process; pr != nil {
		m.mainThread = pr.MainThread
		if pr.Cmdline != "" {
			var err error
			if m.process, err = rs.compile(p.src()+": process", "cmdline", pr.Cmdline); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (rs *regexes) compileMatch(where string, m Match, defFile string, py310 bool) (*cmatch, error) {
	var c cmatch
	var err error
	switch {
	case m.Name != "":
		if c.name, err = rs.compile(where, "name", m.Name); err != nil {
			return nil, err
		}
	case py310 && m.Qualname != "":
		if c.name, err = rs.compileQualname(where, "qualname", m.Qualname, true); err != nil {
			return nil, err
		}
	}
	if !py310 && m.Qualname != "" {
		if c.qual, err = rs.compile(where, "qualname", m.Qualname); err != nil {
			return nil, err
		}
	}
	file := m.File
	if file == "" {
		file = defFile
	}
	if file != "" {
		if c.file, err = rs.compile(where, "file", file); err != nil {
			return nil, err
		}
	}
	c.firstLine = m.FirstLine
	return &c, nil
}

// compileQualname compiles a qualname regex; on 3.10 it becomes a co_name
// regex over the last dotted component.
func (rs *regexes) compileQualname(where, what, re string, py310 bool) (*regexp.Regexp, error) {
	if !py310 {
		return rs.compile(where, what, re)
	}
	d, err := deriveNameRegex(re)
	if err != nil {
		return nil, fmt.Errorf("%s: %s regex %q cannot be used on Python 3.10, which has no co_qualname: %w: add a name regex (and a file regex) for Python 3.10", where, what, re, err)
	}
	return rs.compile(where, what+" (as a co_name regex for Python 3.10)", d)
}

// Name returns the preset's name.
func (m *Matcher) Name() string { return m.name }

// Py310 reports whether the matcher is for Python 3.10 frames.
func (m *Matcher) Py310() bool { return m.py310 }

// Phases returns the phase names in display order, "other" included.
func (m *Matcher) Phases() []string { return append([]string(nil), m.phases...) }

// PhaseName returns the name of phase id, "" for an unknown id.
func (m *Matcher) PhaseName(id uint16) string {
	if int(id) < len(m.byID) {
		return m.byID[id]
	}
	return ""
}

// PhaseID returns the id of a phase name; "other" is 0.
func (m *Matcher) PhaseID(name string) (uint16, bool) {
	id, ok := m.ids[name]
	return id, ok
}

// NumPhases returns the number of phase ids, 0 ("other") included.
func (m *Matcher) NumPhases() int { return len(m.byID) }

// CycleStartPhase returns the id of the phase that begins a cycle, 0 if the
// preset defines no cycle.
func (m *Matcher) CycleStartPhase() uint16 { return m.startPhase }

func (m *Matcher) phaseSet(names []string) []bool {
	if len(names) == 0 {
		return nil
	}
	set := make([]bool, len(m.byID))
	for _, n := range names {
		set[m.ids[n]] = true
	}
	return set
}

// ContinuesCycle reports whether a call of phase id made outside the cycle
// function belongs to the open cycle (Cycle.ContinuePhases).
func (m *Matcher) ContinuesCycle(id uint16) bool { return int(id) < len(m.cont) && m.cont[id] }

// LateWait reports whether a blocking call of phase id waits for the cycle
// that recorded its event (Cycle.LatePhases).
func (m *Matcher) LateWait(id uint16) bool { return int(id) < len(m.late) && m.late[id] }

// CyclesAtStart reports whether a cycle-function call opens a cycle only at
// its first entry into the start phase (Cycle.BeforeStart "outside").
func (m *Matcher) CyclesAtStart() bool { return m.atStart }

// HasLateWaits reports whether the preset declares late phases: closed
// cycles are then held until their late waits can have come.
func (m *Matcher) HasLateWaits() bool { return m.late != nil }

// MatchProcess reports whether a process with this command line is a
// target. NUL-separated /proc/PID/cmdline contents are accepted.
func (m *Matcher) MatchProcess(cmdline string) bool {
	if m.process == nil {
		return true
	}
	cmdline = strings.TrimRight(strings.ReplaceAll(cmdline, "\x00", " "), " ")
	return m.process.MatchString(cmdline)
}

// MainThreadOnly reports whether the preset's phases run only on the
// target's main thread (TID == PID).
func (m *Matcher) MainThreadOnly() bool { return m.mainThread }

// Classify returns the per-frame classification. Walking a stack from the
// innermost frame outwards, the first frame with Phase != 0 gives the
// phase, AltPhase (when non-zero) instead if a Marker frame was seen
// strictly below it; this equals Resolve for every stack.
func (m *Matcher) Classify(f Frame) Class {
	var c Class
	for i := range m.rules {
		r := &m.rules[i]
		if !r.match(f) {
			continue
		}
		if r.below {
			if c.AltPhase == 0 {
				c.AltPhase = r.phase
			}
			continue
		}
		c.Phase = r.phase
		break
	}
	if c.Phase == 0 || c.AltPhase == c.Phase {
		// Phase 0 with AltPhase set cannot happen after validation (every
		// requires_below rule has a fallback); never let it leak.
		c.AltPhase = 0
	}
	c.Marker = m.isMarker(f)
	c.Cycle = m.cycle != nil && m.cycle.match(f)
	return c
}

func (m *Matcher) isMarker(f Frame) bool {
	if m.marker == nil {
		return false
	}
	if m.py310 {
		return m.marker.MatchString(f.Name)
	}
	return m.marker.MatchString(f.Qualname)
}

// Resolve returns the phase of a stack, frames[0] being the innermost
// frame: the first frame (innermost wins) that a rule matches gives the
// phase, rules being tried in order within a frame.
func (m *Matcher) Resolve(frames []Frame) Result {
	res := Result{Frame: -1, CycleFrame: -1}
	markerBelow := false
	for i, f := range frames {
		if res.CycleFrame < 0 && m.cycle != nil && m.cycle.match(f) {
			res.CycleFrame = i
		}
		if res.Frame < 0 {
			for j := range m.rules {
				r := &m.rules[j]
				if r.match(f) && (!r.below || markerBelow) {
					res.Phase, res.Frame = r.phase, i
					break
				}
			}
		}
		if res.Frame >= 0 && (res.CycleFrame >= 0 || m.cycle == nil) {
			break
		}
		markerBelow = markerBelow || m.isMarker(f)
	}
	return res
}
