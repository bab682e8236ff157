package python

import (
	"errors"
	"fmt"
)

// Version is a CPython release number.
type Version struct{ Major, Minor, Micro int }

// String formats v as "3.12.1".
func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Micro) }

// VersionFromHex decodes PY_VERSION_HEX (0xMMmmuuRS, as in Py_Version and
// sys.hexversion); the release level and serial are dropped.
func VersionFromHex(hex uint32) Version {
	return Version{Major: int(hex >> 24), Minor: int(hex >> 16 & 0xff), Micro: int(hex >> 8 & 0xff)}
}

// Less reports whether v is an older release than w.
func (v Version) Less(w Version) bool {
	if v.Major != w.Major {
		return v.Major < w.Major
	}
	if v.Minor != w.Minor {
		return v.Minor < w.Minor
	}
	return v.Micro < w.Micro
}

// Supported returns nil for the releases specprof can read (3.10–3.14) and
// an *UnsupportedError otherwise.
func (v Version) Supported() error {
	if v.Major == 3 && v.Minor >= 10 && v.Minor <= 14 {
		return nil
	}
	return &UnsupportedError{Version: v}
}

var (
	// ErrNoProcess is matched (errors.Is) by Discover's error for a pid
	// that does not exist.
	ErrNoProcess = errors.New("no such process")
	// ErrNotPython is matched by Discover's error for a process without a
	// CPython runtime.
	ErrNotPython = errors.New("not a Python process")
	// ErrUnsupported is matched by *UnsupportedError.
	ErrUnsupported = errors.New("unsupported Python")
	// ErrNotCode is matched by Symbolizer.Code's error when the address
	// does not hold a code object (freed and reused, or never was one).
	ErrNotCode = errors.New("not a code object")
	// ErrNoThreadState is matched by Symbolizer.ThreadFrames's error when
	// the thread has no Python thread state (not started by or never
	// entered the interpreter).
	ErrNoThreadState = errors.New("no Python thread state")
)

// UnsupportedError reports a CPython that specprof cannot read.
type UnsupportedError struct {
	Version Version
	// FreeThreaded marks a --disable-gil build (3.13t, 3.14t), whose object
	// headers and frame layout differ.
	FreeThreaded bool
}

func (e *UnsupportedError) Error() string {
	if e.FreeThreaded {
		return fmt.Sprintf("unsupported Python version %v (free-threaded build): specprof supports CPython 3.10–3.14 with the GIL", e.Version)
	}
	return fmt.Sprintf("unsupported Python version %v: specprof supports CPython 3.10–3.14", e.Version)
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// kindError is an error with its own message that still matches a sentinel,
// so messages read naturally ("pid 42 does not exist") and callers can test
// errors.Is(err, ErrNoProcess).
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string        { return e.msg }
func (e *kindError) Is(target error) bool { return target == e.kind }
