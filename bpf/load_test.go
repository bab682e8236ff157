package bpf

import (
	"os"
	"testing"
)

// requireRoot skips without privileges, except in CI where a missing
// capability must fail the run rather than hide it.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("BPF tests need root; CI runs as root, so this is a setup error")
		}
		t.Skip("BPF tests need root")
	}
}

func TestLoad(t *testing.T) {
	requireRoot(t)
	tr, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Lost(); err != nil {
		t.Fatal(err)
	}
}
