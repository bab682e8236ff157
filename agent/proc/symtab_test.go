package proc

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

const symtabSrc = `
int specprof_fn_a(int x) { return x * 3 + 1; }
int specprof_fn_b(int x) { return specprof_fn_a(x) ^ 0x5a5a; }
int main(int argc, char **argv) { (void)argv; return specprof_fn_b(argc) & 1; }
`

// buildC compiles symtabSrc with gcc and the given flags into dir/name.
func buildC(t testing.TB, dir, name string, flags ...string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Fatal("gcc not found (the tests build small ELF files with it)")
	}
	src := filepath.Join(dir, "fn.c")
	if err := os.WriteFile(src, []byte(symtabSrc), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	if b, err := exec.Command("gcc", append(append([]string{"-O1", "-o", out}, flags...), src)...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", flags, err, b)
	}
	return out
}

// symValue reads a symbol's address from the file's own tables.
func symValue(t *testing.T, path, name string, dynamic bool) elf.Symbol {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	read := f.Symbols
	if dynamic {
		read = f.DynamicSymbols
	}
	syms, err := read()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("%s: no symbol %s", path, name)
	return elf.Symbol{}
}

// TestFuncSymbols looks functions up by address in an executable with a
// .symtab and in a stripped shared object (.dynsym only).
func TestFuncSymbols(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name    string
		flags   []string
		dynamic bool
	}{
		{"exe", []string{"-g"}, false},
		{"lib.so", []string{"-shared", "-fPIC", "-s"}, true},
	} {
		path := buildC(t, dir, c.name, c.flags...)
		tab, err := FuncSymbols(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, fn := range []string{"specprof_fn_a", "specprof_fn_b"} {
			s := symValue(t, path, fn, c.dynamic)
			for _, addr := range []uint64{s.Value, s.Value + s.Size/2, s.Value + s.Size - 1} {
				if got, ok := tab.Lookup(addr); !ok || got != fn {
					t.Errorf("%s: Lookup(%#x) = %q, %v; want %s", c.name, addr, got, ok, fn)
				}
			}
		}
		if name, ok := tab.Lookup(0); ok {
			t.Errorf("%s: Lookup(0) = %q: no function lives at address 0", c.name, name)
		}
		again, err := FuncSymbols(path)
		if err != nil || again != tab {
			t.Errorf("%s: second FuncSymbols = %p, %v; want the cached table %p", c.name, again, err, tab)
		}
	}
	// Stripped of both tables: an empty table, not an error.
	bare := buildC(t, dir, "bare", "-s")
	if tab, err := FuncSymbols(bare); err != nil || tab.Len() != 0 {
		t.Errorf("stripped executable: %d functions, %v; want an empty table", tab.Len(), err)
	}
}

// setSymbolValue returns a copy of the ELF file data with the st_value of
// the .symtab symbol name set to v.
func setSymbolValue(tb testing.TB, data []byte, name string, v uint64) []byte {
	tb.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		tb.Fatal(err)
	}
	syms, err := f.Symbols()
	if err != nil {
		tb.Fatal(err)
	}
	out := bytes.Clone(data)
	sec := f.SectionByType(elf.SHT_SYMTAB)
	for i, s := range syms {
		if s.Name == name {
			// Symbols() leaves out the null entry 0; an Elf64_Sym is 24
			// bytes, st_value at 8.
			binary.LittleEndian.PutUint64(out[sec.Offset+uint64(i+1)*24+8:], v)
			return out
		}
	}
	tb.Fatalf("no symbol %s", name)
	return nil
}

// A function whose address range wraps past 2^64 is left out: Lookup of
// the functions kept still finds them.
func TestFuncSymbolsWrap(t *testing.T) {
	path := buildC(t, t.TempDir(), "exe", "-Os", "-nostdlib", "-static", "-Wl,--build-id=none", "-Wl,-N")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(setSymbolValue(t, data, "specprof_fn_a", 1<<64-2)))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := funcSymbols(f)
	if err != nil {
		t.Fatal(err)
	}
	if tab.Len() != 2 {
		t.Fatalf("%d functions: %v, want specprof_fn_b and main", tab.Len(), tab.name)
	}
	b := symValue(t, path, "specprof_fn_b", false)
	if name, ok := tab.Lookup(b.Value); !ok || name != "specprof_fn_b" {
		t.Errorf("Lookup(specprof_fn_b) = %q, %v", name, ok)
	}
}
