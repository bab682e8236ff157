package agent

import "github.com/specprof/specprof/agent/proc"

// maxAncestors bounds the walk up a process's parents in Traces.
const maxAncestors = 64

// Traces reports whether pid is a live process this agent traces: one it
// was given (AddRoot) or saw forked from one, and has not seen exit. A
// process forked an instant ago may connect before the agent has read its
// fork: the kernel tracks every child of a traced process from its fork on,
// so a process whose parent, or an ancestor's, is traced is traced too (an
// orphan reparented away from the tree is not found that way, and waits for
// its fork event to be read).
func (a *Agent) Traces(pid int) bool {
	for i := 0; i < maxAncestors && pid > 1; i++ {
		a.mu.Lock()
		p := a.procs[pid]
		live := p != nil && !p.exited
		a.mu.Unlock()
		if live {
			return true
		}
		ppid, err := proc.Parent(pid)
		if err != nil {
			return false
		}
		pid = ppid
	}
	return false
}
