package agent

// Traces reports whether pid is a live process this agent traces: one it
// was given (AddRoot) or one forked from it since. A process forked an
// instant ago may connect before the agent has read its fork record (or
// that record was lost to a full ring buffer): the kernel side tracks every
// child of a traced process from its fork on, so its map is asked first.
func (a *Agent) Traces(pid int) bool {
	if a.pr.IsTracked(pid) {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.procs[pid]
	return p != nil && !p.exited
}
