package agent

import (
	"fmt"
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
	// Counters reported by the library itself (its latest STATS record),
	// cumulative over the process's connections. Nil (null in JSON) when
	// they are unknown: no STATS came, or the process's last connection
	// ended without the library's final counters (FinalStats false), so
	// that the last ones it sent would understate what was lost after them.
	Delivered           *uint64 `json:"lib_records_delivered"`
	DroppedCUPTI        *uint64 `json:"lib_dropped_by_cupti"`
	DroppedNoAgent      *uint64 `json:"lib_dropped_no_agent"`
	DroppedBackpressure *uint64 `json:"lib_dropped_backpressure"`
	DroppedDisconnect   *uint64 `json:"lib_dropped_disconnect"`
	// BuffersRefused counts CUPTI's requests for an activity buffer that
	// the library answered with none (its pool exhausted, an allocation
	// failed, or no agent connected): CUPTI drops the records it then
	// cannot store, counted in DroppedCUPTI.
	BuffersRefused *uint64 `json:"lib_buffers_refused"`
	// DroppedGraphNodes counts graph-node events beyond the library's
	// table, NamesDropped kernels sent without a name (its name table full).
	DroppedGraphNodes *uint64 `json:"lib_dropped_graph_nodes"`
	NamesDropped      *uint64 `json:"lib_kernel_names_dropped"`
	// FinalStats is true when the counters above are final: the process's
	// last connection carried the library's final STATS record (sent at
	// the process's exit) or answered the session's last flush. False at
	// the end of a session means the process was killed or its connection
	// cut: the counters are unknown (nil) and a problem line says so.
	FinalStats bool `json:"lib_final_stats"`
	// DecodeErrors counts malformed records on this process's connections
	// (cupti.DecodeErrors.Total), NameTableFull the kernel names the
	// receiver did not keep (its table full).
	DecodeErrors  uint64 `json:"malformed_records,omitempty"`
	NameTableFull uint64 `json:"kernel_names_not_kept,omitempty"`
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

	lib      *cupti.LibStats // the latest STATS (nil: none yet)
	libAt    time.Time       // when it came
	open     int             // connections open now
	libFinal bool            // the last connection that ended had final counters
	libEnd   time.Time       // when the last connection ended
	errs     cupti.ConnStats // decode counters of the connections that ended
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
	// ending: the session is ending (Ending), so a flush's answer carries a
	// library's last counters.
	ending bool
}

// Ending says that the session is ending: the libraries are asked for a
// last flush, and the counters of each answer are final for a process that
// lives on (cupti.Receiver.FlushWait, before the connections are closed).
func (h *GPUHandler) Ending() {
	h.mu.Lock()
	h.ending = true
	h.mu.Unlock()
}

