package python

import (
	"bytes"
	"container/list"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/specprof/specprof/agent/proc"
)

// Code is what a code object names.
type Code struct {
	Addr uint64
	// Qualname is co_qualname ("EAGLEWorker.verify") on 3.11+; 3.10 has no
	// qualified names, so it equals Name there.
	Qualname  string
	Name      string
	Filename  string
	FirstLine int // co_firstlineno: the def line, or the first decorator's

	linetable []byte // co_linetable, for Symbolizer.Line; nil if unreadable
}

// DefaultCacheSize bounds the Symbolizer's cache of code objects; a large
// server has tens of thousands of live functions, and each entry is small.
const DefaultCacheSize = 64 << 10

// Limits that keep a torn read from turning into a huge allocation.
const (
	maxStringBytes    = 64 << 10
	maxLinetableBytes = 1 << 20
)

// Symbolizer turns code object addresses of one process into names. It is
// safe for concurrent use.
type Symbolizer struct {
	rt  *Runtime
	off Offsets
	// read copies len(b) bytes of the target's memory at addr into b.
	read func(addr uint64, b []byte) error
	// hdrLen covers every PyCodeObject field read, so a code object costs
	// one read plus one per string.
	hdrLen int
	// codeType is &PyCode_Type: from the runtime, or learned from the
	// first object whose type is named "code" when symbols are stripped.
	codeType atomic.Uint64

	mu    sync.Mutex
	max   int
	ll    *list.List // front = most recently used; values are Code
	items map[uint64]*list.Element
}

// NewSymbolizer returns a Symbolizer for rt's process with a cache of
// DefaultCacheSize code objects.
func NewSymbolizer(rt *Runtime) *Symbolizer {
	o := rt.Offsets
	hdr := uint64(obTypeOff + 8)
	for _, end := range []uint64{o.CodeFilename + 8, o.CodeName + 8, o.CodeQualname + 8, o.CodeFirstLineNo + 4, o.CodeLinetable + 8} {
		hdr = max(hdr, end)
	}
	read := func(addr uint64, b []byte) error { return proc.ReadMem(rt.PID, addr, b) }
	s := &Symbolizer{rt: rt, off: o, read: read, hdrLen: int(hdr), max: DefaultCacheSize, ll: list.New(), items: map[uint64]*list.Element{}}
	s.codeType.Store(rt.CodeTypeAddr)
	return s
}

