package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specprof/specprof/agent/phase"
	"github.com/specprof/specprof/agent/python"
)

// TestVersionCheck: the installed version is read from the dist-info next to
// the package whose module files the agent saw, and compared with the
// preset's checked versions.
func TestVersionCheck(t *testing.T) {
	root := t.TempDir()
	site := filepath.Join(root, "venv/lib/python3.11/site-packages")
	mk := func(path, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk(filepath.Join(site, "sglang/srt/speculative/eagle_worker.py"), "")
	mk(filepath.Join(site, "torch/nn/modules/module.py"), "")
	mk(filepath.Join(site, "torch-2.9.0.dist-info/METADATA"), "Metadata-Version: 2.1\nName: torch\nVersion: 2.9.0\n")
	preset, err := phase.LoadPreset("sglang-eagle")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dist, meta, status, installed, problem string
	}{
		{"inside", "sglang-0.5.6.dist-info", "Name: sglang\nVersion: 0.5.6\n\nVersion: 9\n", VersionChecked, "0.5.6", ""},
		{"rc", "sglang-0.5.0rc2.dist-info", "Name: SGLang\nVersion: 0.5.0rc2\n", VersionChecked, "0.5.0rc2", ""},
		{"outside", "sglang-0.6.1.dist-info", "Name: sglang\nVersion: 0.6.1\n", VersionOutside, "0.6.1", "not among the versions"},
		{"no version", "sglang-0.5.6.dist-info", "Name: sglang\n", VersionUnknown, "", "no Version header"},
		{"absent", "", "", VersionUnknown, "", "no sglang-*.dist-info"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ents, _ := filepath.Glob(filepath.Join(site, "sglang-*"))
			for _, e := range ents {
				os.RemoveAll(e)
			}
			if tc.dist != "" {
				mk(filepath.Join(site, tc.dist, "METADATA"), tc.meta)
			}
			a := &Agent{opts: Options{Preset: preset}}
			// The agent sees the target's paths; /proc/self/root is this
			// test's own root.
			p := &process{pid: os.Getpid(), rt: &python.Runtime{}}
			a.noteModuleFile(p, filepath.Join(site, "torch/nn/modules/module.py"))
			a.noteModuleFile(p, "<frozen importlib._bootstrap>")
			a.noteModuleFile(p, filepath.Join(site, "sglang/srt/speculative/eagle_worker.py"))
			vc := a.versionCheck(p)
			if vc == nil || vc.Status != tc.status || vc.Installed != tc.installed || !strings.Contains(vc.Problem, tc.problem) ||
				(tc.problem == "" && vc.Problem != "") {
				t.Fatalf("version check %+v; want status %s, installed %q, problem with %q", vc, tc.status, tc.installed, tc.problem)
			}
			if tc.status != VersionUnknown && vc.Metadata != filepath.Join(site, tc.dist, "METADATA") {
				t.Errorf("metadata %s", vc.Metadata)
			}
		})
	}
	// No code of the distribution seen at all.
	a := &Agent{opts: Options{Preset: preset}}
	p := &process{pid: os.Getpid(), rt: &python.Runtime{}}
	a.noteModuleFile(p, filepath.Join(root, "app/main.py"))
	if vc := a.versionCheck(p); vc == nil || vc.Status != VersionUnknown || !strings.Contains(vc.Problem, "no module file of sglang") {
		t.Errorf("nothing seen: %+v", vc)
	}
}
