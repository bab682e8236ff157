package agent

import (
	"testing"
	"time"

	"github.com/specprof/specprof/bpf"
	"github.com/specprof/specprof/cupti"
)

// TestCapturedByNodeTime: with no API records at all (the library was not
// collecting while the graph was captured), a kernel node is tied to the
// collective whose launch made it by the node's creation time: the thread's
// latest launch before it, within the slack. A node made by a later plain
// launch, a node of another type and a node too long after the launch are
// not the collective's; clones resolve to their original; node records
// that arrive before the eBPF launches they follow wait for them.
func TestCapturedByNodeTime(t *testing.T) {
	a := &Agent{opts: Options{LaunchSlack: 2 * time.Millisecond}}
	a.gpu = &GPUHandler{a: a, stats: map[int]*gpuProc{}}
	const pid, tid = 100, 101
	p := &process{pid: pid, threads: map[int]*thread{}}
	a.procs = map[int]*process{pid: p}
	th := &thread{tid: tid}
	ev := func(typ bpf.EventType, api bpf.API, at uint64, count uint64) *bpf.APIEvent {
		e := &bpf.APIEvent{API: api, Arg0: count}
		e.Type, e.PID, e.TID, e.Ktime = typ, pid, tid, at
		return e
	}
	node := func(id, ts uint64, typ uint32) cupti.GraphNode {
		return cupti.GraphNode{NodeID: id, Op: cupti.GraphNodeCreated, Tid: tid, Timestamp: ts, NodeType: typ}
	}
	const ms = uint64(time.Millisecond)
	// Nodes 1 and 2 arrive before the launches that made them are read.
	a.noteGraphNodes(pid, []cupti.GraphNode{node(1, 10*ms+3000, graphNodeKernel)})
	a.noteCaptureChain(p, th, ev(bpf.EvColl, bpf.APINcclAllReduce, 10*ms, 1024))
	a.noteCaptureChain(p, th, ev(bpf.EvLaunch, bpf.APILaunchKernelEx, 10*ms+1000, 0)) // NCCL's launch: node 1
	a.noteCaptureChain(p, th, ev(bpf.EvLaunch, bpf.APILaunchKernel, 10*ms+50_000, 0)) // a plain kernel: node 2
	a.noteGraphNodes(pid, []cupti.GraphNode{
		node(2, 10*ms+53_000, graphNodeKernel),
		node(3, 10*ms+60_000, 2), // a memset node after the launch: not a kernel's
	})
	a.noteCaptureChain(p, th, ev(bpf.EvColl, bpf.APINcclAllReduce, 20*ms, 4096))
	a.noteCaptureChain(p, th, ev(bpf.EvLaunch, bpf.APILaunchKernelEx, 20*ms+1000, 0))
	a.noteGraphNodes(pid, []cupti.GraphNode{
		node(4, 20*ms+1000+3*ms, graphNodeKernel), // 3 ms after the collective's launch: beyond the slack
		{NodeID: 10, OriginalNodeID: 1, Op: cupti.GraphNodeCloned, Tid: tid},
	})
	a.noteCaptureChain(p, th, ev(bpf.EvLaunch, bpf.APILaunchKernel, 30*ms, 0)) // eBPF time moves past them all

	for _, n := range []uint64{1, 10} {
		if c := a.capturedCollective(p, n); c == nil || c.Count != 1024 || c.Op != "AllReduce" {
			t.Errorf("node %d: %+v, want the 1024-element all-reduce", n, c)
		}
	}
	for _, n := range []uint64{2, 3, 4, 99} {
		if c := a.capturedCollective(p, n); c != nil {
			t.Errorf("node %d: tied to %+v, want none", n, c)
		}
	}
	if len(p.capColls.waiting) != 0 {
		t.Errorf("%d nodes still waiting", len(p.capColls.waiting))
	}
}
