package agent

import (
	"sort"

	"github.com/specprof/specprof/agent/calltree"
	"github.com/specprof/specprof/bpf"
)

// The call tree of unattributed launches (calltree.json), what
// `specprof rules suggest` reads. BPF sends a call's Python stack only while
// the stack holds a code object whose class it has not been given; once
// every code object on a path is known it sends the phase alone. So the
// tree gets the stacks of first sights, plus recording windows: while at
// least half of a process's launches go unattributed, the agent takes back
// the classes it gave BPF for treeWindowNs every treePeriodNs (at most
// maxTreeWindows times), resolving the phases itself from the stacks BPF
// then sends with every call, and gives them back at the window's end.

const (
	// treePeriodNs is how often a process's share of unattributed launches
	// is looked at (by its launches' ktime), and a window may open.
	treePeriodNs = 1_000_000_000
	// treeWindowNs is how long a recording window lasts.
	treeWindowNs = 200_000_000
	// maxTreeWindows bounds the windows per process.
	maxTreeWindows = 30
	// maxTreeNodes bounds a process's tree.
	maxTreeNodes = 1 << 16
	// cycleSearch is how many frames BPF walks past the phase frame for
	// the cycle frame (SP_CYCLE_SEARCH in bpf/c/events.h): a walk that
	// found a phase and no cycle frame stopped there, unless the stack
	// ended first.
	cycleSearch = 16
)

type funcKey struct {
	qualname, name, file string
	firstLine            int
}

type treeNode struct {
	key      funcKey
	parent   *treeNode
	children map[funcKey]*treeNode
	calltree.Node
}

// procTree is one process's call tree and its recording windows.
type procTree struct {
	root    *treeNode
	nodes   int
	seq     int64
	stacks  int64
	cut     int64
	last    map[int]map[*treeNode]*treeNode // per thread: the child of each node its last launch came through
	windows int
	winOpen bool
	winEnd  uint64
	next    uint64 // the next look at the share
	// launches and unattributed launches since the last look
	launches, unattr int64
	// published is every class given to BPF, to give back after a window.
	published map[uint64]bpf.CodeClass
}

func (p *process) calltree() *procTree {
	if p.tree == nil {
		p.tree = &procTree{root: &treeNode{children: map[funcKey]*treeNode{}}, last: map[int]map[*treeNode]*treeNode{},
			published: map[uint64]bpf.CodeClass{}}
	}
	return p.tree
}

// publish gives BPF a code object's class, unless a recording window is
// open (then at its end).
func (a *Agent) publish(p *process, code uint64, bc bpf.CodeClass) error {
	pt := p.calltree()
	pt.published[code] = bc
	if pt.winOpen {
		return nil
	}
	return a.pr.SetCodeClass(p.pid, code, bc)
}

// forgetPublished: BPF's classes of the process are gone (ForgetCode).
func (p *process) forgetPublished() {
	if p.tree != nil {
		p.tree.published = map[uint64]bpf.CodeClass{}
	}
}

// treeWindow opens and closes recording windows, at a launch at ktime.
func (a *Agent) treeWindow(p *process, ktime uint64, unattributed bool) {
	pt := p.calltree()
	pt.launches++
	if unattributed {
		pt.unattr++
	}
	if pt.winOpen {
		if ktime >= pt.winEnd {
			pt.winOpen = false
			for code, bc := range pt.published {
				if err := a.pr.SetCodeClass(p.pid, code, bc); err != nil {
					p.problem(err.Error())
					break
				}
			}
		}
		return
	}
	if pt.next == 0 {
		pt.next = ktime + treePeriodNs
		return
	}
	if ktime < pt.next {
		return
	}
	poor := pt.unattr*2 >= pt.launches
	pt.launches, pt.unattr = 0, 0
	pt.next = ktime + treePeriodNs
	if poor && a.opts.CallTree && pt.windows < maxTreeWindows && p.sym != nil {
		pt.windows++
		pt.winOpen = true
		pt.winEnd = ktime + treeWindowNs
		a.pr.ForgetCode(p.pid)
	}
}

// treeLaunch adds an unattributed launch's stack to the tree, when the
// event carries it whole, and returns its innermost node (nil if not).
func (a *Agent) treeLaunch(p *process, t *thread, e *bpf.APIEvent, ph uint16) *treeNode {
	unattr := ph == 0 || !t.inCycle
	a.treeWindow(p, e.Ktime, unattr)
	py := &e.Py
	if !a.opts.CallTree || !unattr || p.sym == nil || py.Flags&bpf.PyUnknown == 0 || len(py.Frames) == 0 ||
		py.Flags&(bpf.PyTruncated|bpf.PyReadErr|bpf.PyStale) != 0 {
		return nil
	}
	if ph != 0 && int(py.Depth) >= py.Match+cycleSearch {
		return nil // the walk stopped short of the stack's bottom
	}
	pt := p.calltree()
	last := pt.last[t.tid]
	if last == nil {
		last = map[*treeNode]*treeNode{}
		pt.last[t.tid] = last
	}
	n := pt.root
	pt.stacks++
	for i := len(py.Frames) - 1; i >= -1; i-- {
		var next *treeNode
		if i >= 0 {
			c, err := p.sym.Code(py.Frames[i])
			if err != nil {
				continue // counted by the classification that read it
			}
			k := funcKey{qualname: c.Qualname, name: c.Name, file: c.Filename, firstLine: c.FirstLine}
			next = n.children[k]
			if next == nil {
				if pt.nodes >= maxTreeNodes {
					pt.cut++
					i = -1
				} else {
					pt.nodes++
					pt.seq++
					next = &treeNode{key: k, parent: n, children: map[funcKey]*treeNode{},
						Node: calltree.Node{Func: k.qualname, Name: k.name, File: k.file, FirstLine: k.firstLine, FirstSeen: pt.seq}}
					n.children[k] = next
				}
			}
		}
		n.Launches++
		// next == nil: the launch was made by n itself.
		if prev, ok := last[n]; ok && prev != next {
			n.Switches++
		}
		last[n] = next
		if next == nil {
			n.Self++
			return n
		}
		n = next
	}
	return n
}

// tree returns the process's call tree for calltree.json, nil if empty.
func (pt *procTree) export() *calltree.Node {
	if pt == nil || pt.stacks == 0 {
		return nil
	}
	var conv func(n *treeNode) *calltree.Node
	conv = func(n *treeNode) *calltree.Node {
		out := n.Node
		out.Children = nil
		for _, c := range n.children {
			out.Children = append(out.Children, conv(c))
		}
		sort.Slice(out.Children, func(i, j int) bool { return out.Children[i].FirstSeen < out.Children[j].FirstSeen })
		return &out
	}
	return conv(pt.root)
}

// CallTree returns the call trees of the unattributed launches of every
// process (for calltree.json). Call it after Finish.
func (a *Agent) CallTree() *calltree.File {
	a.mu.Lock()
	defer a.mu.Unlock()
	f := &calltree.File{Version: calltree.FormatVersion, Preset: a.opts.Preset.Name}
	for _, p := range a.procs {
		root := p.tree.export()
		if root == nil {
			continue
		}
		f.Processes = append(f.Processes, &calltree.Process{PID: p.pid, Cmdline: p.rep.Cmdline, Python: p.rep.Python,
			Windows: p.tree.windows, Stacks: p.tree.stacks, NodesDropped: p.tree.cut, Root: root})
	}
	sort.Slice(f.Processes, func(i, j int) bool { return f.Processes[i].PID < f.Processes[j].PID })
	return f
}
