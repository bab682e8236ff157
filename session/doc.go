// Package session holds what a profiling session is asked to do: one
// Config, with its defaults, its YAML file form and the SPECPROF_*
// developer variables, validated as a whole (Validate), and the tracing
// mode it names turned into the mechanisms that carry it out (Plan). The
// front ends (`specprof run`, `attach`, and the host agent) build their
// sessions from it.
package session
