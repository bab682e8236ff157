package cupti

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// procRoot is where procfs is mounted; a variable so tests can point it at a fixture tree.
var procRoot = "/proc"

// nsIDs returns the NSpid line of a /proc status file: the id of the process or thread in the
// reader's pid namespace first, in its own namespace last (one id when the two are the same). A
// kernel before 4.1 has no NSpid line: nil, nil.
func nsIDs(status string) ([]uint32, error) {
	b, err := os.ReadFile(status)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 2 || string(f[0]) != "NSpid:" {
			continue
		}
		ids := make([]uint32, 0, len(f)-1)
		for _, s := range f[1:] {
			v, err := strconv.ParseUint(string(s), 10, 32)
			if err != nil {
				return nil, fmt.Errorf("NSpid %q: %w", f, err)
			}
			ids = append(ids, uint32(v))
		}
		return ids, nil
	}
	return nil, nil
}

// tidMap translates the thread ids a library in another pid namespace puts in its records
// (gettid() there, as CUPTI's CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM reports them) to the ids the
// receiver's namespace gives the same threads: those eBPF reports, that the agent joins on. It
// belongs to one connection's goroutine.
type tidMap struct {
	pid  int               // the process, in the receiver's namespace
	own  uint32            // the process's pid in its own namespace
	host map[uint32]uint32 // own-namespace tid -> tid here
}

// newTidMap returns the map for process pid when it lives in a pid namespace below the
// receiver's, or nil when the two namespaces are the same (the ids need no translation).
func newTidMap(pid int) (*tidMap, error) {
	ids, err := nsIDs(fmt.Sprintf("%s/%d/status", procRoot, pid))
	if err != nil {
		return nil, fmt.Errorf("reading the pid namespaces of %d: %w", pid, err)
	}
	if len(ids) < 2 {
		return nil, nil
	}
	m := &tidMap{pid: pid, own: ids[len(ids)-1], host: map[uint32]uint32{}}
	m.scan()
	return m, nil
}

// scan reads the NSpid of every thread of the process. A thread that exits meanwhile is left
// out: its records then count as unmapped.
func (m *tidMap) scan() {
	dir := fmt.Sprintf("%s/%d/task", procRoot, m.pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		ids, err := nsIDs(dir + "/" + e.Name() + "/status")
		if err != nil || len(ids) < 2 {
			continue
		}
		m.host[ids[len(ids)-1]] = ids[0]
	}
}

// translate rewrites the process's own-namespace ids in b's API and graph node records to the
// receiver's, and returns how many thread ids it could not map (the thread had exited before
// the receiver first saw its records): those become 0, which matches no thread.
func (m *tidMap) translate(b *Batch) (unmapped uint64) {
	rescanned := false
	lookup := func(tid uint32) uint32 {
		if tid == 0 {
			return 0
		}
		if h, ok := m.host[tid]; ok {
			return h
		}
		if !rescanned { // a thread started since the last scan
			rescanned = true
			m.scan()
			if h, ok := m.host[tid]; ok {
				return h
			}
		}
		unmapped++
		return 0
	}
	for i := range b.APIs {
		r := &b.APIs[i]
		r.Tid = lookup(r.Tid)
		if r.Pid == m.own {
			r.Pid = uint32(m.pid)
		}
	}
	for i := range b.GraphNodes {
		b.GraphNodes[i].Tid = lookup(b.GraphNodes[i].Tid)
	}
	return unmapped
}
