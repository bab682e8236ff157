package agent

import (
	"sync"
	"time"

	"github.com/specprof/specprof/cupti"
)

// GPUStats counts what the injected CUPTI library delivered for one process.
type GPUStats struct {
	Connections int    `json:"connections"`
	CUPTI       uint32 `json:"cupti_version"`
	Kernels     int64  `json:"kernels"`
	GraphKernel int64  `json:"graph_kernels"`
	KernelNs    int64  `json:"kernel_ns"` // sum of kernel durations (streams overlap: not busy time)
	Memcpys     int64  `json:"memcpys"`
	MemcpyBytes int64  `json:"memcpy_bytes"`
	Memsets     int64  `json:"memsets"`
	APIs        int64  `json:"api_records"`
	Syncs       int64  `json:"syncs"`
	GraphNodes  int64  `json:"graph_nodes"`
	Overheads   int64  `json:"overhead_records"`
	FirstNs     uint64 `json:"first_ns"` // CLOCK_MONOTONIC of the earliest GPU record
	LastNs      uint64 `json:"last_ns"`
	// Counters reported by the library itself (latest STATS record).
	Delivered           uint64 `json:"lib_records_delivered"`
	DroppedCUPTI        uint64 `json:"lib_dropped_by_cupti"`
	DroppedNoAgent      uint64 `json:"lib_dropped_no_agent"`
	DroppedBackpressure uint64 `json:"lib_dropped_backpressure"`
	DroppedDisconnect   uint64 `json:"lib_dropped_disconnect"`
	// CUPTI detached once nothing more was to be traced (--cupti-detach; final): 0 or 1,
	// and the time the application thread that ran the detach waited.
	Detaches      uint64 `json:"lib_cupti_detaches,omitempty"`
	DetachStallNs uint64 `json:"lib_detach_stall_ns,omitempty"`
	// DetachRefused is 1 when a detach was due but the process had built
	// CUDA graphs under CUPTI, whose launches fail after cuptiFinalize: it
	// was not finalized. DetachQuiet says what was done instead: 1 every
	// CUPTI callback turned off, 2 and unsubscribed
	// (SPECPROF_CUPTI_GRAPH_DETACH=unsubscribe); 0 CUPTI stayed attached as
	// it was.
	DetachRefused uint64 `json:"lib_cupti_detach_refused,omitempty"`
	DetachQuiet   uint64 `json:"lib_cupti_detach_quiet,omitempty"`
	// GPUSwitches counts the switches of CUPTI's GPU activity kinds (on at
	// a connection or a window, off after it), each made by an application
	// thread in a CUDA call's exit callback, and the time those threads
	// spent in them: in all and the longest.
	GPUSwitches    uint64 `json:"lib_gpu_switches,omitempty"`
	GPUSwitchNs    uint64 `json:"lib_gpu_switch_ns,omitempty"`
	GPUSwitchMaxNs uint64 `json:"lib_gpu_switch_max_ns,omitempty"`
	// DutyStopped is 1 when duty-cycled windows stopped opening because the
	// process had built CUDA graphs (only with SPECPROF_CUPTI_DUTY_GRAPHS=0,
	// the guard kept from before switches waited for the GPU).
	DutyStopped uint64 `json:"lib_duty_stopped_graphs,omitempty"`
}

// RecordsPerSecond is the delivery rate over the span of the GPU records.
func (g *GPUStats) RecordsPerSecond() float64 {
	if g.LastNs <= g.FirstNs {
		return 0
	}
	n := g.Kernels + g.Memcpys + g.Memsets + g.APIs + g.Syncs + g.GraphNodes + g.Overheads
	return float64(n) / (float64(g.LastNs-g.FirstNs) / 1e9)
}

// KernelRecord is one GPU kernel as handed to Options.OnKernel.
type KernelRecord struct {
	PID           int
	Name          string
	Start, End    uint64
	Stream        uint32
	Device        uint32
	CorrelationID uint32
	GraphID       uint32
	GraphNodeID   uint64
}