// connQuiet is when a connection last moved its process's GPU watermark
// (records, or a flush's answer), when the agent last asked it to flush, and
// the end of the last cycle it was told of (requestWindows); and whether its
// library's counters are final: a STATS flagged final came (the process
// exits), or the last batch with anything in it answered the session's last
// flush (GPUHandler.Ending; nothing was read after those counters).
type connQuiet struct {
	moved, asked time.Time
	cycleTold    uint64
	final, acked bool
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
	if info := c.Info(); info.Types&(1<<cupti.TypeWindow) != 0 {
		h.a.mu.Lock()
		h.a.dutyCycled(int(info.Pid))
		h.a.mu.Unlock()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.of(c)
	s.Connections++
	s.open++
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
	if q := h.conns[c]; q != nil {
		if b.Len() > len(b.Windows) || b.FlushAck {
			q.moved = time.Now()
		}
		q.final = q.final || b.Final
		if b.Len() > len(b.Windows) || b.Stats != nil {
			q.acked = b.FlushAck && h.ending
		}
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
			onAPI(&APIRecord{PID: int(c.Info().Pid), TID: int(r.Tid), Cbid: r.Cbid, Start: r.Start, End: r.End, CorrelationID: r.CorrelationID})
		}
	}
	s.Syncs += int64(len(b.Syncs))
	s.GraphNodes += int64(len(b.GraphNodes))
	s.Overheads += int64(len(b.Overheads))
	if st := b.Stats; st != nil {
		lib := *st
		s.lib, s.libAt = &lib, time.Now()
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
	defer h.mu.Unlock()
	s := h.of(c)
	s.open--
	s.libEnd = time.Now()
	if q := h.conns[c]; q != nil {
		s.libFinal = q.final || q.acked
	}
	st := c.Stats()
	s.errs.Errors.Add(st.Errors)
	s.errs.NamesDropped += st.NamesDropped
	delete(h.conns, c)
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

// snapshot returns a copy of pid's figures with the library's counters
// filled in, or left nil when they are unknown (see GPUStats.FinalStats).
func (h *GPUHandler) snapshot(pid int) *GPUStats {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.stats[pid]
	if s == nil {
		return nil
	}
	c := *s
	errs := s.errs
	for conn := range h.conns { // the open connections' decoders, too
		if int(conn.Info().Pid) == pid {
			st := conn.Stats()
			errs.Errors.Add(st.Errors)
			errs.NamesDropped += st.NamesDropped
		}
	}
	c.DecodeErrors, c.NameTableFull = errs.Errors.Total(), errs.NamesDropped
	c.FinalStats = s.open == 0 && s.libFinal
	if l := s.lib; l != nil && (s.open > 0 || s.libFinal) {
		v := func(x uint64) *uint64 { return &x }
		c.Delivered, c.DroppedCUPTI, c.DroppedNoAgent = v(l.RecordsDelivered), v(l.DroppedCUPTI), v(l.DroppedNoAgent)
		c.DroppedBackpressure, c.DroppedDisconnect = v(l.DroppedBackpressure), v(l.DroppedDisconnect)
		c.BuffersRefused, c.DroppedGraphNodes, c.NamesDropped = v(l.BuffersRefused), v(l.DroppedGraphNodes), v(l.NamesDropped)
	}
	return &c
}

// libProblem says, for a process whose library's final counters never
// came, that its losses are unknown and what the last counters it sent said
// ("" when its counters are final or its connection still open).
func (g *GPUStats) libProblem() string {
	if g == nil || g.FinalStats || g.open > 0 {
		return ""
	}
	msg := "lib drops unknown: the library's final counters never arrived (the process was killed, or its connection was cut), so what it dropped after its last STATS is not known"
	if l := g.lib; l != nil {
		msg += fmt.Sprintf("; the last STATS (%s before the connection ended) said: dropped by CUPTI %d, no agent %d, backpressure %d, disconnect %d; buffers refused %d",
			g.libEnd.Sub(g.libAt).Round(time.Millisecond), l.DroppedCUPTI, l.DroppedNoAgent, l.DroppedBackpressure, l.DroppedDisconnect, l.BuffersRefused)
	} else {
		msg += "; it sent none"
	}
	return msg
}

// ReceiverStats accounts for every connection made to the session's CUPTI
// socket: those accepted, those rejected by reason (cupti.Config says what
// each check is), and what the accepted ones sent that could not be decoded.
type ReceiverStats struct {
	Accepted uint64 `json:"connections_accepted"`
	Rejected uint64 `json:"connections_rejected"`
	// Rejections by reason: the peer is no process this session traces;
	// its HELLO claimed another pid than its own; a connection limit was
	// reached; no complete HELLO came in time; the first record was no
	// valid HELLO; the peer's credentials or pid could not be read.
	NotTraced   uint64 `json:"rejected_not_traced"`
	PidMismatch uint64 `json:"rejected_pid_mismatch"`
	OverLimit   uint64 `json:"rejected_over_limit"`
	NoHello     uint64 `json:"rejected_no_hello_in_time"`
	BadHello    uint64 `json:"rejected_bad_hello"`
	PeerUnknown uint64 `json:"rejected_peer_unknown"`
	// PeakOpen is the most connections held at once (accepted, or being
	// checked).
	PeakOpen int `json:"connections_peak"`
	// Malformed counts the records of accepted connections that could not
	// be decoded, by class (cupti.DecodeErrors): an unframeable length
	// (which ends its connection), an unknown type, a payload too short, a
	// partial record at the end, a bad NAME, a second HELLO.
	Malformed   uint64 `json:"malformed_records"`
	BadLength   uint64 `json:"malformed_bad_length"`
	UnknownType uint64 `json:"malformed_unknown_type"`
	Short       uint64 `json:"malformed_short"`
	Truncated   uint64 `json:"malformed_truncated"`
	BadName     uint64 `json:"malformed_bad_name"`
	ExtraHello  uint64 `json:"malformed_extra_hello"`
	// NamesNotKept counts kernel names beyond the receiver's table
	// (cupti.MaxNames, cupti.MaxNameBytes): those kernels go unnamed.
	NamesNotKept uint64 `json:"kernel_names_not_kept"`
	// TidsUnmapped counts thread ids in the API and graph node records of
	// processes in their own pid namespace (containers) that could not be
	// translated to host ids, because the thread had exited first
	// (cupti.ConnStats.TidsUnmapped): those records join no launch.
	TidsUnmapped uint64 `json:"tids_unmapped,omitempty"`
}

// NewReceiverStats summarizes a CUPTI receiver's counters for the report.
func NewReceiverStats(st cupti.ReceiverStats) *ReceiverStats {
	rj, e := st.Rejected, st.Total.Errors
	return &ReceiverStats{Accepted: st.Accepted, Rejected: rj.Total(), NotTraced: rj.NotTraced,
		PidMismatch: rj.PidMismatch, OverLimit: rj.OverLimit, NoHello: rj.NoHello, BadHello: rj.BadHello,
		PeerUnknown: rj.NoPeer, PeakOpen: st.PeakOpen, Malformed: e.Total(), BadLength: e.BadLength,
		UnknownType: e.UnknownType, Short: e.Short, Truncated: e.Truncated, BadName: e.BadName,
		ExtraHello: e.BadHello, NamesNotKept: st.Total.NamesDropped, TidsUnmapped: st.Total.TidsUnmapped}
}

// ExportStats accounts for what one exporter (otlp, perfetto, pprof) was
// given and did not deliver, in its own unit (spans, events, samples).
type ExportStats struct {
	Exporter string `json:"exporter"`
	Unit     string `json:"unit"`
	// Dropped were never sent or written (a queue or a cap was full),
	// Failed were in exports the endpoint refused or that failed, Unsent
	// were still queued when the session ended. Detail says the same in
	// words, with the first error.
	Dropped uint64 `json:"dropped"`
	Failed  uint64 `json:"failed,omitempty"`
	Unsent  uint64 `json:"unsent,omitempty"`
	Detail  string `json:"detail,omitempty"`
	// OwnLine: the exporter prints its own account on the terminal (OTLP's
	// "otlp: N of M spans exported" line), which the summary does not
	// repeat.
	OwnLine bool `json:"-"`
}
