package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/specprof/specprof/cupti"
)

type connSummary struct {
	info                              cupti.ConnInfo
	kernels, graphKernels, memcpys    int
	apis, syncs, graphNodes, overhead int
	apiStart                          map[uint32]uint64 // correlation id -> API start
	kernelStart                       map[uint32]uint64 // correlation id -> earliest kernel start
	names                             map[string]int
	zeroTimes                         int
	lib                               cupti.LibStats
	err                               error
	closed                            bool
}

type handler struct {
	mu     sync.Mutex
	conns  map[uint64]*connSummary
	closed chan struct{}
}

func (h *handler) Open(c *cupti.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.conns[c.ID()] = &connSummary{info: c.Info(), apiStart: map[uint32]uint64{}, kernelStart: map[uint32]uint64{},
		names: map[string]int{}}
	fmt.Fprintf(os.Stderr, "recvtool: connection %d: pid %d, CUPTI %d, driver %d, clock %d\n", c.ID(),
		c.Info().Pid, c.Info().CuptiVersion, c.Info().DriverVersion, c.Info().ClockSource)
}

func (h *handler) Records(c *cupti.Conn, b *cupti.Batch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.conns[c.ID()]
	for _, k := range b.Kernels {
		s.kernels++
		if k.GraphID != 0 {
			s.graphKernels++
		}
		if k.Start == 0 || k.End == 0 {
			s.zeroTimes++
		} else if t, ok := s.kernelStart[k.CorrelationID]; !ok || k.Start < t {
			s.kernelStart[k.CorrelationID] = k.Start
		}
		s.names[c.Name(k.NameID)]++
	}
	for _, a := range b.APIs {
		s.apiStart[a.CorrelationID] = a.Start
	}
	s.memcpys += len(b.Memcpys)
	s.apis += len(b.APIs)
	s.syncs += len(b.Syncs)
	s.graphNodes += len(b.GraphNodes)
	s.overhead += len(b.Overheads)
	if b.Stats != nil {
		s.lib = *b.Stats
	}
}

func (h *handler) Close(c *cupti.Conn, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.conns[c.ID()]; s != nil {
		s.err, s.closed = err, true
	}
	h.closed <- struct{}{}
}

func main() {
	socket := flag.String("socket", cupti.DefaultSocket, "unix socket to listen on")
	duration := flag.Duration("duration", 0, "stop after this long (0: until a signal)")
	exitAfter := flag.Int("exit-after-conns", 0, "stop once this many connections have closed")
	flag.Parse()
	r, err := cupti.Listen(cupti.Config{Path: *socket})
	if err != nil {
		fmt.Fprintln(os.Stderr, "recvtool:", err)
		os.Exit(1)
	}
	h := &handler{conns: map[uint64]*connSummary{}, closed: make(chan struct{}, 1024)}
	go r.Serve(h)
	fmt.Fprintf(os.Stderr, "recvtool: listening on %s\n", *socket)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	for n := 0; *exitAfter == 0 || n < *exitAfter; n++ {
		select {
		case <-h.closed:
			continue
		case <-ctx.Done():
		}
		break
	}
	fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	r.FlushWait(fctx)
	cancel()
	r.Close()
	report(h, r.Stats())
}

func report(h *handler, st cupti.ReceiverStats) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]uint64, 0, len(h.conns))
	for id := range h.conns {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		s := h.conns[id]
		violations, matched := 0, 0
		for corr, ks := range s.kernelStart {
			if as, ok := s.apiStart[corr]; ok {
				matched++
				if ks < as {
					violations++
				}
			}
		}
		fmt.Printf("connection %d pid %d CUPTI %d driver %d clock %d\n", id, s.info.Pid, s.info.CuptiVersion,
			s.info.DriverVersion, s.info.ClockSource)
		fmt.Printf("  kernels %d (graph %d, zero times %d) memcpys %d apis %d syncs %d graph-node %d overhead %d\n",
			s.kernels, s.graphKernels, s.zeroTimes, s.memcpys, s.apis, s.syncs, s.graphNodes, s.overhead)
		fmt.Printf("  clock invariant: %d launches matched to their API record, %d kernels start before their API call\n",
			matched, violations)
		fmt.Printf("  library: %+v\n", s.lib)
		type nc struct {
			n string
			c int
		}
		var top []nc
		for n, c := range s.names {
			top = append(top, nc{n, c})
		}
		sort.Slice(top, func(i, j int) bool { return top[i].c > top[j].c })
		for i := 0; i < len(top) && i < 5; i++ {
			n := top[i].n
			if len(n) > 100 {
				n = n[:100] + "..."
			}
			fmt.Printf("  %8d  %s\n", top[i].c, n)
		}
		if s.err != nil {
			fmt.Printf("  closed with: %v\n", s.err)
		}
	}
	fmt.Printf("total: accepted %d, decode errors %+v\n", st.Accepted, st.Total.Errors)
}
