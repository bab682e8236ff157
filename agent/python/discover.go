package python

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"log/slog"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/specprof/specprof/agent/proc"
)

// Runtime describes the CPython interpreter of one process.
type Runtime struct {
	PID     int
	Version Version
	// RuntimeAddr is the address of _PyRuntime in the target.
	RuntimeAddr uint64
	// Module is the executable or libpython that defines _PyRuntime.
	Module proc.Module
	// CodeTypeAddr is &PyCode_Type in the target, to validate code objects;
	// 0 when the symbol is missing (the Symbolizer then checks tp_name).
	CodeTypeAddr uint64
	// UnicodeTypeAddr is &PyUnicode_Type in the target, to validate strings;
	// 0 when the symbol is missing.
	UnicodeTypeAddr uint64
	// Offsets are what the frame walker uses.
	Offsets Offsets
	// OffsetsFromTarget reports that Offsets were read from the target's
	// _PyRuntime.debug_offsets (3.13+) rather than the built-in table.
	OffsetsFromTarget bool
}

const (
	symRuntime     = "_PyRuntime"
	symCodeType    = "PyCode_Type"
	symUnicodeType = "PyUnicode_Type"
	symVersion     = "Py_Version"
	// runtimeSection holds _PyRuntime alone (3.10+), so it locates the
	// runtime in binaries stripped of .symtab and .dynsym entries.
	runtimeSection = ".PyRuntime"
)

// Discover finds the CPython runtime of pid: the module that defines
// _PyRuntime, its address, the interpreter version and the offsets to walk
// its frames. Errors match ErrNoProcess, ErrNotPython or ErrUnsupported
// (errors.Is) where those apply.
func Discover(pid int) (*Runtime, error) {
	noProcess := &kindError{fmt.Sprintf("pid %d does not exist", pid), ErrNoProcess}
	if !proc.Exists(pid) {
		return nil, noProcess
	}
	exe, err := proc.Exe(pid)
	if err != nil {
		if !proc.Exists(pid) {
			return nil, noProcess
		}
		return nil, fmt.Errorf("discover Python in pid %d: %w", pid, err)
	}
	mods, err := proc.Modules(pid)
	if err != nil {
		if !proc.Exists(pid) {
			return nil, noProcess
		}
		return nil, fmt.Errorf("discover Python in pid %d: %w", pid, err)
	}

	rt := &Runtime{PID: pid}
	var syms map[string]elf.Symbol
	for _, m := range candidates(mods, exe) {
		s, err := proc.Symbols(m.HostPath, symRuntime, symCodeType, symUnicodeType, symVersion)
		if err != nil {
			slog.Debug("skip module while looking for _PyRuntime", "pid", pid, "module", m.Path, "err", err)
			continue
		}
		if sym, ok := s[symRuntime]; ok {
			rt.RuntimeAddr = sym.Value + m.Base
		} else if addr, ok := sectionAddr(m.HostPath, runtimeSection); ok {
			rt.RuntimeAddr = addr + m.Base
		} else {
			continue
		}
		rt.Module, syms = m, s
		break
	}
	if rt.RuntimeAddr == 0 {
		return nil, &kindError{fmt.Sprintf("pid %d is not a Python process: no _PyRuntime in %s or its libraries", pid, exe), ErrNotPython}
	}
	if s, ok := syms[symCodeType]; ok {
		rt.CodeTypeAddr = s.Value + rt.Module.Base
	}
	if s, ok := syms[symUnicodeType]; ok {
		rt.UnicodeTypeAddr = s.Value + rt.Module.Base
	}

	// On 3.13+ _PyRuntime starts with the debug offsets: cookie, version,
	// free_threaded.
	hdrBuf := make([]byte, 24)
	if err := proc.ReadMem(pid, rt.RuntimeAddr, hdrBuf); err != nil {
		return nil, fmt.Errorf("read _PyRuntime of pid %d: %w", pid, err)
	}
	dbg, hasDebug := parseDebugHeader(hdrBuf)

	switch sym, ok := syms[symVersion]; {
	case ok:
		b := make([]byte, 4)
		if err := proc.ReadMem(pid, sym.Value+rt.Module.Base, b); err != nil {
			return nil, fmt.Errorf("read Py_Version of pid %d: %w", pid, err)
		}
		rt.Version = VersionFromHex(binary.LittleEndian.Uint32(b))
		if hasDebug && VersionFromHex(dbg.Version) != rt.Version {
			slog.Warn("Py_Version and _PyRuntime.debug_offsets.version disagree",
				"pid", pid, "Py_Version", rt.Version, "debug_offsets", VersionFromHex(dbg.Version))
		}
	case hasDebug:
		rt.Version = VersionFromHex(dbg.Version)
	default:
		if rt.Version, err = versionFromFile(rt.Module); err != nil {
			return nil, fmt.Errorf("detect Python version of pid %d: %w", pid, err)
		}
	}

	if (hasDebug && dbg.FreeThreaded) || freeThreadedName(rt.Module.Path) || freeThreadedName(exe) {
		return nil, fmt.Errorf("discover Python in pid %d: %w", pid, &UnsupportedError{Version: rt.Version, FreeThreaded: true})
	}
	if err := rt.Version.Supported(); err != nil {
		return nil, fmt.Errorf("discover Python in pid %d: %w", pid, err)
	}
	if rt.Offsets, err = TableOffsets(rt.Version); err != nil {
		return nil, fmt.Errorf("discover Python in pid %d: %w", pid, err)
	}
	if rt.Version.Minor >= 13 {
		rt.offsetsFromTarget(hasDebug)
	}
	return rt, nil
}

