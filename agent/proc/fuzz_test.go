package proc

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"testing"
)

// formatMapping prints m as the kernel prints a line of /proc/PID/maps.
func formatMapping(m Mapping) string {
	s := fmt.Sprintf("%x-%x %s %08x %s %d", m.Start, m.End, m.Perms, m.Offset, m.Dev, m.Inode)
	if m.Path != "" {
		s += "                          " + m.Path
	}
	if m.Deleted {
		s += deletedSuffix
	}
	return s
}

// FuzzParseMaps parses arbitrary /proc/PID/maps contents (the paths in
// them are the target's to choose). Every mapping parsed is a non-empty
// range, and prints back to a line that parses to
// the same mapping.
func FuzzParseMaps(f *testing.F) {
	for _, l := range []string{
		"55d0d2538000-55d0d2567000 r--p 00000000 fd:01 1311273                    /usr/bin/bash",
		"7f0000001000-7f0000002000 r-xp 00001000 08:02 42     /tmp/my lib/libx.so (deleted)",
		"7ffd1c5f0000-7ffd1c5f2000 r-xp 00000000 00:00 0                          [vdso]",
		"7f5b6d000000-7f5b6d021000 rw-p 00000000 00:00 0 ",
		"7f5b6d000000-7f5b6d021000 rw-p 00000000 00:00 0",
		"garbage",
	} {
		f.Add([]byte(l + "\n"))
	}
	if b, err := os.ReadFile("/proc/self/maps"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		maps, err := parseMaps(bytes.NewReader(data))
		if err != nil {
			return
		}
		if len(maps) > bytes.Count(data, []byte("\n"))+1 {
			t.Fatalf("%d mappings from %d lines", len(maps), bytes.Count(data, []byte("\n"))+1)
		}
		for _, m := range maps {
			if m.End <= m.Start {
				t.Fatalf("mapping %+v is empty or ends before it starts", m)
			}
			line := formatMapping(m)
			again, err := parseMapsLine(line)
			if err != nil || again != m {
				t.Fatalf("%+v printed as %q parses to %+v, %v", m, line, again, err)
			}
		}
	})
}

// FuzzELF reads arbitrary ELF files as the agent does: the function
// table, named symbols and PT_LOAD headers. A function table is sorted by
// address, its ranges do not wrap, and each start looks up to its name;
// symbols found are defined and named as asked.
func FuzzELF(f *testing.F) {
	dir := f.TempDir()
	for _, c := range []struct {
		name  string
		flags []string
	}{
		{"tiny", []string{"-Os", "-nostdlib", "-static", "-Wl,--build-id=none", "-Wl,-N"}},
		{"tiny.so", []string{"-Os", "-nostdlib", "-shared", "-fPIC", "-Wl,--build-id=none", "-Wl,-N"}},
	} {
		b, err := os.ReadFile(buildC(f, dir, c.name, c.flags...))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		if c.name == "tiny" {
			f.Add(setSymbolValue(f, b, "specprof_fn_a", 1<<64-2)) // TestFuncSymbolsWrap
		}
	}
	names := []string{"specprof_fn_a", "specprof_fn_b", "main", "_start"}
	f.Fuzz(func(t *testing.T, data []byte) {
		ef, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		if tab, err := funcSymbols(ef); err == nil {
			for i := range tab.start {
				if tab.end[i] <= tab.start[i] || i > 0 && tab.start[i] <= tab.start[i-1] {
					t.Fatalf("function %d: [%#x, %#x) after %#x", i, tab.start[i], tab.end[i], tab.start[max(i-1, 0)])
				}
				if name, ok := tab.Lookup(tab.start[i]); !ok || name != tab.name[i] {
					t.Fatalf("Lookup(%#x) = %q, %v; want %q", tab.start[i], name, ok, tab.name[i])
				}
			}
		}
		asked, want := map[string]bool{}, map[string]bool{}
		for _, n := range names {
			asked[n], want[n] = true, true
		}
		syms := map[string]*elf.Symbol{}
		if err := scanELF(ef, want, syms); err == nil {
			for n, s := range syms {
				if !asked[n] || s != nil && (s.Name != n || s.Section == elf.SHN_UNDEF) {
					t.Fatalf("symbol %q: %+v", n, s)
				}
			}
			if len(syms) != len(names) {
				t.Fatalf("%d names recorded, want %d", len(syms), len(names))
			}
		}
		for _, p := range loadHeaders(ef) {
			if p.Type != elf.PT_LOAD {
				t.Fatalf("header %+v", p)
			}
		}
	})
}
