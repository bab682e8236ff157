package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/specprof/specprof/internal/testenv"
)

// specprof runs as root and writes its files where it is told (-o, the
// default ./specprof-out/<time>, --events), often a directory others can
// write to. It must never write through a link planted there, nor over a
// file it did not create, and an output it cannot write must stop it
// before the command runs.

// secretFile is a root-only file that planted links point at.
func secretFile(t *testing.T) (path string, check func()) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "secret")
	const content = "root only\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, func() {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil || string(b) != content {
			t.Errorf("%s changed through a link: %q, %v", path, b, err)
		}
		if st, err := os.Lstat(path); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode changed: %v", path, err)
		}
	}
}

// markerCommand is a target that leaves a file behind if it ever runs.
func markerCommand(t *testing.T) (args []string, ran func() bool) {
	marker := filepath.Join(t.TempDir(), "ran")
	return []string{"sh", "-c", "touch " + marker}, func() bool { _, err := os.Stat(marker); return err == nil }
}

func runIn(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(specprofBin(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var quickRun = []string{"run", "-q", "--interval", "0", "--cupti", "off", "--cpu-hz", "0"}

func TestOutputDirRefusedBeforeStart(t *testing.T) {
	testenv.RequireRoot(t)
	t.Run("not empty", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "report.json"), []byte("an earlier session's\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		target, ran := markerCommand(t)
		out, err := runIn(t, "", append(append(quickRun, "-o", dir, "--"), target...)...)
		wantErr(t, out, err, dir, "not empty", "--force")
		if ran() {
			t.Errorf("the command ran")
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "report.json")); string(b) != "an earlier session's\n" {
			t.Errorf("report.json overwritten: %q", b)
		}
		// --force writes into it, replacing the files of the same name.
		out, err = runIn(t, "", append(append(quickRun, "--force", "-o", dir, "--"), target...)...)
		if err != nil || !ran() {
			t.Fatalf("--force: %v (the command ran: %v)\n%s", err, ran(), out)
		}
		if rep := readReport(t, dir); rep.Preset == "" {
			t.Errorf("--force: report.json not replaced")
		}
	})
	t.Run("symlink", func(t *testing.T) {
		real := t.TempDir()
		link := filepath.Join(t.TempDir(), "out")
		if err := os.Symlink(real, link); err != nil {
			t.Fatal(err)
		}
		target, ran := markerCommand(t)
		out, err := runIn(t, "", append(append(quickRun, "-o", link, "--"), target...)...)
		wantErr(t, out, err, link, "symbolic link")
		if ran() {
			t.Errorf("the command ran")
		}
		if names, _ := os.ReadDir(real); len(names) != 0 {
			t.Errorf("files written through the link: %v", names)
		}
	})
	t.Run("default under a planted link", func(t *testing.T) {
		cwd, real := t.TempDir(), t.TempDir()
		if err := os.Symlink(real, filepath.Join(cwd, "specprof-out")); err != nil {
			t.Fatal(err)
		}
		target, ran := markerCommand(t)
		out, err := runIn(t, cwd, append(append(quickRun, "--"), target...)...)
		wantErr(t, out, err, "specprof-out", "symbolic link")
		if ran() {
			t.Errorf("the command ran")
		}
		if names, _ := os.ReadDir(real); len(names) != 0 {
			t.Errorf("files written through the link: %v", names)
		}
	})
	t.Run("not writable", func(t *testing.T) {
		dir := t.TempDir()
		// Root writes through permission bits: a read-only file system it
		// cannot.
		if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_RDONLY, "size=1m"); err != nil {
			t.Skipf("mount a read-only tmpfs: %v", err)
		}
		t.Cleanup(func() { _ = syscall.Unmount(dir, 0) })
		target, ran := markerCommand(t)
		out, err := runIn(t, "", append(append(quickRun, "-o", dir, "--"), target...)...)
		wantErr(t, out, err, dir, "not writable")
		if ran() {
			t.Errorf("the command ran")
		}
		out, err = runIn(t, "", append(append(quickRun, "-o", filepath.Join(dir, "sub"), "--"), target...)...)
		wantErr(t, out, err, filepath.Join(dir, "sub"))
		if ran() {
			t.Errorf("the command ran")
		}
	})
	t.Run("a file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		target, ran := markerCommand(t)
		out, err := runIn(t, "", append(append(quickRun, "-o", f, "--"), target...)...)
		wantErr(t, out, err, f, "not a directory")
		if ran() {
			t.Errorf("the command ran")
		}
	})
	t.Run("events file a symlink", func(t *testing.T) {
		secret, unchanged := secretFile(t)
		link := filepath.Join(t.TempDir(), "events.jsonl")
		if err := os.Symlink(secret, link); err != nil {
			t.Fatal(err)
		}
		target, ran := markerCommand(t)
		out, err := runIn(t, "", append(append(quickRun, "-o", t.TempDir(), "--events", link, "--"), target...)...)
		wantErr(t, out, err, link, "symbolic link")
		unchanged()
		if ran() {
			t.Errorf("the command ran")
		}
	})
}

// Links planted in the output directory while the session runs (here by
// the target itself, as root) are not followed: the files they point at
// are unchanged, and specprof says which of its files it could not write.
func TestOutputFilesNotThroughLinks(t *testing.T) {
	testenv.RequireRoot(t)
	for _, force := range []bool{false, true} {
		name := "fresh"
		if force {
			name = "--force"
		}
		t.Run(name, func(t *testing.T) {
			secret, unchanged := secretFile(t)
			dir := t.TempDir()
			files := []string{"report.json", "gpu_time.pb.gz", "sync_wait.pb.gz", "cpu.pb.gz", "trace.perfetto.json"}
			var plant []string
			for _, f := range files {
				plant = append(plant, "ln -s "+secret+" "+filepath.Join(dir, f))
			}
			args := append([]string{}, quickRun...)
			if force {
				args = append(args, "--force")
			}
			args = append(args, "-o", dir, "--", "sh", "-c", strings.Join(plant, "; "))
			out, err := runIn(t, "", args...)
			unchanged()
			if force {
				// --force replaces what is in the way, links included,
				// without writing through them.
				if err != nil {
					t.Fatalf("--force: %v\n%s", err, out)
				}
				for _, f := range files {
					if st, err := os.Lstat(filepath.Join(dir, f)); err != nil || !st.Mode().IsRegular() {
						t.Errorf("--force: %s not replaced by a file: %v", f, err)
					}
				}
				return
			}
			if err == nil {
				t.Fatalf("no error for the planted report.json:\n%s", out)
			}
			for _, f := range files {
				if !strings.Contains(out, filepath.Join(dir, f)) {
					t.Errorf("no word about %s:\n%s", f, out)
				}
			}
			if !strings.Contains(out, "exists") {
				t.Errorf("the error does not say the file exists:\n%s", out)
			}
		})
	}
}
