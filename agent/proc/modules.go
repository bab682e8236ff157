package proc

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// Module is an ELF file (executable or shared object) mapped into a process.
type Module struct {
	// Path is the file's path as the target sees it (as in /proc/PID/maps).
	Path string
	// HostPath opens the same file from the agent: /proc/PID/root + Path, or
	// /proc/PID/map_files/START-END when the file was deleted or replaced
	// since it was mapped.
	HostPath string
	// Base is the load bias: add it to an ELF virtual address (a symbol
	// value, a section address) to get the address in the process. It is 0
	// for non-PIE executables.
	Base  uint64
	Inode uint64
	Dev   string // "major:minor" in hex, as in /proc/PID/maps
	// Deleted reports that the file was unlinked after it was mapped.
	Deleted bool
	// Mappings are the file's mappings in the process, lowest address first.
	Mappings []Mapping
}

// Contains reports whether addr lies in one of the module's mappings.
func (m Module) Contains(addr uint64) bool {
	for _, mp := range m.Mappings {
		if mp.Contains(addr) {
			return true
		}
	}
	return false
}

// ErrNoModule is wrapped by FindModule when nothing matches.
var ErrNoModule = errors.New("no matching module")

// Modules returns the ELF files mapped executable into pid, in the order of
// their lowest mapping. Files that cannot be opened from the agent or are
// not ELF are skipped: a missing library must not hide the others.
func Modules(pid int) ([]Module, error) {
	maps, err := ReadMaps(pid)
	if err != nil {
		return nil, fmt.Errorf("list modules of pid %d: %w", pid, err)
	}
	type id struct {
		dev   string
		inode uint64
		path  string
	}
	var order []id
	groups := map[id][]Mapping{}
	for _, m := range maps {
		if !m.FileBacked() {
			continue
		}
		k := id{m.Dev, m.Inode, m.Path}
		if _, seen := groups[k]; !seen {
			order = append(order, k)
		}
		groups[k] = append(groups[k], m)
	}
	var mods []Module
	for _, k := range order {
		ms := groups[k]
		if !anyExecutable(ms) {
			continue // data files (locale-archive, fonts, model weights...)
		}
		mod, err := newModule(pid, ms)
		if err != nil {
			continue
		}
		mods = append(mods, mod)
	}
	return mods, nil
}

// FindModule returns the first module of pid whose Path satisfies match.
// The error wraps ErrNoModule when none does.
func FindModule(pid int, match func(path string) bool) (Module, error) {
	mods, err := Modules(pid)
	if err != nil {
		return Module{}, err
	}
	for _, m := range mods {
		if match(m.Path) {
			return m, nil
		}
	}
	return Module{}, fmt.Errorf("find module in pid %d: %w", pid, ErrNoModule)
}

func anyExecutable(ms []Mapping) bool {
	for _, m := range ms {
		if m.Executable() {
			return true
		}
	}
	return false
}

func newModule(pid int, ms []Mapping) (Module, error) {
	low := ms[0]
	mod := Module{
		Path:     low.Path,
		Inode:    low.Inode,
		Dev:      low.Dev,
		Deleted:  low.Deleted,
		Mappings: ms,
	}
	mod.HostPath = hostPath(pid, low)
	loads, err := loadSegments(mod.HostPath)
	if err != nil {
		return Module{}, fmt.Errorf("read program headers of %s in pid %d: %w", low.Path, pid, err)
	}
	if mod.Base, err = loadBias(low, loads); err != nil {
		return Module{}, fmt.Errorf("compute load bias of %s in pid %d: %w", low.Path, pid, err)
	}
	return mod, nil
}

// hostPath picks a path the agent can open for the file behind m. The
// /proc/PID/root path works across mount namespaces without privilege
// beyond ptrace access; map_files needs CAP_SYS_ADMIN (or
// CAP_CHECKPOINT_RESTORE), so it is only the answer for files that are gone
// or were replaced (inode changed) since the target mapped them.
func hostPath(pid int, m Mapping) string {
	root := procPath(pid, "root") + m.Path
	if !m.Deleted {
		if k, err := statKey(root); err == nil && k.ino == m.Inode {
			return root
		}
	}
	mf := procPath(pid, "map_files", strconv.FormatUint(m.Start, 16)+"-"+strconv.FormatUint(m.End, 16))
	if f, err := os.Open(mf); err == nil {
		f.Close()
		return mf
	}
	return root
}

// loadBias computes the difference between the addresses of m's file in
// the process and the virtual addresses in its program headers.
//
// The kernel maps each PT_LOAD page-aligned: file offset
// pagedown(p_offset) lands at bias + pagedown(p_vaddr). Because the ELF
// spec requires p_vaddr ≡ p_offset (mod page size), file offset o within
// that segment corresponds to virtual address p_vaddr - p_offset + o, so
// bias = m.Start - (p_vaddr - p_offset + m.Offset). This holds for PIE
// executables, shared objects (bias = base address) and non-PIE
// executables (bias 0), and for segments whose p_offset and p_vaddr differ
// (the RW segment of most libraries).
func loadBias(m Mapping, loads []elf.ProgHeader) (uint64, error) {
	page := uint64(os.Getpagesize())
	for _, p := range loads {
		lo := p.Off &^ (page - 1)
		hi := p.Off + p.Filesz
		if p.Filesz == 0 {
			hi = lo + page // pure-bss segment: match its first page only
		}
		if m.Offset >= lo && m.Offset < hi {
			return m.Start - (p.Vaddr - p.Off + m.Offset), nil
		}
	}
	return 0, fmt.Errorf("no PT_LOAD segment contains file offset 0x%x", m.Offset)
}
