package agent

import (
	"strings"

	"github.com/specprof/specprof/model"

	"github.com/specprof/specprof/bpf"
	"github.com/specprof/specprof/cupti"
)

// Collectives captured into CUDA graphs. NCCL launches its kernel inside
// the collective call; made during stream capture, that launch creates a
// graph node (CUPTI's GRAPHNODE_CREATED names the launching call's
// correlation id), and each replay runs a clone of the node (the replayed
// kernel's record carries the clone's node id, GRAPHNODE_CLONED its
// original). Following replayed kernel → clone → node → creating call (its
// driver API record) → the eBPF launch inside it → the collective call just
// before that launch gives a replayed collective the arguments of the call
// that was captured: count, dtype, bytes and the Python site. Without it a
// replayed NCCL kernel has only its name (SGLang and vLLM replay their
// decode steps from graphs).
//
// The creating call's API record exists only while the library is connected
// and collecting, and a few launches never get one; so the node's own
// creation time (taken inside the call, after its eBPF entry probe) ties it
// to the thread's latest launch before it as well: a kernel node created
// within LaunchSlack of a collective's launch, with no launch in between,
// is that collective's.

// genMap is a map bounded to two generations of max entries each: old
// entries are forgotten in bulk.
type genMap[K comparable, V any] struct {
	cur, prev map[K]V
	max       int
}

func (m *genMap[K, V]) put(k K, v V) {
	if m.cur == nil {
		m.cur = map[K]V{}
	}
	if len(m.cur) >= m.max {
		m.prev, m.cur = m.cur, make(map[K]V, m.max)
	}
	m.cur[k] = v
}

func (m *genMap[K, V]) get(k K) (V, bool) {
	if v, ok := m.cur[k]; ok {
		return v, true
	}
	v, ok := m.prev[k]
	return v, ok
}

// graphNodeKernel is CU_GRAPH_NODE_TYPE_KERNEL.
const graphNodeKernel = 0

// capturedColls is one process's chain from graph nodes back to the
// collective calls that created them.
type capturedColls struct {
	last     map[int]*model.Collective         // by thread: its latest collective call, until its next launch
	pending  map[int][]collLaunch              // by thread: collective launches waiting for their API record
	prevEnd  map[int]uint64                    // by thread: end of its latest API record
	byCorr   genMap[uint32, *model.Collective] // correlation id of a collective's launch → the call
	nodeCorr genMap[uint64, uint32]            // graph node → the correlation id of the call that created it
	nodeOrig genMap[uint64, uint64]            // cloned node → its original
	byNode   genMap[uint64, *model.Collective] // graph node → the collective whose launch created it (by time)
	launches map[int]*launchRing               // by thread: its latest kernel launches
	waiting  []nodeAt                          // kernel nodes waiting for the eBPF launches before them
	seen     uint64                            // latest launch time read from eBPF
}

// launchRing keeps a thread's latest kernel launches, with the collective
// each one made (nil for the others).
type launchRing struct {
	at [launchRingN]collLaunch
	n  int
}

func (r *launchRing) add(l collLaunch) {
	r.at[r.n%launchRingN] = l
	r.n++
}

// before returns the latest launch at or before t.
func (r *launchRing) before(t uint64) (collLaunch, bool) {
	for i := r.n - 1; i >= 0 && i >= r.n-launchRingN; i-- {
		if l := r.at[i%launchRingN]; l.ktime <= t {
			return l, true
		}
	}
	return collLaunch{}, false
}

// nodeAt is a kernel node's creation: thread and CLOCK_MONOTONIC time.
type nodeAt struct {
	tid      int
	ts, node uint64
}

// collLaunch is the kernel launch a collective call made.
type collLaunch struct {
	ktime uint64
	c     *model.Collective
}

// maxCaptured bounds each map of capturedColls (two generations);
// maxPendingColl the launches a thread keeps waiting for their records.
// launchRingN is the launches a thread keeps for that (more than it makes
// while nodeSettle passes); nodeSettle how far eBPF time must be past a
// node's creation before the launches before it are all read (records of
// different CPUs reach user space up to a few µs out of order).
const (
	maxCaptured    = 1 << 15
	maxPendingColl = 64
	launchRingN    = 256
	nodeSettle     = 200_000 // ns
)

func (p *process) captured() *capturedColls {
	if p.capColls == nil {
		p.capColls = &capturedColls{last: map[int]*model.Collective{}, pending: map[int][]collLaunch{}, prevEnd: map[int]uint64{},
			byCorr:   genMap[uint32, *model.Collective]{max: maxCaptured},
			nodeCorr: genMap[uint64, uint32]{max: maxCaptured}, nodeOrig: genMap[uint64, uint64]{max: maxCaptured},
			byNode: genMap[uint64, *model.Collective]{max: maxCaptured}, launches: map[int]*launchRing{}}
	}
	return p.capColls
}

// collectiveOf builds the collective of an NCCL call event.
func (a *Agent) collectiveOf(p *process, e *bpf.APIEvent) model.Collective {
	dt, red, peer := e.NCCLArgs()
	sz, ok := dtypeSize[dt]
	if !ok {
		sz = 1
	}
	return model.Collective{
		Op: strings.TrimPrefix(e.API.String(), "nccl"), API: e.API.String(), Time: e.Ktime,
		Count: e.Arg0, Dtype: ncclDtypeName(dt), Reduce: ncclRedName(red), Bytes: int64(e.Arg0) * sz,
		Comm: e.Handle, Stream: e.Stream, Peer: peer, Site: a.frameOf(p, e.Py.LeafCode, e.Py.LeafInstr)}
}

