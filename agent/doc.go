// Package agent turns what the probes report into specprof's model of a
// speculative-decoding server: processes, threads, cycles and phases.
//
// It discovers target processes and their libraries, tells the BPF side how
// to walk each interpreter (agent/python), symbolizes and classifies code
// objects with a phase preset (agent/phase), and aggregates attributed
// events into per-cycle, per-phase statistics (Report). It knows nothing of
// output formats; export consumes the Report.
package agent
