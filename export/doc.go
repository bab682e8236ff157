// Package export holds specprof's output formats. Each sub-package consumes
// the agent's model (agent.Report, agent.Window) and writes one format:
// summary prints the live terminal table and the JSON report.
package export