// APIRecord is one driver-API record from CUPTI (the CPU side of a call,
// with the correlation id its GPU work carries), as handed to Options.OnAPI.
type APIRecord struct {
	PID, TID      int
	Cbid          uint32
	Start, End    uint64
	CorrelationID uint32
}

// GPUHandler is the cupti.Handler that feeds CUPTI records into the agent.
type GPUHandler struct {
	a     *Agent
	mu    sync.Mutex
	stats map[int]*GPUStats
	conns map[*cupti.Conn]*connQuiet // live connections
}

// connQuiet is when a connection last moved its process's GPU watermark
// (records, or a flush's answer), when the agent last asked it to flush, and
// the end of the last cycle it was told of (requestWindows).
type connQuiet struct {
	moved, asked time.Time
	cycleTold    uint64
}

// quietFlushAfter is how long a connection may move nothing before the agent
// asks its library to flush, while cycles of its process wait for their GPU
// side: a process that goes idle delivers nothing more, so without its
// answer the watermark that decides those cycles would stand still until the
// process made GPU work again or the session ended.
const quietFlushAfter = 500 * time.Millisecond

// GPU returns the handler for the CUPTI receiver (cupti.Receiver.Serve).
func (a *Agent) GPU() *GPUHandler {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gpu == nil {
		a.gpu = &GPUHandler{a: a, stats: map[int]*GPUStats{}, conns: map[*cupti.Conn]*connQuiet{}}
	}
	return a.gpu
}

func (h *GPUHandler) of(c *cupti.Conn) *GPUStats {
	pid := int(c.Info().Pid)
	s := h.stats[pid]
	if s == nil {
		s = &GPUStats{}
		h.stats[pid] = s
	}
	return s
}