// noteCaptureChain follows a thread's collective calls to the kernel launch
// each makes, when this session receives GPU records (Agent.GPU). It does
// not wait for the process's CUPTI connection to be known: graphs are often
// captured right after CUDA starts, as the library connects.
func (a *Agent) noteCaptureChain(p *process, t *thread, e *bpf.APIEvent) {
	if a.gpu == nil {
		return
	}
	switch {
	case e.Type == bpf.EvColl && e.API.IsCollective():
		c := a.collectiveOf(p, e)
		p.captured().last[t.tid] = &c
	case e.Type == bpf.EvLaunch && (e.API == bpf.APILaunchKernel || e.API == bpf.APILaunchKernelEx):
		cc := p.capColls
		if cc == nil {
			return
		}
		c := cc.last[t.tid]
		if c != nil {
			q := append(cc.pending[t.tid], collLaunch{e.Ktime, c})
			if len(q) > maxPendingColl {
				q = q[len(q)-maxPendingColl:]
			}
			cc.pending[t.tid] = q
			delete(cc.last, t.tid)
		}
		r := cc.launches[t.tid]
		if r == nil {
			r = &launchRing{}
			cc.launches[t.tid] = r
		}
		r.add(collLaunch{e.Ktime, c})
	}
	// Any call read from eBPF tells how far its stream has come.
	if cc := p.capColls; cc != nil {
		cc.seen = max(cc.seen, e.Ktime)
		if len(cc.waiting) > 0 {
			a.matchNodes(cc)
		}
	}
}

// matchNodes ties the waiting kernel nodes whose launches are all read to
// the collective whose launch created them, if any.
func (a *Agent) matchNodes(cc *capturedColls) {
	slack := uint64(a.opts.LaunchSlack)
	keep := cc.waiting[:0]
	for _, w := range cc.waiting {
		if w.ts+nodeSettle > cc.seen {
			keep = append(keep, w)
			continue
		}
		if r := cc.launches[w.tid]; r != nil {
			if l, ok := r.before(w.ts); ok && l.c != nil && w.ts-l.ktime <= slack {
				cc.byNode.put(w.node, l.c)
			}
		}
	}
	if len(keep) > maxCaptured {
		keep = keep[len(keep)-maxCaptured:]
	}
	cc.waiting = keep
}

// noteCollLaunches ties collective launches to the correlation ids of their
// API records, as the joiner does for every launch: the record that
// contains the launch (within slack of its start), or, as the thread's
// records come in order, the first record after the launch when it was
// made after the thread's previous record ended (preempted before CUPTI
// stamped the call).
func (a *Agent) noteCollLaunches(p *process, apis []cupti.API) {
	cc := p.capColls
	if cc == nil {
		return
	}
	slack := uint64(a.opts.LaunchSlack)
	for i := range apis {
		r := &apis[i]
		tid := int(r.Tid)
		prev := cc.prevEnd[tid]
		cc.prevEnd[tid] = max(prev, r.End)
		q := cc.pending[tid]
		j := -1
		for k := len(q) - 1; k >= 0; k-- {
			if q[k].ktime <= r.End {
				j = k
				break
			}
		}
		if j < 0 {
			continue
		}
		if l := q[j]; l.ktime+slack >= r.Start || l.ktime > prev {
			cc.byCorr.put(r.CorrelationID, l.c)
			cc.pending[tid] = q[j+1:]
		}
	}
}

// noteGraphNodes records a batch's graph node creations and clones.
func (a *Agent) noteGraphNodes(pid int, ns []cupti.GraphNode) {
	if len(ns) == 0 {
		return
	}
	p := a.procs[pid]
	if p == nil {
		return
	}
	cc := p.captured()
	defer a.matchNodes(cc)
	for i := range ns {
		n := &ns[i]
		switch n.Op {
		case cupti.GraphNodeCreated:
			if n.CorrelationID != 0 {
				cc.nodeCorr.put(n.NodeID, n.CorrelationID)
			}
			if n.Timestamp != 0 && n.NodeType == graphNodeKernel {
				cc.waiting = append(cc.waiting, nodeAt{tid: int(n.Tid), ts: n.Timestamp, node: n.NodeID})
			}
		case cupti.GraphNodeCloned:
			cc.nodeOrig.put(n.NodeID, n.OriginalNodeID)
		}
	}
}

// capturedCollective is the collective call that created graph node node
// (or the node it was cloned from), nil when unknown.
func (a *Agent) capturedCollective(p *process, node uint64) *model.Collective {
	cc := p.capColls
	if node == 0 || cc == nil {
		return nil
	}
	for range 4 { // clones of clones
		o, ok := cc.nodeOrig.get(node)
		if !ok || o == node {
			break
		}
		node = o
	}
	if len(cc.waiting) > 0 {
		a.matchNodes(cc)
	}
	if c, ok := cc.byNode.get(node); ok {
		return c
	}
	corr, ok := cc.nodeCorr.get(node)
	if !ok {
		return nil
	}
	// The node names the driver call (the launch callback's correlation
	// id), as does the driver API record matched to the launch.
	c, _ := cc.byCorr.get(corr)
	return c
}
