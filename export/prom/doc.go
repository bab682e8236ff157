// Package prom serves specprof's live metrics in the Prometheus exposition
// format with client_golang, on its own registry (never the global one):
//
//   - per cycle: histograms of the cycle's duration and of each phase's CPU
//     span and GPU busy time, labelled process, pid, rank (and phase);
//   - counters to take rates of: cycles, launches, GPU kernels, syncs and
//     the time blocked in them, collectives and their bytes, CPU samples,
//     and every event the agent attributed;
//   - every loss counter of the session (agent.Loss: ring buffer full,
//     unmatched joins, …; the CUPTI library's drops per process; the
//     exporters' own drops, through AddDropSource), read from the agent's
//     report at scrape time. A scrape waits for the report at most
//     Options.ReportWait (the agent's lock can be held for seconds, e.g.
//     while probes are detached from an exited process), then serves the
//     previous report's counters, with specprof_report_age_seconds saying
//     how old they are.
//
// Label sets are bounded (Options.MaxProcesses); cycles of processes
// beyond the bound are counted in specprof_metrics_overflow_total.
package prom
