package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/specprof/specprof/model"

	"github.com/specprof/specprof/internal/testenv"
)

// standins prepares an end-to-end run on the stand-in libraries: it needs
// root (and fails in CI without it), is skipped with -short, and returns
// the injected CUPTI library, the mock CUPTI, the stand-ins' directory (for
// LD_LIBRARY_PATH), the specprof binary and the repository root.
func standins(t *testing.T) (injLib, mockCupti, std, bin, root string) {
	t.Helper()
	testenv.RequireRoot(t)
	if testing.Short() {
		t.Skip("end-to-end")
	}
	injLib, mockCupti, std = testenv.BuildInjection(t)
	bin = specprofBin(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return injLib, mockCupti, std, bin, root
}

// readReport reads a session's report.json.
func readReport(t *testing.T, dir string) model.Report {
	t.Helper()
	var rep model.Report
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report.json: %v", err)
	}
	return rep
}
