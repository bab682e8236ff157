package agent

import (
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/ianlancetaylor/demangle"

	"github.com/specprof/specprof/agent/correlate"
	"github.com/specprof/specprof/agent/phase"
	"github.com/specprof/specprof/bpf"
)

// Building CycleTraces (trace.go) and the collective figures: the open
// cycle's builder collects calls as they come; GPU records joined to the
// cycle's keys land in it (or, once closed, in the closed cycle); the trace
// is finished and handed to Options.OnCycle when the cycle is drained, i.e.
// when its GPU side is final.

// cycleBuild is the timeline of one cycle under construction.
type cycleBuild struct {
	phases map[uint16]*PhaseTrace
	order  []uint16 // phases by first call
	sites  map[uint16]map[siteKey]*SiteCount
	// Collective kernels per phase (NCCL and custom all-reduce), for the
	// GPU side of the phase's collective calls.
	collK map[uint16][]GPUActivity
	// Launch calls of the cycle in time order with their site, to give
	// each GPU record its launching Python frame (with Options.Detail).
	launches []launchSite
}

type launchSite struct {
	ktime uint64
	site  *SiteCount
}

type siteKey struct {
	code  uint64
	instr uint64
}

func newCycleBuild() *cycleBuild {
	return &cycleBuild{phases: map[uint16]*PhaseTrace{}, sites: map[uint16]map[siteKey]*SiteCount{},
		collK: map[uint16][]GPUActivity{}}
}

func (b *cycleBuild) phase(ph uint16, m *phase.Matcher) *PhaseTrace {
	pt := b.phases[ph]
	if pt == nil {
		pt = &PhaseTrace{Phase: m.PhaseName(ph)}
		b.phases[ph] = pt
		b.order = append(b.order, ph)
	}
	return pt
}

// tracing reports whether per-cycle timelines are built.
func (a *Agent) tracing() bool { return a.opts.OnCycle != nil }

// frameOf symbolizes a code object (and, when instr is set, the line being
// executed) of p, caching by (code, instr).
func (a *Agent) frameOf(p *process, code, instr uint64) Frame {
	if p.sym == nil || code == 0 {
		return Frame{}
	}
	k := siteKey{code, instr}
	if f, ok := p.frames[k]; ok {
		return f
	}
	c, err := p.sym.Code(code)
	if err != nil {
		return Frame{}
	}
	f := Frame{Func: c.Qualname, File: c.Filename, Line: c.FirstLine}
	if instr != 0 {
		if l := p.sym.Line(c, instr); l > 0 {
			f.Line = l
		}
	}
	if p.frames == nil || len(p.frames) >= maxFrameCache {
		p.frames = map[siteKey]Frame{}
	}
	p.frames[k] = f
	return f
}

const maxFrameCache = 1 << 16

// traceCall records an attributed call in the open cycle's timeline.
func (a *Agent) traceCall(p *process, t *thread, e *bpf.APIEvent, ph uint16, m *phase.Matcher) {
	if !t.inCycle {
		return
	}
	if t.build == nil {
		t.build = newCycleBuild()
	}
	b := t.build
	pt := b.phase(ph, m)
	if pt.Func.IsZero() && e.Py.PhaseCode != 0 && ph != 0 {
		pt.Func = a.frameOf(p, e.Py.PhaseCode, 0)
	}
	switch e.Type {
	case bpf.EvLaunch:
		if e.Py.LeafCode == 0 {
			return
		}
		sm := b.sites[ph]
		if sm == nil {
			sm = map[siteKey]*SiteCount{}
			b.sites[ph] = sm
		}
		k := siteKey{e.Py.LeafCode, e.Py.LeafInstr}
		sc := sm[k]
		if sc == nil {
			sc = &SiteCount{Site: a.frameOf(p, k.code, k.instr)}
			sm[k] = sc
		}
		sc.Launches++
		if a.opts.Detail {
			b.launches = append(b.launches, launchSite{e.Ktime, sc})
		}
	case bpf.EvColl:
		if !e.API.IsCollective() {
			return
		}
		pt.Collectives = append(pt.Collectives, a.collectiveOf(p, e))
	}
}