// offsetsFromTarget replaces the table offsets with the target's own
// debug offsets when they can be read and make sense; disagreements with
// the table are logged, since they mean the table is wrong for this build.
func (rt *Runtime) offsetsFromTarget(hasDebug bool) {
	log := slog.With("pid", rt.PID, "python", rt.Version.String())
	if !hasDebug {
		log.Warn("no debug_offsets cookie at _PyRuntime; using built-in offsets", "runtime", fmt.Sprintf("0x%x", rt.RuntimeAddr))
		return
	}
	b := make([]byte, debugLayouts[rt.Version.Minor].size)
	if err := proc.ReadMem(rt.PID, rt.RuntimeAddr, b); err != nil {
		log.Warn("cannot read _PyRuntime.debug_offsets; using built-in offsets", "err", err)
		return
	}
	o, err := offsetsFromDebug(rt.Version.Minor, b, rt.Offsets)
	if err != nil {
		log.Warn("invalid _PyRuntime.debug_offsets; using built-in offsets", "err", err)
		return
	}
	for _, d := range diffOffsets(rt.Offsets, o) {
		log.Warn("built-in offset differs from the target's debug_offsets; using the target's",
			"field", d.Field, "table", d.Table, "debug_offsets", d.Rt)
	}
	rt.Offsets, rt.OffsetsFromTarget = o, true
}

// candidates orders the modules that may hold _PyRuntime: the executable
// first (Debian/Ubuntu python3.X link libpython statically; a second,
// unused libpython pulled in by a badly linked extension must not win),
// then shared libpythons (pyenv, conda, embedders), then anything else
// named like python (uwsgi-style plugins).
func candidates(mods []proc.Module, exe string) []proc.Module {
	var first, lib, other []proc.Module
	for _, m := range mods {
		switch base := path.Base(m.Path); {
		case m.Path == exe:
			first = append(first, m)
		case proc.IsLibPython(m.Path):
			lib = append(lib, m)
		case strings.Contains(base, "python") && !strings.Contains(base, ".cpython-"):
			// Extension modules (foo.cpython-312-x86_64-linux-gnu.so) only
			// import the C API, so they are not worth opening.
			other = append(other, m)
		}
	}
	return append(append(first, lib...), other...)
}

var (
	// pyNameRE finds the minor version in python3.10, libpython3.10.so.1.0.
	pyNameRE = regexp.MustCompile(`python3\.(\d+)(t?)`)
	// rodataVersionRE finds PY_VERSION ("3.10.13", "3.10.0rc2", "3.10.13+")
	// as a NUL-terminated string. The linker merges string tails, so the
	// bytes before it may belong to a longer string such as
	// "/root/.pyenv/versions/3.10.13": require only a non-version byte.
	rodataVersionRE = regexp.MustCompile(`[^0-9.](3)\.(\d{1,2})\.(\d{1,2})(?:(?:a|b|rc)\d{1,2})?\+?\x00`)
)

func freeThreadedName(p string) bool {
	m := pyNameRE.FindStringSubmatch(path.Base(p))
	return m != nil && m[2] == "t"
}

// versionFromFile is for releases without Py_Version (≤3.10): it takes the
// minor version from the file name when it has one and the full version
// from the PY_VERSION string in .rodata (used by Py_GetVersion).
func versionFromFile(m proc.Module) (Version, error) {
	f, err := elf.Open(m.HostPath)
	if err != nil {
		return Version{}, fmt.Errorf("open %s: %w", m.Path, err)
	}
	defer f.Close()
	return versionFromELF(m.Path, f)
}

// versionFromELF is versionFromFile on the opened file at path p.
func versionFromELF(p string, f *elf.File) (Version, error) {
	minor := -1
	if mm := pyNameRE.FindStringSubmatch(path.Base(p)); mm != nil {
		minor, _ = strconv.Atoi(mm[1])
	}
	if sec := f.Section(".rodata"); sec != nil {
		data, err := sec.Data()
		if err != nil {
			return Version{}, fmt.Errorf("read .rodata of %s: %w", p, err)
		}
		for _, mm := range rodataVersionRE.FindAllSubmatch(data, -1) {
			v := Version{Major: 3}
			v.Minor, _ = strconv.Atoi(string(mm[2]))
			v.Micro, _ = strconv.Atoi(string(mm[3]))
			// Without a name hint, only a pre-3.11 string can be PY_VERSION
			// here: newer releases export Py_Version.
			if v.Minor == minor || (minor < 0 && v.Minor <= 10) {
				return v, nil
			}
		}
	}
	if minor >= 0 {
		return Version{Major: 3, Minor: minor}, nil
	}
	return Version{}, fmt.Errorf("no Py_Version symbol, version string or versioned name in %s", p)
}

// sectionAddr returns the virtual address of the named section.
func sectionAddr(hostPath, name string) (uint64, bool) {
	f, err := elf.Open(hostPath)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	s := f.Section(name)
	if s == nil || s.Addr == 0 {
		return 0, false
	}
	return s.Addr, true
}
