package proc

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End uint64 // [Start, End) in the target's address space
	Perms      string // e.g. "r-xp"
	Offset     uint64 // file offset of Start
	Dev        string // "major:minor" in hex, as printed by the kernel
	Inode      uint64 // 0 for anonymous and pseudo mappings
	// Path is the file path in the target's mount namespace, a pseudo name
	// such as "[vdso]" or "[heap]", or "" for anonymous memory. A " (deleted)"
	// suffix is stripped and reported in Deleted instead.
	Path    string
	Deleted bool // the file was unlinked after it was mapped
}

// Readable reports whether the mapping can be read.
func (m Mapping) Readable() bool { return len(m.Perms) > 0 && m.Perms[0] == 'r' }

// Executable reports whether the mapping holds code.
func (m Mapping) Executable() bool { return len(m.Perms) > 2 && m.Perms[2] == 'x' }

// Anonymous reports whether the mapping has no backing file and no pseudo name.
func (m Mapping) Anonymous() bool { return m.Path == "" }

// Pseudo reports whether the mapping is a kernel-named region such as
// [vdso], [vvar], [heap] or [stack].
func (m Mapping) Pseudo() bool {
	return strings.HasPrefix(m.Path, "[") && strings.HasSuffix(m.Path, "]")
}

// FileBacked reports whether the mapping is backed by a regular file
// (inode != 0 and a path that is not a pseudo name).
func (m Mapping) FileBacked() bool { return m.Inode != 0 && m.Path != "" && !m.Pseudo() }

// Contains reports whether addr lies in the mapping.
func (m Mapping) Contains(addr uint64) bool { return addr >= m.Start && addr < m.End }

// ReadMaps returns the mappings of pid in address order.
func ReadMaps(pid int) ([]Mapping, error) {
	f, err := os.Open(procPath(pid, "maps"))
	if err != nil {
		return nil, fmt.Errorf("read maps of pid %d: %w", pid, err)
	}
	defer f.Close()
	maps, err := parseMaps(f)
	if err != nil {
		return nil, fmt.Errorf("read maps of pid %d: %w", pid, err)
	}
	return maps, nil
}

const deletedSuffix = " (deleted)"

func parseMaps(r io.Reader) ([]Mapping, error) {
	var out []Mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		m, err := parseMapsLine(string(line))
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// parseMapsLine parses "start-end perms offset dev inode   path". The path is
// everything after the inode field, so paths containing spaces survive.
func parseMapsLine(line string) (Mapping, error) {
	var m Mapping
	rest := line
	field := func() string {
		rest = strings.TrimLeft(rest, " \t")
		i := strings.IndexAny(rest, " \t")
		if i < 0 {
			f := rest
			rest = ""
			return f
		}
		f := rest[:i]
		rest = rest[i:]
		return f
	}
	addrs, perms, off, dev, inode := field(), field(), field(), field(), field()
	lo, hi, ok := strings.Cut(addrs, "-")
	if !ok || inode == "" {
		return m, fmt.Errorf("malformed maps line %q", line)
	}
	var err error
	if m.Start, err = strconv.ParseUint(lo, 16, 64); err != nil {
		return m, fmt.Errorf("malformed maps line %q: %w", line, err)
	}
	if m.End, err = strconv.ParseUint(hi, 16, 64); err != nil {
		return m, fmt.Errorf("malformed maps line %q: %w", line, err)
	}
	if m.End <= m.Start {
		return m, fmt.Errorf("malformed maps line %q: the range is empty or reversed", line)
	}
	if m.Offset, err = strconv.ParseUint(off, 16, 64); err != nil {
		return m, fmt.Errorf("malformed maps line %q: %w", line, err)
	}
	if m.Inode, err = strconv.ParseUint(inode, 10, 64); err != nil {
		return m, fmt.Errorf("malformed maps line %q: %w", line, err)
	}
	m.Perms, m.Dev = perms, dev
	m.Path = strings.TrimLeft(rest, " \t")
	if m.Inode != 0 && strings.HasSuffix(m.Path, deletedSuffix) {
		m.Path = strings.TrimSuffix(m.Path, deletedSuffix)
		m.Deleted = true
	}
	return m, nil
}