// traceSync records a blocking call's return in the open cycle's timeline.
func (a *Agent) traceSync(p *process, t *thread, ps pendingSync, wait int64, m *phase.Matcher) {
	if !t.inCycle || ps.ktime < t.cycleFirst {
		return
	}
	if t.build == nil {
		t.build = newCycleBuild()
	}
	pt := t.build.phase(ps.phase, m)
	pt.Syncs = append(pt.Syncs, SyncTrace{API: ps.api.String(), Start: ps.ktime, WaitNs: wait, Site: ps.frame, Bytes: ps.bytes})
}

// closeTrace turns the open cycle's builder into the closed cycle's trace.
func (a *Agent) closeTrace(p *process, t *thread, cc *closedCycle) {
	b := t.build
	t.build = nil
	if b == nil {
		b = newCycleBuild()
	}
	cc.build = b
	cc.trace = &CycleTrace{PID: p.pid, TID: t.tid, Cycle: cc.no, Start: t.cycleFirst, End: t.cycleLast}
}

// onGPUJoin receives every GPU record joined to a live key: collective
// kernels always (for the collectives' GPU side), everything with Detail.
func (a *Agent) onGPUJoin(k correlate.Key, r *correlate.GPURecord) {
	a.attributeGPU(k, r)
	if k.Cycle <= 0 {
		return
	}
	// Per GPU record: the name and its class were looked up once per
	// (process, name id) when the record arrived.
	var kn kernelName
	if r.Kind == correlate.Kernel {
		kn = a.kernelNames[r.PID][r.Name]
	}
	name, coll := kn.name, kn.coll
	if r.Kind == correlate.Graph {
		name = "graph " + strconv.FormatUint(uint64(r.GraphID), 10)
	}
	if !coll && !(a.opts.Detail && a.tracing()) {
		return
	}
	p := a.procs[r.PID]
	if p == nil {
		return
	}
	t := p.threads[k.Thread]
	if t == nil {
		return
	}
	var b *cycleBuild
	var st *PhaseStats
	m := a.matcherOf(p)
	switch {
	case t.inCycle && k.Cycle == t.cycleNo:
		if t.build == nil {
			t.build = newCycleBuild()
		}
		b = t.build
		if pa := t.cur[k.Phase]; pa != nil {
			st = &pa.PhaseStats
		}
	default:
		cc := t.byCycle[k.Cycle]
		if cc == nil {
			return
		}
		b = cc.build
		st = cc.phase(k.Phase, m)
	}
	act := GPUActivity{Kind: r.Kind.String(), Name: name, Start: r.Start, End: r.End, Device: r.Device, Stream: r.Stream,
		Corr: r.Corr, Bytes: r.Bytes, Launch: r.APIStart, GraphID: r.GraphID, GraphNode: r.GraphNode}
	if coll {
		if st != nil && r.End > r.Start {
			st.CollGPUNs += int64(r.End - r.Start)
		}
		if b != nil {
			b.collK[k.Phase] = append(b.collK[k.Phase], act)
		}
	}
	if b != nil && a.opts.Detail && a.tracing() {
		pt := b.phase(k.Phase, m)
		pt.GPU = append(pt.GPU, act)
	}
}

