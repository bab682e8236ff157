package cupti

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// fakeProc points procRoot at a fresh tree for the test.
func fakeProc(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	old := procRoot
	procRoot = dir
	t.Cleanup(func() { procRoot = old })
	return dir
}

// writeStatus writes a status file with an NSpid line of ids (and the lines around it that a
// real one has).
func writeStatus(t *testing.T, path string, ids ...int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	line := "NSpid:"
	for _, id := range ids {
		line += fmt.Sprintf("\t%d", id)
	}
	body := fmt.Sprintf("Name:\tpython3\nTgid:\t%d\nPid:\t%d\n%s\nNSsid:\t1\n", ids[0], ids[0], line)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTidMapSameNamespace(t *testing.T) {
	root := fakeProc(t)
	writeStatus(t, root+"/300/status", 300)
	m, err := newTidMap(300)
	if err != nil || m != nil {
		t.Fatalf("a process in the receiver's namespace: map %+v, err %v; want none", m, err)
	}
	if own, err := ownPid(300); err != nil || own != 300 {
		t.Errorf("ownPid: %d, %v; want 300", own, err)
	}
	if _, err := newTidMap(301); err == nil {
		t.Error("newTidMap of a pid without /proc entry: no error")
	}
}

func TestTidMapTranslates(t *testing.T) {
	root := fakeProc(t)
	// Process 500 is pid 1 of a namespace two levels down; its threads 501 and 502 are 7 and 8.
	writeStatus(t, root+"/500/status", 500, 40, 1)
	writeStatus(t, root+"/500/task/500/status", 500, 40, 1)
	writeStatus(t, root+"/500/task/501/status", 501, 46, 7)
	m, err := newTidMap(500)
	if err != nil || m == nil {
		t.Fatalf("newTidMap: %+v, %v", m, err)
	}
	if own, err := ownPid(500); err != nil || own != 1 {
		t.Errorf("ownPid: %d, %v; want 1", own, err)
	}
	// Thread 8 started after the HELLO: the first record of it rescans.
	writeStatus(t, root+"/500/task/502/status", 502, 47, 8)
	b := Batch{
		APIs:       []API{{Pid: 1, Tid: 1}, {Pid: 1, Tid: 7}, {Pid: 1, Tid: 8}, {Pid: 1, Tid: 9}},
		GraphNodes: []GraphNode{{Tid: 7}, {Tid: 0}},
	}
	if u := m.translate(&b); u != 1 {
		t.Errorf("unmapped %d, want 1 (tid 9 exists nowhere)", u)
	}
	for i, want := range []uint32{500, 501, 502, 0} {
		if b.APIs[i].Tid != want || b.APIs[i].Pid != 500 {
			t.Errorf("API %d: pid %d tid %d, want pid 500 tid %d", i, b.APIs[i].Pid, b.APIs[i].Tid, want)
		}
	}
	if b.GraphNodes[0].Tid != 501 || b.GraphNodes[1].Tid != 0 {
		t.Errorf("graph nodes: tids %d, %d; want 501, 0 (no thread stays none)", b.GraphNodes[0].Tid, b.GraphNodes[1].Tid)
	}
}
