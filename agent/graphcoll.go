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
// original). Following replayed kernel → clone → node → creating call →
// the eBPF launch it matched → the collective call just before it gives a
// replayed collective the arguments of the call that was captured: count,
// dtype, bytes and the Python site. Without it a replayed NCCL kernel has
// only its name (SGLang and vLLM replay their decode steps from graphs).

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
	byLaunch genMap[uint64, *Collective] // launch ktime → the collective call it launched for
	byCorr   genMap[uint32, *Collective] // correlation id of that launch → the call
	nodeCorr genMap[uint64, uint32]      // graph node → the correlation id of the call that created it
	nodeOrig genMap[uint64, uint64]      // cloned node → its original
}

// maxCaptured bounds each map of capturedColls (two generations).
const maxCaptured = 1 << 15

func (p *process) captured() *capturedColls {
	if p.capColls == nil {
		p.capColls = &capturedColls{last: map[int]*Collective{},
			byLaunch: genMap[uint64, *Collective]{max: maxCaptured}, byCorr: genMap[uint32, *Collective]{max: maxCaptured},
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
// each makes (only while GPU records are joined: the chain needs CUPTI's
// graph nodes).
func (a *Agent) noteCaptureChain(p *process, t *thread, e *bpf.APIEvent) {
	if a.joiner == nil || !a.gpu.connected(p.pid) {
		return
	}
	switch {
	case e.Type == bpf.EvColl && e.API.IsCollective():
		c := a.collectiveOf(p, e)
		p.captured().last[t.tid] = &c
	case e.Type == bpf.EvLaunch && (e.API == bpf.APILaunchKernel || e.API == bpf.APILaunchKernelEx):
		if p.capColls == nil {
			return
		}
		if c := p.capColls.last[t.tid]; c != nil {
			p.capColls.byLaunch.put(e.Ktime, c)
			delete(p.capColls.last, t.tid)
		}
	}
}

// onLaunchMatch (correlate.Options.OnMatch) ties a collective's launch to
// its correlation id.
func (a *Agent) onLaunchMatch(pid int, corr uint32, ktime uint64) {
	p := a.procs[pid]
	if p == nil || p.capColls == nil {
		return
	}
	if c, ok := p.capColls.byLaunch.get(ktime); ok {
		p.capColls.byCorr.put(corr, c)
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
	// The node names the driver call; the launch matched the runtime call
	// around it when there was one.
	if c, ok := cc.byCorr.get(a.aliases(p.pid).of(corr)); ok {
		return c
	}
	c, _ := cc.byCorr.get(corr)
	return c
}