// finishTrace completes a drained cycle's trace and hands it out.
func (a *Agent) finishTrace(p *process, t *thread, cc *closedCycle, m *phase.Matcher) {
	tr, b := cc.trace, cc.build
	if tr == nil || b == nil {
		return
	}
	tr.Rank, tr.Process = p.rankAndTitle()
	tr.GPU = cc.gpu
	if p.devices == nil && a.opts.GPUs != nil {
		// NVML lists a process once it has a CUDA context; the registry
		// bounds how often an unlisted pid queries the devices again.
		if d, err := a.opts.GPUs.ForPID(p.pid); err == nil && len(d) > 0 {
			p.devices = d
		}
	}
	tr.Devices = p.devices
	tr.Phases = make([]*PhaseTrace, 0, len(b.order))
	for _, ph := range b.order {
		pt := b.phases[ph]
		if st := cc.phases[ph]; st != nil {
			pt.Stats = st
		} else {
			pt.Stats = &PhaseStats{Phase: pt.Phase}
		}
		if pa := cc.spans[ph]; pa != [2]uint64{} {
			pt.Start, pt.End = pa[0], pa[1]
		}
		for _, s := range pt.Syncs {
			if e := s.Start + uint64(max(s.WaitNs, 0)); e > pt.End {
				pt.End = e
			}
		}
		if cf := p.cycleFrame; !cf.IsZero() {
			pt.Cycle = cf
		}
		sort.Slice(pt.GPU, func(i, j int) bool { return pt.GPU[i].Start < pt.GPU[j].Start })
		for i := range pt.GPU {
			g := &pt.GPU[i]
			if s := b.launchAt(g.Launch); s != nil {
				g.Site = s.Site
				if (g.Kind == "kernel" || g.Kind == "graph") && g.End > g.Start {
					s.GPUNs += int64(g.End - g.Start)
				}
			}
		}
		for _, s := range b.sites[ph] {
			pt.Sites = append(pt.Sites, *s)
		}
		sort.Slice(pt.Sites, func(i, j int) bool { return pt.Sites[i].Site.String() < pt.Sites[j].Site.String() })
		a.collectiveGPU(p, pt, b.collK[ph])
		tr.Phases = append(tr.Phases, pt)
	}
	sort.SliceStable(tr.Phases, func(i, j int) bool { return tr.Phases[i].Start < tr.Phases[j].Start })
	a.deliverCycle(tr)
}

// launchAt is the launch whose driver call began at apiStart: the last one
// of the thread at or before it (the uprobe fires at the call's first
// instruction, before CUPTI stamps its start).
func (b *cycleBuild) launchAt(apiStart uint64) *SiteCount {
	if apiStart == 0 {
		return nil
	}
	i := sort.Search(len(b.launches), func(i int) bool { return b.launches[i].ktime > apiStart })
	if i == 0 {
		return nil
	}
	return b.launches[i-1].site
}

// collectiveGPU pairs a phase's collective calls with the collective kernels
// its launches ran, in order (NCCL launches one kernel per collective, or
// per group), and adds kernels recognised by name that no call explains
// (custom all-reduce).
func (a *Agent) collectiveGPU(p *process, pt *PhaseTrace, ks []GPUActivity) {
	sort.Slice(ks, func(i, j int) bool { return ks[i].Start < ks[j].Start })
	ranks := a.ranksFor(p)
	calls := len(pt.Collectives)
	j := 0
	for _, k := range ks {
		nccl := strings.HasPrefix(k.Name, "nccl")
		if nccl && j < calls {
			c := &pt.Collectives[j]
			j++
			c.Ranks = ranks
			c.Kernel, c.GPUStart, c.GPUEnd = k.Name, k.Start, k.End
			c.Algorithm, c.Protocol = ncclAlgoProto(k.Name)
			c.AlgBWGBps, c.BusBWGBps = bandwidth(c.Op, c.Bytes, c.GPUNs(), ranks)
			continue
		}
		// A kernel no call of the phase explains: a custom all-reduce, or
		// an NCCL kernel replayed from a CUDA graph (its call happened at
		// capture: graphcoll.go finds it; else its size is not known).
		c := Collective{Op: "AllReduce", Time: k.Launch, Kernel: k.Name, GPUStart: k.Start, GPUEnd: k.End, Peer: -1,
			Ranks: ranks}
		if nccl {
			c.Op, c.Reduce, c.Dtype = ncclKernelOp(k.Name)
			c.Algorithm, c.Protocol = ncclAlgoProto(k.Name)
			if cap := a.capturedCollective(p, k.GraphNode); cap != nil {
				c.Op, c.API, c.Count, c.Dtype, c.Reduce, c.Bytes = cap.Op, cap.API, cap.Count, cap.Dtype, cap.Reduce, cap.Bytes
				c.Comm, c.Peer, c.Site, c.Captured = cap.Comm, cap.Peer, cap.Site, true
				c.AlgBWGBps, c.BusBWGBps = bandwidth(c.Op, c.Bytes, c.GPUNs(), ranks)
				if st := pt.Stats; st != nil { // the phase's collectives include its replayed ones
					st.Colls++
					st.CollBytes += c.Bytes
				}
			}
		}
		pt.Collectives = append(pt.Collectives, c)
	}
	for ; j < calls; j++ {
		// Calls without a kernel (lost, or a group's later members) keep
		// their call-side figures.
		pt.Collectives[j].Ranks = ranks
	}
	sort.SliceStable(pt.Collectives, func(a, b int) bool { return pt.Collectives[a].Time < pt.Collectives[b].Time })
}

