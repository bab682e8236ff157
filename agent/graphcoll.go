package agent

import (
	"strings"

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

// capturedColls is one process's chain from graph nodes back to the
// collective calls that created them.
type capturedColls struct {
	last     map[int]*Collective         // by thread: its latest collective call, until its next launch
	pending  map[int][]collLaunch        // by thread: collective launches waiting for their API record
	prevEnd  map[int]uint64              // by thread: end of its latest API record
	byCorr   genMap[uint32, *Collective] // correlation id of a collective's launch → the call
	nodeCorr genMap[uint64, uint32]      // graph node → the correlation id of the call that created it
	nodeOrig genMap[uint64, uint64]      // cloned node → its original
}

// collLaunch is the kernel launch a collective call made.
type collLaunch struct {
	ktime uint64
	c     *Collective
}

// maxCaptured bounds each map of capturedColls (two generations);
// maxPendingColl the launches a thread keeps waiting for their records.
const (
	maxCaptured    = 1 << 15
	maxPendingColl = 64
)

func (p *process) captured() *capturedColls {
	if p.capColls == nil {
		p.capColls = &capturedColls{last: map[int]*Collective{}, pending: map[int][]collLaunch{}, prevEnd: map[int]uint64{},
			byCorr:   genMap[uint32, *Collective]{max: maxCaptured},
			nodeCorr: genMap[uint64, uint32]{max: maxCaptured}, nodeOrig: genMap[uint64, uint64]{max: maxCaptured}}
	}
	return p.capColls
}

// collectiveOf builds the collective of an NCCL call event.
func (a *Agent) collectiveOf(p *process, e *bpf.APIEvent) Collective {
	dt, red, peer := e.NCCLArgs()
	sz, ok := dtypeSize[dt]
	if !ok {
		sz = 1
	}
	return Collective{
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
		if c := cc.last[t.tid]; c != nil {
			q := append(cc.pending[t.tid], collLaunch{e.Ktime, c})
			if len(q) > maxPendingColl {
				q = q[len(q)-maxPendingColl:]
			}
			cc.pending[t.tid] = q
			delete(cc.last, t.tid)
		}
	}
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
	for i := range ns {
		n := &ns[i]
		switch n.Op {
		case cupti.GraphNodeCreated:
			if n.CorrelationID != 0 {
				cc.nodeCorr.put(n.NodeID, n.CorrelationID)
			}
		case cupti.GraphNodeCloned:
			cc.nodeOrig.put(n.NodeID, n.OriginalNodeID)
		}
	}
}

// capturedCollective is the collective call that created graph node node
// (or the node it was cloned from), nil when unknown.
func (a *Agent) capturedCollective(p *process, node uint64) *Collective {
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
	corr, ok := cc.nodeCorr.get(node)
	if !ok {
		return nil
	}
	// The node names the driver call (the launch callback's correlation
	// id), as does the driver API record matched to the launch.
	c, _ := cc.byCorr.get(corr)
	return c
}
