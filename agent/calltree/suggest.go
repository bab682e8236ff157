package calltree

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
)

// Options tunes Suggest.
type Options struct {
	// PID, when non-zero, reads only that process's tree.
	PID int
	// MaxChildren bounds the rules made from the step function's children
	// (the ones with the most GPU time first); the rest count as the step
	// function's own phase. 0 means DefaultMaxChildren.
	MaxChildren int
	// Source names where the tree came from, for the file's header.
	Source string
}

// DefaultMaxChildren is Options.MaxChildren's default.
const DefaultMaxChildren = 16

// MinSwitches is how often the launches below a function must change
// between its children for it to count as repeating (a step function).
const MinSwitches = 8

// ErrNoStep is returned (wrapped) when no function of the tree repeats
// with GPU work under more than one of its callees.
var ErrNoStep = errors.New("no repeating function found")

// mnode is a node of the merged tree: processes and Python versions
// merged by (co_name, co_filename, co_firstlineno), which 3.10 and 3.11+
// share.
type mnode struct {
	Node
	depth    int
	children map[mkey]*mnode
	order    []*mnode
}

type mkey struct {
	name, file string
	line       int
}

func merge(dst *mnode, src *Node, depth int) {
	dst.Launches += src.Launches
	dst.Self += src.Self
	dst.GPUNs += src.GPUNs
	dst.Switches += src.Switches
	if dst.Func == "" || dst.Func == dst.Name && src.Func != src.Name {
		dst.Func = src.Func // a 3.11+ qualname over a 3.10 co_name
	}
	for _, c := range src.Children {
		k := mkey{c.Name, c.File, c.FirstLine}
		d := dst.children[k]
		if d == nil {
			d = &mnode{Node: Node{Name: c.Name, File: c.File, FirstLine: c.FirstLine, FirstSeen: c.FirstSeen}, depth: depth + 1, children: map[mkey]*mnode{}}
			dst.children[k] = d
			dst.order = append(dst.order, d)
		}
		d.FirstSeen = min(d.FirstSeen, c.FirstSeen)
		merge(d, c, depth+1)
	}
}

// MinShare is the share of a function's GPU time (of its launches,
// without GPU records) that a callee must have to count as a phase.
const MinShare = 0.05

// findStep walks down the heaviest path of the tree (the callee with the
// most GPU time, then launches) to the first function that repeats (its
// launches switched between its callees, or itself, at least MinSwitches
// times) with two or more callees (its own launches counting as one) each
// holding MinShare of its GPU time or more: the step function, whose
// callees take turns once per step. Functions repeating below it (a
// model's layers) are not reached, and callers above it whose work is
// nearly all one callee (an event loop around the step) are passed.
func findStep(root *mnode) *mnode {
	useGPU := root.GPUNs > 0
	weight := func(n *mnode) int64 {
		if useGPU {
			return n.GPUNs
		}
		return n.Launches
	}
	n := root
	for {
		if n.depth > 0 && n.Switches >= MinSwitches {
			var own int64
			if !useGPU {
				own = n.Self
			} else {
				own = n.GPUNs
				for _, c := range n.order {
					own -= c.GPUNs
				}
			}
			big := 0
			if float64(own) >= MinShare*float64(weight(n)) && own > 0 {
				big++
			}
			for _, c := range n.order {
				if w := weight(c); w > 0 && float64(w) >= MinShare*float64(weight(n)) {
					big++
				}
			}
			if big >= 2 {
				return n
			}
		}
		var next *mnode
		for _, c := range n.order {
			if next == nil || weight(c) > weight(next) || weight(c) == weight(next) && c.Launches > next.Launches {
				next = c
			}
		}
		if next == nil || next.Launches == 0 {
			return nil
		}
		n = next
	}
}