// kernelDisplayName is the name reports show for a kernel: CUPTI gives
// C++ kernels their mangled names (NCCL's
// _Z40ncclDevKernel_AllReduce_Sum_bf16_RING_LL24ncclDevKernelArgsStorageILm4096EE),
// demangled here as profilers show them
// (ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)).
// A name that does not demangle is kept as it is.
func kernelDisplayName(raw string) string {
	if !strings.HasPrefix(raw, "_Z") {
		return raw
	}
	return demangle.Filter(raw)
}

// kernelBaseName drops a demangled name's parameter list.
func kernelBaseName(name string) string {
	if i := strings.IndexByte(name, '('); i >= 0 {
		return name[:i]
	}
	return name
}

// ncclKernelOp parses the operation, reduction and type out of an NCCL
// kernel name (ncclDevKernel_AllReduce_Sum_bf16_RING_LL, parameters
// allowed).
func ncclKernelOp(name string) (op, red, dtype string) {
	parts := strings.Split(kernelBaseName(name), "_")
	if len(parts) < 2 {
		return "Unknown", "", ""
	}
	op = parts[1]
	if len(parts) >= 4 {
		red = strings.ToLower(parts[2])
		dtype = map[string]string{"f16": "float16", "f32": "float32", "f64": "float64", "bf16": "bfloat16",
			"i8": "int8", "u8": "uint8", "i32": "int32", "u32": "uint32", "i64": "int64", "u64": "uint64",
			"f8e4m3": "float8e4m3", "f8e5m2": "float8e5m2"}[parts[3]]
		if dtype == "" {
			dtype = parts[3]
		}
	}
	return op, red, dtype
}

// kernelName is a kernel's name and whether it is a collective's.
type kernelName struct {
	name string
	coll bool
}

// isCollectiveKernel recognises NCCL's kernels and the custom all-reduce
// kernels of SGLang/vLLM (cross_device_reduce_1stage/2stage) and of
// torch's symmetric memory.
func isCollectiveKernel(name string) bool {
	if name == "" {
		return false
	}
	if strings.HasPrefix(name, "ncclDevKernel_") || strings.HasPrefix(name, "ncclKernel_") {
		return true
	}
	// Templates and namespaces put the identifier inside the name.
	return strings.Contains(name, "cross_device_reduce") || strings.Contains(name, "one_shot_all_reduce") ||
		strings.Contains(name, "two_shot_all_reduce") || strings.Contains(name, "multimem_all_reduce")
}

// ncclAlgoProto parses ncclDevKernel_<Op>_<Red>_<type>_<ALGO>_<PROTO>
// (parameters allowed).
func ncclAlgoProto(name string) (algo, proto string) {
	parts := strings.Split(kernelBaseName(name), "_")
	if len(parts) < 3 {
		return "", ""
	}
	switch pr := parts[len(parts)-1]; pr {
	case "LL", "LL128", "SIMPLE":
		proto = pr
	default:
		return "", ""
	}
	al := parts[len(parts)-2]
	// Two-word algorithms: COLLNET_DIRECT, COLLNET_CHAIN, NVLS_TREE.
	if len(parts) >= 4 {
		switch two := parts[len(parts)-3] + "_" + al; two {
		case "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS_TREE":
			return two, proto
		}
	}
	switch al {
	case "RING", "TREE", "NVLS", "PAT", "COLLNET":
		return al, proto
	}
	return "", proto
}

