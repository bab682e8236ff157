package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Sessions started in the same second get directories of their own.
func TestOutDirDefaultIsFresh(t *testing.T) {
	t.Chdir(t.TempDir())
	a, err := openOutDir("", false)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	if _, err := a.create("x"); err != nil {
		t.Fatal(err)
	}
	b, err := openOutDir("", false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	if a.path == b.path || !strings.HasPrefix(b.path, defaultOutParent+"/") {
		t.Fatalf("two sessions: %s and %s, want two directories under %s", a.path, b.path, defaultOutParent)
	}
	// A directory the session never wrote to is removed at its end.
	b.close()
	if _, err := os.Stat(b.path); !os.IsNotExist(err) {
		t.Errorf("%s left behind by a session that wrote nothing: %v", b.path, err)
	}
	if _, err := os.Stat(filepath.Join(a.path, "x")); err != nil {
		t.Errorf("the first session's file: %v", err)
	}
}

// A file is created once, never opened over what is there; --force
// replaces a file or a link without writing through it.
func TestOutDirCreate(t *testing.T) {
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, force := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "out")
		d, err := openOutDir(dir, force)
		if err != nil {
			t.Fatal(err)
		}
		f, err := d.create("a")
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := os.Symlink(victim, filepath.Join(dir, "link")); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"a", "link"} {
			f, err := d.create(name)
			if !force {
				if err == nil || !strings.Contains(err.Error(), "exists") {
					t.Errorf("create %s over an existing entry: %v, want an error saying it exists", name, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("--force: create %s: %v", name, err)
			}
			f.WriteString("new")
			f.Close()
			if st, err := os.Lstat(filepath.Join(dir, name)); err != nil || !st.Mode().IsRegular() {
				t.Errorf("--force: %s is not a new file: %v", name, err)
			}
		}
		for _, bad := range []string{"../escape", "sub/x", "..", ""} {
			if _, err := d.create(bad); err == nil {
				t.Errorf("create %q: no error", bad)
			}
		}
		d.close()
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Fatalf("written through a link: %q", b)
	}
}
