package agent

import (
	"fmt"
	"sync"
	"time"

	"github.com/specprof/specprof/model"

	"github.com/specprof/specprof/cupti"
)

// gpuProc is one process's GPU figures and the receiver's state for it.
type gpuProc struct {
	model.GPUStats
	lib      *cupti.LibStats // the latest STATS (nil: none yet)
	libAt    time.Time       // when it came
	open     int             // connections open now
	libFinal bool            // the last connection that ended had final counters
	libEnd   time.Time       // when the last connection ended
	errs     cupti.ConnStats // decode counters of the connections that ended
}

// GPUHandler is the cupti.Handler that feeds CUPTI records into the agent.
type GPUHandler struct {
	a     *Agent
	mu    sync.Mutex
	stats map[int]*gpuProc
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
		a.gpu = &GPUHandler{a: a, stats: map[int]*gpuProc{}, conns: map[*cupti.Conn]*connQuiet{}}
	}
	return a.gpu
}

func (h *GPUHandler) of(c *cupti.Conn) *gpuProc {
	pid := int(c.Info().Pid)
	s := h.stats[pid]
	if s == nil {
		s = &gpuProc{}
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
			onKernel(&model.KernelRecord{PID: int(c.Info().Pid), Name: c.Name(k.NameID), Start: k.Start, End: k.End,
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
			onAPI(&model.APIRecord{PID: int(c.Info().Pid), TID: int(r.Tid), Cbid: r.Cbid, Start: r.Start, End: r.End, CorrelationID: r.CorrelationID})
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
// filled in, or left nil when they are unknown (see GPUStats.FinalStats),
// and the problem to report when they are (libProblem).
func (h *GPUHandler) snapshot(pid int) (*model.GPUStats, string) {
	if h == nil {
		return nil, ""
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.stats[pid]
	if s == nil {
		return nil, ""
	}
	c := s.GPUStats
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
	return &c, s.libProblem(c.FinalStats)
}

// libProblem says, for a process whose library's final counters never
// came, that its losses are unknown and what the last counters it sent said
// ("" when its counters are final or its connection still open).
func (g *gpuProc) libProblem(final bool) string {
	if final || g.open > 0 {
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

// NewReceiverStats summarizes a CUPTI receiver's counters for the report.
func NewReceiverStats(st cupti.ReceiverStats) *model.ReceiverStats {
	rj, e := st.Rejected, st.Total.Errors
	return &model.ReceiverStats{Accepted: st.Accepted, Rejected: rj.Total(), NotTraced: rj.NotTraced,
		PidMismatch: rj.PidMismatch, OverLimit: rj.OverLimit, NoHello: rj.NoHello, BadHello: rj.BadHello,
		PeerUnknown: rj.NoPeer, PeakOpen: st.PeakOpen, Malformed: e.Total(), BadLength: e.BadLength,
		UnknownType: e.UnknownType, Short: e.Short, Truncated: e.Truncated, BadName: e.BadName,
		ExtraHello: e.BadHello, NamesNotKept: st.Total.NamesDropped, TidsUnmapped: st.Total.TidsUnmapped}
}