// bandwidth follows NCCL's definitions (nccl-tests PERFORMANCE.md): algbw is
// the operation's size over its time, busbw algbw times the factor that
// makes it comparable to the hardware's peak: 2(n-1)/n for AllReduce,
// (n-1)/n for AllGather and ReduceScatter (whose size is n × the per-rank
// count), 1 for Broadcast, Reduce and point-to-point. ranks 0: unknown.
func bandwidth(op string, bytes, ns int64, ranks int) (alg, bus float64) {
	if bytes <= 0 || ns <= 0 {
		return 0, 0
	}
	n := float64(ranks)
	size := float64(bytes)
	factor := 1.0
	switch op {
	case "AllReduce":
		if ranks > 0 {
			factor = 2 * (n - 1) / n
		}
	case "AllGather", "ReduceScatter":
		if ranks > 0 {
			size *= n
			factor = (n - 1) / n
		}
	}
	alg = size / float64(ns) // bytes/ns == GB/s
	if ranks <= 0 && (op == "AllReduce" || op == "AllGather" || op == "ReduceScatter") {
		return alg, 0
	}
	return alg, alg * factor
}

var ncclDtypes = []string{"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64",
	"bfloat16", "float8e4m3", "float8e5m2"}

func ncclDtypeName(dt uint8) string {
	if int(dt) < len(ncclDtypes) {
		return ncclDtypes[dt]
	}
	return "dtype" + strconv.Itoa(int(dt))
}

func ncclRedName(op uint8) string {
	switch op {
	case 0:
		return "sum"
	case 1:
		return "prod"
	case 2:
		return "max"
	case 3:
		return "min"
	case 4:
		return "avg"
	case 0xff:
		return ""
	}
	return "premul" + strconv.Itoa(int(op))
}

var tpRank = regexp.MustCompile(`(?:^|[^A-Za-z])TP(\d+)`)

// rankAndTitle returns the tensor-parallel rank (from the process title,
// e.g. sglang::scheduler_TP1, or the RANK / LOCAL_RANK environment), -1
// when unknown, and the title. The title is read at the first cycle:
// servers set it after start.
func (p *process) rankAndTitle() (int, string) {
	if !p.titleRead {
		p.titleRead = true
		p.rank = -1
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/cmdline"); err == nil {
			p.title = strings.TrimRight(strings.ReplaceAll(string(b), "\x00", " "), " ")
		}
		if p.title == "" {
			p.title = p.rep.Cmdline
		} else {
			p.rep.Cmdline = p.title // the report names the process by its title too
		}
		if m := tpRank.FindStringSubmatch(p.title); m != nil {
			p.rank, _ = strconv.Atoi(m[1])
		} else if env, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/environ"); err == nil {
			for _, kv := range strings.Split(string(env), "\x00") {
				for _, k := range []string{"RANK=", "LOCAL_RANK="} {
					if v, ok := strings.CutPrefix(kv, k); ok && p.rank < 0 {
						if n, err := strconv.Atoi(v); err == nil {
							p.rank = n
						}
					}
				}
			}
		}
	}
	return p.rank, p.title
}

// ranksFor is the number of ranks of p's communicators for bus bandwidth:
// Options.CollectiveRanks when set, else the number of traced processes
// that made collective calls (one specprof session per node sees every
// rank of single-node tensor parallelism), 0 when that is 1.
func (a *Agent) ranksFor(p *process) int {
	if a.opts.CollectiveRanks > 0 {
		return a.opts.CollectiveRanks
	}
	n := 0
	for _, q := range a.procs {
		if q.collectives {
			n++
		}
	}
	if n <= 1 {
		return 0
	}
	return n
}

func (a *Agent) noteCycleFrame(p *process, code uint64) {
	if p.cycleFrame.IsZero() {
		p.cycleFrame = a.frameOf(p, code, 0)
	}
}
