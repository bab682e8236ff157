// Command recvtool is a stand-alone receiver for libspecprof_cupti.so, for checks on a GPU host
// (cupti/gpucheck) and by hand: it listens, decodes every connection, and at the end (SIGINT,
// SIGTERM, -duration, or -exit-after-conns connections closed) prints per-connection counts,
// the library's counters and the clock invariant of design §4: a kernel never starts before
// the API call that launched it (same correlation id).
//
//	go run ./cupti/internal/recvtool -socket /run/specprof/cupti.sock [-duration 30s] [-exit-after-conns 1]
package main
