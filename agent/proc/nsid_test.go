package proc

import (
	"os"
	"path/filepath"
	"testing"
)

func TestOwnNamespaceID(t *testing.T) {
	root := t.TempDir()
	old := procRoot
	procRoot = root
	t.Cleanup(func() { procRoot = old })
	write := func(pid, tid, body string) {
		t.Helper()
		dir := filepath.Join(root, pid, "task", tid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "status"), []byte("Name:\tpython3\n"+body+"NSsid:\t1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("700", "700", "NSpid:\t700\t1\n")     // pid 1 of a container
	write("700", "705", "NSpid:\t705\t31\t4\n") // two levels down
	write("800", "800", "NSpid:\t800\n")        // the agent's own namespace
	write("900", "900", "")                     // a kernel before 4.1
	write("901", "901", "NSpid:\t901\tx\n")
	for _, c := range []struct{ pid, tid, want int }{{700, 700, 1}, {700, 705, 4}, {800, 800, 800}, {900, 900, 900}} {
		if got, err := OwnNamespaceID(c.pid, c.tid); err != nil || got != c.want {
			t.Errorf("OwnNamespaceID(%d, %d) = %d, %v; want %d", c.pid, c.tid, got, err, c.want)
		}
	}
	if _, err := OwnNamespaceID(901, 901); err == nil {
		t.Error("a malformed NSpid line: no error")
	}
	if _, err := OwnNamespaceID(700, 799); err == nil {
		t.Error("a thread that does not exist: no error")
	}
}
