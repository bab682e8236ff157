package proc

import (
	"container/list"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
)

// fileKey identifies a file's contents well enough to reuse what was parsed
// from it. The path is deliberately not part of it: the same library reached
// through /proc/A/root/... and /proc/B/root/... is one entry, while a file
// replaced in place (new inode or mtime) is a new one.
type fileKey struct {
	dev, ino uint64
	size     int64
	mtimeNs  int64
}

// fileInfo is what the agent keeps about one ELF file. syms records every
// name ever asked for, nil meaning "not defined in this file", so repeated
// lookups of missing names do not rescan the tables.
type fileInfo struct {
	mu     sync.Mutex
	loads  []elf.ProgHeader // PT_LOAD headers; nil until first needed
	isELF  bool
	probed bool
	syms   map[string]*elf.Symbol
	funcs  *SymTable // FuncSymbols; nil until first needed
}

// elfCacheSize bounds the number of files kept; a torch process maps a few
// hundred shared objects but the agent only looks symbols up in a handful.
const elfCacheSize = 256

type elfCache struct {
	mu    sync.Mutex
	ll    *list.List // front = most recently used; values are *cacheEntry
	items map[fileKey]*list.Element
}

type cacheEntry struct {
	key  fileKey
	info *fileInfo
}

var files = &elfCache{ll: list.New(), items: map[fileKey]*list.Element{}}

func (c *elfCache) get(k fileKey) *fileInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[k]; ok {
		c.ll.MoveToFront(e)
		return e.Value.(*cacheEntry).info
	}
	fi := &fileInfo{syms: map[string]*elf.Symbol{}}
	c.items[k] = c.ll.PushFront(&cacheEntry{key: k, info: fi})
	if c.ll.Len() > elfCacheSize {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.items, old.Value.(*cacheEntry).key)
	}
	return fi
}

func statKey(path string) (fileKey, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileKey{}, err
	}
	k := fileKey{size: st.Size(), mtimeNs: st.ModTime().UnixNano()}
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		k.dev, k.ino = uint64(s.Dev), s.Ino
	}
	return k, nil
}

func lookupFile(path string) (*fileInfo, error) {
	k, err := statKey(path)
	if err != nil {
		return nil, err
	}
	return files.get(k), nil
}

// errNotELF marks files that are mapped executable but are not ELF (rare:
// JIT caches, some packers); Modules skips them.
var errNotELF = errors.New("not an ELF file")

// loadSegments returns the PT_LOAD program headers of the ELF file at path.
func loadSegments(path string) ([]elf.ProgHeader, error) {
	fi, err := lookupFile(path)
	if err != nil {
		return nil, err
	}
	fi.mu.Lock()
	defer fi.mu.Unlock()
	if !fi.probed {
		f, err := elf.Open(path)
		if err != nil {
			var fe *elf.FormatError
			if errors.As(err, &fe) {
				fi.probed = true
				return nil, fmt.Errorf("%s: %w", path, errNotELF)
			}
			return nil, err
		}
		fi.loads = loadHeaders(f)
		f.Close()
		fi.probed, fi.isELF = true, true
	}
	if !fi.isELF {
		return nil, fmt.Errorf("%s: %w", path, errNotELF)
	}
	return fi.loads, nil
}

// loadHeaders returns the PT_LOAD program headers of an opened ELF file.
func loadHeaders(f *elf.File) []elf.ProgHeader {
	var loads []elf.ProgHeader
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			loads = append(loads, p.ProgHeader)
		}
	}
	return loads
}

// Symbols looks names up in the ELF file at hostPath, in .dynsym first and
// then in .symtab, and returns the defined ones (undefined imports are
// ignored). Names not defined in the file are absent from the map; that is
// not an error. Symbol values are link-time addresses: add Module.Base to
// get the address in a process.
//
// Results are cached per file identity (device, inode, size, mtime), so
// asking again for the same names, from any process that maps the same
// file, does not reread the file.
func Symbols(hostPath string, names ...string) (map[string]elf.Symbol, error) {
	fi, err := lookupFile(hostPath)
	if err != nil {
		return nil, fmt.Errorf("look up symbols in %s: %w", hostPath, err)
	}
	fi.mu.Lock()
	defer fi.mu.Unlock()
	want := map[string]bool{}
	for _, n := range names {
		if _, known := fi.syms[n]; !known {
			want[n] = true
		}
	}
	if len(want) > 0 {
		if err := scanSymbols(hostPath, want, fi.syms); err != nil {
			return nil, fmt.Errorf("look up symbols in %s: %w", hostPath, err)
		}
	}
	out := make(map[string]elf.Symbol, len(names))
	for _, n := range names {
		if s := fi.syms[n]; s != nil {
			out[n] = *s
		}
	}
	return out, nil
}

// scanSymbols records every name in want into syms: the defined symbol, or
// nil when neither table defines it.
func scanSymbols(path string, want map[string]bool, syms map[string]*elf.Symbol) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return scanELF(f, want, syms)
}

// scanELF is scanSymbols on an opened ELF file.
func scanELF(f *elf.File, want map[string]bool, syms map[string]*elf.Symbol) error {
	for _, table := range []func() ([]elf.Symbol, error){f.DynamicSymbols, f.Symbols} {
		if len(want) == 0 {
			break
		}
		list, err := table()
		if err != nil {
			if errors.Is(err, elf.ErrNoSymbols) {
				continue
			}
			return err
		}
		for i := range list {
			s := &list[i]
			if !want[s.Name] || s.Section == elf.SHN_UNDEF {
				continue
			}
			c := *s // copy: keeping &list[i] would pin the whole table
			syms[s.Name] = &c
			delete(want, s.Name)
		}
	}
	for n := range want {
		syms[n] = nil
	}
	return nil
}
