package main

import (
	"runtime/debug"
	"strings"
)

// buildRevision is set by the Makefile's build (-X main.buildRevision=...,
// from git describe) for builds where Go records no revision itself.
var buildRevision string

// version is what `specprof --version` prints: the module version and the
// source revision the binary was built from (Go records both).
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+modified"
			}
		}
	}
	if rev == "" && buildRevision != "" {
		rev, dirty = buildRevision, ""
	}
	parts := []string{v}
	if rev != "" {
		if len(rev) > 12 && !strings.Contains(rev, "-") {
			rev = rev[:12]
		}
		parts = append(parts, "rev "+rev+dirty)
	}
	parts = append(parts, bi.GoVersion)
	return strings.Join(parts, ", ")
}