// Suggest writes a starting rules file (YAML, as phase.LoadRules reads it)
// from a session's call trees: the step function as the cycle, each of
// its callees that issued GPU work as a phase, and the step function's
// own launches (and those of the callees past MaxChildren) as one more.
func Suggest(f *File, o Options) ([]byte, error) {
	if o.MaxChildren <= 0 {
		o.MaxChildren = DefaultMaxChildren
	}
	root := &mnode{children: map[mkey]*mnode{}}
	py310Only := true
	procs := 0
	for _, p := range f.Processes {
		if o.PID != 0 && p.PID != o.PID || p.Root == nil {
			continue
		}
		procs++
		py310Only = py310Only && strings.HasPrefix(p.Python, "3.10")
		merge(root, p.Root, 0)
	}
	switch {
	case procs == 0 && o.PID != 0:
		return nil, fmt.Errorf("no call tree of pid %d in the file (its processes: %s)", o.PID, pidList(f))
	case procs == 0 || root.Launches == 0:
		return nil, fmt.Errorf("%w: the session recorded no unattributed launch with its stack (all its launches were attributed, or none was made)", ErrNoStep)
	}
	st := findStep(root)
	if st == nil {
		return nil, fmt.Errorf("%w: among %d unattributed launches, no function on their heaviest call path took turns between callees with %.0f %% of its GPU work each %d times or more; run the workload for more steps", ErrNoStep, root.Launches, 100*MinShare, MinSwitches)
	}
	// Its callees with GPU work, the most GPU time (then launches) first.
	// A callee that also runs below another one (a launch helper, a
	// model's forward) would take those launches too, as the innermost
	// matching frame wins: its launches count as the step function's own.
	var kids, shared []*mnode
	for _, c := range st.order {
		if c.Launches == 0 {
			continue
		}
		helper := false
		for _, o := range st.order {
			if o != c && contains(o, mkey{c.Name, c.File, c.FirstLine}) {
				helper = true
			}
		}
		if helper {
			shared = append(shared, c)
		} else {
			kids = append(kids, c)
		}
	}
	sort.SliceStable(kids, func(i, j int) bool {
		if kids[i].GPUNs != kids[j].GPUNs {
			return kids[i].GPUNs > kids[j].GPUNs
		}
		return kids[i].Launches > kids[j].Launches
	})
	folded := kids[min(len(kids), o.MaxChildren):]
	kids = kids[:min(len(kids), o.MaxChildren)]
	sort.SliceStable(kids, func(i, j int) bool { return kids[i].FirstSeen < kids[j].FirstSeen })

	names := map[string]bool{}
	phaseOf := func(n *mnode) string {
		base := phaseName(n.Func, n.Name)
		name := base
		for i := 2; names[name]; i++ {
			name = fmt.Sprintf("%s_%d", base, i)
		}
		names[name] = true
		return name
	}
	kidPhase := make([]string, len(kids))
	for i, k := range kids {
		kidPhase[i] = phaseOf(k)
	}
	stepPhase := phaseOf(st)

	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	src := o.Source
	if src == "" {
		src = "a session's " + FileName
	}
	w("# Suggested by `specprof rules suggest` from %s (session preset %s).\n", src, f.Preset)
	w("# A starting point: check the phase names, the cycle's start_phase and\n")
	w("# the rules against the code, then pass the file with --rules.\n#\n")
	w("# The step function, the one whose callees take turns issuing GPU work:\n")
	w("#   %s (%s:%d)\n", st.Func, st.File, st.FirstLine)
	w("#   %d of the %d unattributed launches recorded (%.1f %%) ran under it;\n", st.Launches, root.Launches, pct(st.Launches, root.Launches))
	w("#   the rest (start-up, warm-up, other threads) keeps its phase.\n")
	w("name: suggested\n")
	w("description: %s\n", quote(fmt.Sprintf("suggested from the call tree: cycle %s, %d phases", st.Func, len(kids)+1)))
	w("phases:\n")
	for _, p := range kidPhase {
		w("  - %s\n", quote(p))
	}
	w("  - %s\n", quote(stepPhase))
	start := stepPhase
	if len(kids) > 0 {
		start = kidPhase[0]
	}
	w("# One call of the step function is one cycle; within one call, a cycle\n")
	w("# begins at each entry into start_phase, the phase seen first under it.\n")
	w("# If that callee runs more than once per step, pick one that runs once.\n")
	w("cycle:\n")
	if py310Only {
		w("  name: %s\n", quote(anchor(st.Name)))
	} else {
		w("  qualname: %s\n", quote(anchor(st.Func)))
	}
	w("  file: %s\n", quote(fileRegex(st.File)))
	w("  start_phase: %s\n", quote(start))
	if !py310Only {
		w("  py310: {name: %s, file: %s}\n", quote(anchor(st.Name)), quote(fileRegex(st.File)))
	}
	ambiguous := map[mkey]bool{} // co_name and file shared by two rules' functions (3.10 needs first_line)
	seen := map[[2]string]int{}
	all := append(append([]*mnode(nil), kids...), st)
	for _, n := range all {
		seen[[2]string{n.Name, n.File}]++
	}
	for _, n := range all {
		if seen[[2]string{n.Name, n.File}] > 1 {
			ambiguous[mkey{n.Name, n.File, n.FirstLine}] = true
		}
	}
	rule := func(n *mnode, phase string, py310 bool) {
		w("  - phase: %s\n", quote(phase))
		if py310 || py310Only {
			w("    name: %s\n", quote(anchor(n.Name)))
		} else {
			w("    qualname: %s\n", quote(anchor(n.Func)))
		}
		w("    file: %s\n", quote(fileRegex(n.File)))
		if (py310 || py310Only) && ambiguous[mkey{n.Name, n.File, n.FirstLine}] {
			w("    first_line: %d\n", n.FirstLine)
		}
	}
	writeRules := func(py310 bool) {
		for i, k := range kids {
			if !py310 {
				w("  # %s (%s:%d): %d launches, %.3f ms GPU kernel time\n", k.Func, k.File, k.FirstLine, k.Launches, float64(k.GPUNs)/1e6)
			}
			rule(k, kidPhase[i], py310)
		}
		if !py310 {
			var fl, sh []string
			for _, k := range folded {
				fl = append(fl, k.Func)
			}
			for _, k := range shared {
				sh = append(sh, k.Func)
			}
			w("  # %s itself: %d launches of its own", st.Func, st.Self)
			if len(sh) > 0 {
				w(", and those it makes through %s, which also run below its other callees (no phase of their own: the innermost matching frame wins)", strings.Join(sh, ", "))
			}
			if len(fl) > 0 {
				w(", and those of %s (past --max-children)", strings.Join(fl, ", "))
			}
			w("\n")
		}
		rule(st, stepPhase, py310)
	}
	w("rules:\n")
	writeRules(false)
	if !py310Only {
		w("# Python 3.10 has no co_qualname: the same functions by co_name and file.\n")
		w("py310_rules:\n")
		writeRules(true)
	}
	return []byte(b.String()), nil
}