// Code returns what the code object at addr names. It checks that the
// object's type is PyCode_Type, so an address whose object was freed and
// reused for something else yields an error wrapping ErrNotCode rather than
// a wrong name. Successful results are cached until Invalidate(addr) or
// eviction; errors are not cached (a torn read may succeed next time).
func (s *Symbolizer) Code(addr uint64) (Code, error) {
	s.mu.Lock()
	if e, ok := s.items[addr]; ok {
		s.ll.MoveToFront(e)
		c := e.Value.(Code)
		s.mu.Unlock()
		return c, nil
	}
	s.mu.Unlock()

	c, err := s.readCode(addr)
	if err != nil {
		return Code{}, fmt.Errorf("symbolize code object 0x%x of pid %d: %w", addr, s.rt.PID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.items[addr]; ok { // raced with another reader
		e.Value = c
		s.ll.MoveToFront(e)
		return c, nil
	}
	s.items[addr] = s.ll.PushFront(c)
	if s.ll.Len() > s.max {
		old := s.ll.Back()
		s.ll.Remove(old)
		delete(s.items, old.Value.(Code).Addr)
	}
	return c, nil
}

// Invalidate drops the cached entry for addr, for when the agent learns the
// object was freed (its address may now hold another code object).
func (s *Symbolizer) Invalidate(addr uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.items[addr]; ok {
		s.ll.Remove(e)
		delete(s.items, addr)
	}
}

// Len returns the number of cached code objects.
func (s *Symbolizer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ll.Len()
}

func (s *Symbolizer) readCode(addr uint64) (Code, error) {
	if addr == 0 || addr%8 != 0 {
		return Code{}, fmt.Errorf("misaligned or null address: %w", ErrNotCode)
	}
	hdr := make([]byte, s.hdrLen)
	if err := s.read(addr, hdr); err != nil {
		return Code{}, err
	}
	ptr := func(off uint64) uint64 { return binary.LittleEndian.Uint64(hdr[off:]) }
	if err := s.checkCodeType(ptr(obTypeOff)); err != nil {
		return Code{}, err
	}
	o := s.off
	c := Code{Addr: addr, FirstLine: int(int32(binary.LittleEndian.Uint32(hdr[o.CodeFirstLineNo:])))}
	var err error
	if c.Name, err = s.readString(ptr(o.CodeName)); err != nil {
		return Code{}, fmt.Errorf("read co_name: %w", err)
	}
	if c.Filename, err = s.readString(ptr(o.CodeFilename)); err != nil {
		return Code{}, fmt.Errorf("read co_filename: %w", err)
	}
	c.Qualname = c.Name
	if o.CodeQualname != 0 {
		if c.Qualname, err = s.readString(ptr(o.CodeQualname)); err != nil {
			return Code{}, fmt.Errorf("read co_qualname: %w", err)
		}
	}
	// Line numbers are optional: a code object without a readable table is
	// still named.
	c.linetable, _ = s.readBytes(ptr(o.CodeLinetable))
	return c, nil
}

// checkCodeType verifies an ob_type. With PyCode_Type unknown (stripped
// dynsym), the type object's tp_name must be "code"; that address is then
// remembered.
func (s *Symbolizer) checkCodeType(typ uint64) error {
	want := s.codeType.Load()
	if want != 0 {
		if typ != want {
			return fmt.Errorf("ob_type is 0x%x, not PyCode_Type 0x%x: %w", typ, want, ErrNotCode)
		}
		return nil
	}
	name, err := s.typeName(typ)
	if err != nil || name != "code" {
		return fmt.Errorf("ob_type 0x%x is not the code type: %w", typ, ErrNotCode)
	}
	s.codeType.CompareAndSwap(0, typ)
	return nil
}

// typeName reads the tp_name C string of a type object (at most 32 bytes).
func (s *Symbolizer) typeName(typ uint64) (string, error) {
	if typ == 0 {
		return "", fmt.Errorf("null type")
	}
	b := make([]byte, 8)
	if err := s.read(typ+typeNameOff, b); err != nil {
		return "", err
	}
	name := make([]byte, 32)
	if err := s.read(binary.LittleEndian.Uint64(b), name); err != nil {
		return "", err
	}
	if i := bytes.IndexByte(name, 0); i >= 0 {
		return string(name[:i]), nil
	}
	return "", fmt.Errorf("tp_name longer than %d bytes", len(name))
}

// readString decodes a compact PyUnicode object (reference/targets.md §4.1
// step 6): length at +16, state at +32 with kind in bits 2–4, compact in
// bit 5, ascii in bit 6; data right after PyASCIIObject (ASCII) or
// PyCompactUnicodeObject (kind 1/2/4 bytes per code point). Identifiers and
// file names are always compact; legacy strings are rejected.
func (s *Symbolizer) readString(addr uint64) (string, error) {
	if addr == 0 {
		return "", fmt.Errorf("null string")
	}
	o := s.off
	// Optimistically read the header plus a typical name in one go; fall
	// back to the exact header if that runs off the end of a mapping.
	const guess = 96
	buf := make([]byte, o.UnicodeCompactData+guess)
	if err := s.read(addr, buf); err != nil {
		// The header must hold state, whatever the offsets say.
		buf = buf[:max(o.UnicodeASCIIData, unicodeStateOff+4)]
		if err := s.read(addr, buf); err != nil {
			return "", err
		}
	}
	if t := s.rt.UnicodeTypeAddr; t != 0 {
		if got := binary.LittleEndian.Uint64(buf[obTypeOff:]); got != t {
			return "", fmt.Errorf("object at 0x%x has type 0x%x, not PyUnicode_Type 0x%x", addr, got, t)
		}
	}
	length := int64(binary.LittleEndian.Uint64(buf[unicodeLengthOff:]))
	state := binary.LittleEndian.Uint32(buf[unicodeStateOff:])
	kind := int64(state >> 2 & 7)
	compact := state>>5&1 == 1
	ascii := state>>6&1 == 1
	if !compact {
		return "", fmt.Errorf("string at 0x%x is not compact", addr)
	}
	dataOff, width := o.UnicodeCompactData, kind
	if ascii {
		dataOff, width = o.UnicodeASCIIData, 1
		if kind != 1 {
			return "", fmt.Errorf("string at 0x%x: ascii with kind %d", addr, kind)
		}
	}
	if width != 1 && width != 2 && width != 4 {
		return "", fmt.Errorf("string at 0x%x: invalid kind %d", addr, kind)
	}
	if length < 0 || length > maxStringBytes/width { // length*width may overflow
		return "", fmt.Errorf("string at 0x%x: implausible length %d", addr, length)
	}
	n := uint64(length * width)
	var data []byte
	if dataOff+n <= uint64(len(buf)) {
		data = buf[dataOff : dataOff+n]
	} else {
		data = make([]byte, n)
		if err := s.read(addr+dataOff, data); err != nil {
			return "", err
		}
	}
	switch {
	case ascii:
		for _, c := range data {
			if c >= utf8.RuneSelf {
				return "", fmt.Errorf("string at 0x%x: non-ASCII byte in an ASCII string", addr)
			}
		}
		return string(data), nil
	case width == 1: // Latin-1
		var sb strings.Builder
		for _, c := range data {
			sb.WriteRune(rune(c))
		}
		return sb.String(), nil
	case width == 2: // UCS-2: code points, never surrogate pairs
		var sb strings.Builder
		for i := 0; i < len(data); i += 2 {
			sb.WriteRune(rune(binary.LittleEndian.Uint16(data[i:])))
		}
		return sb.String(), nil
	default: // UCS-4
		var sb strings.Builder
		for i := 0; i < len(data); i += 4 {
			sb.WriteRune(rune(binary.LittleEndian.Uint32(data[i:])))
		}
		return sb.String(), nil
	}
}

// readBytes reads the contents of a PyBytesObject.
func (s *Symbolizer) readBytes(addr uint64) ([]byte, error) {
	if addr == 0 {
		return nil, fmt.Errorf("null bytes object")
	}
	b := make([]byte, 8)
	if err := s.read(addr+bytesSizeOff, b); err != nil {
		return nil, err
	}
	n := int64(binary.LittleEndian.Uint64(b))
	if n < 0 || n > maxLinetableBytes {
		return nil, fmt.Errorf("bytes at 0x%x: implausible size %d", addr, n)
	}
	data := make([]byte, n)
	if err := s.read(addr+bytesDataOff, data); err != nil {
		return nil, err
	}
	return data, nil
}