// Open implements cupti.Handler.
func (h *GPUHandler) Open(c *cupti.Conn) {
	if hello := c.Info().Hello; hello.Types&(1<<cupti.TypeWindow) != 0 {
		h.a.mu.Lock()
		h.a.dutyCycled(int(hello.Pid))
		h.a.mu.Unlock()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.of(c)
	s.Connections++
	s.CUPTI = c.Info().CuptiVersion
	h.conns[c] = &connQuiet{moved: time.Now()}
}

// Records implements cupti.Handler.
func (h *GPUHandler) Records(c *cupti.Conn, b *cupti.Batch) {
	h.a.mu.Lock()
	h.a.feedJoiner(c, b)
	h.a.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.conns[c]; q != nil && (b.Len() > len(b.Windows) || b.FlushAck) {
		q.moved = time.Now()
	}
	s := h.of(c)
	span := func(start, end uint64) {
		if start != 0 && (s.FirstNs == 0 || start < s.FirstNs) {
			s.FirstNs = start
		}
		if end > s.LastNs {
			s.LastNs = end
		}
	}
	onKernel := h.a.opts.OnKernel
	for i := range b.Kernels {
		k := &b.Kernels[i]
		s.Kernels++
		if k.GraphID != 0 {
			s.GraphKernel++
		}
		if k.End > k.Start {
			s.KernelNs += int64(k.End - k.Start)
		}
		span(k.Start, k.End)
		if onKernel != nil {
			onKernel(&KernelRecord{PID: int(c.Info().Pid), Name: c.Name(k.NameID), Start: k.Start, End: k.End,
				Stream: k.Stream, Device: k.Device, CorrelationID: k.CorrelationID, GraphID: k.GraphID, GraphNodeID: k.GraphNodeID})
		}
	}
	for i := range b.Memcpys {
		s.Memcpys++
		s.MemcpyBytes += int64(b.Memcpys[i].Bytes)
		span(b.Memcpys[i].Start, b.Memcpys[i].End)
	}
	s.Memsets += int64(len(b.Memsets))
	s.APIs += int64(len(b.APIs))
	if onAPI := h.a.opts.OnAPI; onAPI != nil {
		for i := range b.APIs {
			r := &b.APIs[i]
			onAPI(&APIRecord{PID: int(r.Pid), TID: int(r.Tid), Cbid: r.Cbid, Start: r.Start, End: r.End, CorrelationID: r.CorrelationID})
		}
	}
	s.Syncs += int64(len(b.Syncs))
	s.GraphNodes += int64(len(b.GraphNodes))
	s.Overheads += int64(len(b.Overheads))
	if st := b.Stats; st != nil {
		s.Delivered = st.RecordsDelivered
		s.DroppedCUPTI = st.DroppedCUPTI
		s.DroppedNoAgent = st.DroppedNoAgent
		s.DroppedBackpressure = st.DroppedBackpressure
		s.DroppedDisconnect = st.DroppedDisconnect
		s.Detaches, s.DetachStallNs, s.DetachRefused = st.Detaches, st.DetachStallNs, st.DetachRefused
		s.GPUSwitches, s.GPUSwitchNs, s.GPUSwitchMaxNs = st.GpuSwitches, st.GpuSwitchNs, st.GpuSwitchMaxNs
		s.DutyStopped = st.DutyStopped
		s.DetachQuiet = st.DetachQuiet
	}
}

// Close implements cupti.Handler.
func (h *GPUHandler) Close(c *cupti.Conn, err error) {
	if err != nil {
		h.a.log.Warn("CUPTI connection ended", "pid", c.Info().Pid, "err", err)
	}
	h.mu.Lock()
	delete(h.conns, c)
	h.mu.Unlock()
}

// flushQuiet asks the libraries of processes whose cycles wait for their GPU
// side, and whose connection has moved nothing for quietFlushAfter, to flush
// (at most once per quietFlushAfter each). The answer says that everything
// the GPU completed before it has been delivered.
func (a *Agent) flushQuiet(now time.Time) {
	a.mu.Lock()
	h := a.gpu
	var waiting map[int]bool
	for pid, p := range a.procs {
		for _, t := range p.threads {
			if len(t.closed) > 0 {
				if waiting == nil {
					waiting = map[int]bool{}
				}
				waiting[pid] = true
				break
			}
		}
	}
	a.mu.Unlock()
	if h == nil || waiting == nil || a.noQuietFlush {
		return
	}
	var ask []*cupti.Conn
	h.mu.Lock()
	for c, q := range h.conns {
		if waiting[int(c.Info().Pid)] && now.Sub(q.moved) >= quietFlushAfter && now.Sub(q.asked) >= quietFlushAfter {
			q.asked = now
			ask = append(ask, c)
		}
	}
	h.mu.Unlock()
	for _, c := range ask { // outside the locks: the answer comes through Records
		err := c.Flush()
		a.log.Debug("asking a quiet process's library to flush", "pid", c.Info().Pid, "at", monotonicNow(), "err", err)
	}
}

// requestWindows tells the libraries of processes that closed a cycle since
// they were last told that decode cycles run now (cupti.Conn.RequestWindow):
// a library whose duty windows wait for cycles (--cupti-duty-start cycles)
// opens its next window then, and not during loading, warm-up or while a
// server waits for requests. The library paces the windows (one per period
// at most), so telling it once per agent tick is enough.
func (a *Agent) requestWindows() {
	a.mu.Lock()
	h := a.gpu
	var ended map[int]uint64
	for pid, p := range a.procs {
		if p.lastCycleEnd != 0 {
			if ended == nil {
				ended = map[int]uint64{}
			}
			ended[pid] = p.lastCycleEnd
		}
	}
	a.mu.Unlock()
	if h == nil || ended == nil {
		return
	}
	var tell []*cupti.Conn
	h.mu.Lock()
	for c, q := range h.conns {
		if e := ended[int(c.Info().Pid)]; e > q.cycleTold {
			q.cycleTold = e
			tell = append(tell, c)
		}
	}
	h.mu.Unlock()
	for _, c := range tell { // outside the locks, as flushQuiet
		if err := c.RequestWindow(); err != nil {
			a.log.Debug("telling a library that cycles run", "pid", c.Info().Pid, "err", err)
		}
	}
}

func (h *GPUHandler) snapshot(pid int) *GPUStats {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.stats[pid]; s != nil {
		c := *s
		return &c
	}
	return nil
}