func contains(n *mnode, k mkey) bool {
	for _, c := range n.order {
		if (mkey{c.Name, c.File, c.FirstLine}) == k || contains(c, k) {
			return true
		}
	}
	return false
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func pidList(f *File) string {
	var s []string
	for _, p := range f.Processes {
		s = append(s, fmt.Sprint(p.PID))
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

var nonName = regexp.MustCompile(`[^a-z0-9_.]+`)

// phaseName derives a phase name from a function: "Drafter.propose" gives
// "drafter.propose", "run_step" "run_step", closures and lambdas lose their
// "<locals>" parts.
func phaseName(qualname, name string) string {
	if qualname == "" {
		qualname = name
	}
	var parts []string
	for _, p := range strings.Split(qualname, ".") {
		if p == "" || p == "<locals>" {
			continue
		}
		parts = append(parts, p)
	}
	if len(parts) > 2 {
		parts = parts[len(parts)-2:]
	}
	s := strings.Trim(nonName.ReplaceAllString(strings.ToLower(strings.Join(parts, ".")), "_"), ".")
	switch s {
	case "":
		return "fn"
	case "other": // reserved for frames no rule matches
		return "fn_other"
	}
	return s
}

// anchor is a regex matching exactly s.
func anchor(s string) string { return "^" + regexp.QuoteMeta(s) + "$" }

// fileRegex matches a module file by its last three path components, so
// that the rule holds wherever the package is installed.
func fileRegex(file string) string {
	parts := strings.Split(path.Clean(file), "/")
	if len(parts) > 3 {
		parts = parts[len(parts)-3:]
	}
	return regexp.QuoteMeta(strings.Join(parts, "/")) + "$"
}

// quote writes s as a single-quoted YAML scalar.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
