// Package specmetrics collects a speculative-decoding server's own view of
// its performance, accept length and generation throughput (tok/s), so the
// per-cycle phase table can show them next to the measured phases.
//
// Two sources feed a [Tracker]:
//
//   - the server's log: a [LineScanner] is an io.Writer fed a copy of the
//     target's stdout or stderr; [ParseLogLine] reads SGLang's
//     "Decode batch" line and vLLM's "SpecDecoding metrics" and
//     "Avg generation throughput" lines;
//   - the server's Prometheus endpoint: a [Scraper] reads SGLang's gauges
//     (sglang:spec_accept_length, sglang:gen_throughput) or derives the
//     same figures from vLLM's counters between two scrapes.
//
// The Tracker keeps means per window ([Tracker.Window], since the
// previous call) and per session ([Tracker.Total]), over all ranks and per
// TP rank when the source names one. A metric the server never reported
// is NaN, and [Summary.HasAccept] / [Summary.HasTok] say whether a column
// is worth showing at all.
package specmetrics
