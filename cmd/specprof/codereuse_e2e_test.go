package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specprof/specprof/internal/testenv"
)

// TestReusedCodeAddress runs testdata/workloads/code_reuse.py: a module
// body that launches (and is classified), is freed, and a code object of a
// phase lands on its address. Every launch of the new code object must get
// its phase, not the module body's class, on every interpreter.
func TestReusedCodeAddress(t *testing.T) {
	_, _, std, bin, root := standins(t)
	for _, py := range testenv.Interpreters(t) {
		t.Run(py.Name, func(t *testing.T) {
			out := t.TempDir()
			truth := filepath.Join(out, "truth.jsonl")
			cmd := exec.Command(bin, "run", "-q", "--interval", "0", "-o", out, "--cupti", "off",
				"--rules", filepath.Join(root, "testdata/workloads/code_reuse.yaml"), "--spec-metrics", "off",
				"--events", filepath.Join(out, "events.jsonl"), "--",
				py.Path, filepath.Join(root, "testdata/workloads/code_reuse.py"))
			cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+std, "SPECPROF_SIM_TRUTH="+truth)
			res, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("specprof run: %v\n%s", err, res)
			}
			if !strings.Contains(string(res), `"reused": true`) {
				t.Fatalf("the workload found no reused address:\n%s", res)
			}
			want := readTruth(t, truth)
			steps := 0
			for _, cs := range want {
				for _, c := range cs {
					if c.phase == "reuse.step" {
						steps++
					}
				}
			}
			if steps != 20 {
				t.Fatalf("the workload recorded %d launches in reuse.step, want 20", steps)
			}
			compareCalls(t, want, readEvents(t, filepath.Join(out, "events.jsonl")))
		})
	}
}
