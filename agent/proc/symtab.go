package proc

import (
	"debug/elf"
	"errors"
	"fmt"
	"sort"
)

// SymTable holds the function symbols of one ELF file, sorted by address,
// for address-to-name lookups (native frames of CPU samples).
type SymTable struct {
	start []uint64 // link-time address of each function
	end   []uint64 // start + size
	name  []string
}

// Len returns the number of functions in the table.
func (t *SymTable) Len() int {
	if t == nil {
		return 0
	}
	return len(t.start)
}

// Lookup returns the function whose [value, value+size) holds the link-time
// address vaddr (a process address minus Module.Base).
func (t *SymTable) Lookup(vaddr uint64) (string, bool) {
	i := sort.Search(len(t.start), func(i int) bool { return t.start[i] > vaddr }) - 1
	if i < 0 || vaddr >= t.end[i] {
		return "", false
	}
	return t.name[i], true
}

// FuncSymbols returns the function symbols of the ELF file at hostPath:
// .symtab when the file has one (it is the superset), else .dynsym. A file
// with neither yields an empty table. Tables are cached per file identity,
// like Symbols.
func FuncSymbols(hostPath string) (*SymTable, error) {
	fi, err := lookupFile(hostPath)
	if err != nil {
		return nil, fmt.Errorf("read function symbols of %s: %w", hostPath, err)
	}
	fi.mu.Lock()
	defer fi.mu.Unlock()
	if fi.funcs != nil {
		return fi.funcs, nil
	}
	t, err := readFuncSymbols(hostPath)
	if err != nil {
		return nil, fmt.Errorf("read function symbols of %s: %w", hostPath, err)
	}
	fi.funcs = t
	return t, nil
}

func readFuncSymbols(path string) (*SymTable, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return funcSymbols(f)
}

// funcSymbols builds the table of an opened ELF file.
func funcSymbols(f *elf.File) (*SymTable, error) {
	syms, err := f.Symbols()
	if errors.Is(err, elf.ErrNoSymbols) {
		syms, err = f.DynamicSymbols()
	}
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, err
	}
	type fn struct {
		start, end uint64
		name       string
	}
	var fns []fn
	for _, s := range syms {
		// A range that wraps past 2^64 is a corrupt entry, and would break
		// the table's order.
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF || s.Size == 0 || s.Name == "" || s.Value+s.Size < s.Value {
			continue
		}
		fns = append(fns, fn{s.Value, s.Value + s.Size, s.Name})
	}
	// By address; among aliases of one address the longest function first,
	// then by name, so that lookups are deterministic.
	sort.Slice(fns, func(i, j int) bool {
		a, b := fns[i], fns[j]
		if a.start != b.start {
			return a.start < b.start
		}
		if a.end != b.end {
			return a.end > b.end
		}
		return a.name < b.name
	})
	t := &SymTable{}
	for i, s := range fns {
		if i > 0 && s.start == fns[i-1].start {
			continue
		}
		t.start = append(t.start, s.start)
		t.end = append(t.end, s.end)
		t.name = append(t.name, s.name)
	}
	return t, nil
}
