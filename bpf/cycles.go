package bpf

import "fmt"

// ThreadCycle is a thread's cycle count as BPF keeps it (Py.CycleNo of its
// latest cycle), whether or not that cycle's records reached user space.
type ThreadCycle struct {
	PID, TID int
	Cycles   uint32
}

// ThreadCycles lists the cycle counts of the threads BPF has counted cycles
// for (the most recent 16384 threads). A count past the last Py.CycleNo
// that user space read is cycles lost whole at the end of the thread.
func (t *Tracer) ThreadCycles() ([]ThreadCycle, error) {
	var (
		tid uint32
		v   specprofThreadCycle
		out []ThreadCycle
	)
	it := t.objs.ThreadCycles.Iterate()
	for it.Next(&tid, &v) {
		out = append(out, ThreadCycle{PID: int(v.Pid), TID: int(tid), Cycles: v.Cycles})
	}
	if err := it.Err(); err != nil {
		return out, fmt.Errorf("read the threads' cycle counts: %w", err)
	}
	return out, nil
}

// forgetThreadCycles drops the cycle counts of pid's threads (Forget).
func (t *Tracer) forgetThreadCycles(pid int) {
	cs, _ := t.ThreadCycles()
	for _, c := range cs {
		if c.PID == pid {
			_ = t.objs.ThreadCycles.Delete(uint32(c.TID))
		}
	}
}
