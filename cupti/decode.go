package cupti

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// Limits of one connection's kernel-name table: past them NAME records are counted in
// ConnStats.NamesDropped and ignored, so a hostile or broken stream cannot grow memory without
// bound.
const (
	MaxNames     = 1 << 20
	MaxNameBytes = 64 << 20
)

// ErrBadLength means a record length that is not a multiple of 8, shorter than a header or
// longer than MaxRecordLen: the stream cannot be framed any more.
var ErrBadLength = errors.New("cupti: bad record length")

// ErrBadHello means the stream does not start with a valid HELLO record.
var ErrBadHello = errors.New("cupti: stream does not start with a valid HELLO")

// DecodeErrors counts what a Decoder skipped, by class.
type DecodeErrors struct {
	BadLength   uint64 // unframeable length: the rest of the stream was discarded
	UnknownType uint64 // records of a type this reader does not know (skipped)
	Short       uint64 // records shorter than their type's payload (skipped)
	Truncated   uint64 // a partial record at the end of the stream
	BadName     uint64 // NAME records with id 0 or a length beyond the record or MaxNameLen
	BadHello    uint64 // a missing or invalid first HELLO, or a second HELLO (ignored)
}

// Total is the sum of every class.
func (e DecodeErrors) Total() uint64 {
	return e.BadLength + e.UnknownType + e.Short + e.Truncated + e.BadName + e.BadHello
}

// Add adds o's counts to e.
func (e *DecodeErrors) Add(o DecodeErrors) {
	e.BadLength += o.BadLength
	e.UnknownType += o.UnknownType
	e.Short += o.Short
	e.Truncated += o.Truncated
	e.BadName += o.BadName
	e.BadHello += o.BadHello
}

// Batch holds the records decoded from one read of a connection, by type, in stream order
// within each type. The slices are reused: a Batch is valid only until the Handler returns.
type Batch struct {
	Kernels    []Kernel
	Memcpys    []Memcpy
	Memsets    []Memset
	APIs       []API
	Syncs      []Sync
	GraphNodes []GraphNode
	Overheads  []Overhead
	Windows    []Window    // tracing windows opened or closed (duty-cycled tracing)
	GraphExecs []GraphExec // whole graph launches (graph-level tracing)
	// Stats is the latest STATS record of this batch, nil when it had none.
	Stats *LibStats
	// FlushAck is set when a STATS record answered a flush request (Receiver.Flush).
	FlushAck bool
	// Final is set when the library announced the end of its process.
	Final bool

	stats LibStats
}

// Len is the number of records in the batch (STATS excluded).
func (b *Batch) Len() int {
	return len(b.Kernels) + len(b.Memcpys) + len(b.Memsets) + len(b.APIs) + len(b.Syncs) +
		len(b.GraphNodes) + len(b.Overheads) + len(b.Windows) + len(b.GraphExecs)
}

// Reset empties the batch, keeping its storage.
func (b *Batch) Reset() {
	b.Kernels = b.Kernels[:0]
	b.Memcpys = b.Memcpys[:0]
	b.Memsets = b.Memsets[:0]
	b.APIs = b.APIs[:0]
	b.Syncs = b.Syncs[:0]
	b.GraphNodes = b.GraphNodes[:0]
	b.Overheads = b.Overheads[:0]
	b.Windows = b.Windows[:0]
	b.GraphExecs = b.GraphExecs[:0]
	b.Stats = nil
	b.FlushAck = false
	b.Final = false
}

// DecoderStats is what a Decoder has seen so far.
type DecoderStats struct {
	Records      [NumRecordTypes]uint64 // decoded records by RecordType (index 0 unused)
	Bytes        uint64                 // bytes consumed
	Errors       DecodeErrors
	NamesDropped uint64   // NAME records beyond MaxNames / MaxNameBytes
	Lib          LibStats // the library's latest STATS
}

// Decoder decodes one connection's byte stream. Decode must be called from one goroutine at a
// time; Name, Hello and Stats may be called from any goroutine.
type Decoder struct {
	mu        sync.RWMutex
	hello     Hello
	gotHello  bool
	broken    bool
	names     map[uint32]string
	nameBytes int
	st        DecoderStats
}

// NewDecoder returns a Decoder for a new stream.
func NewDecoder() *Decoder {
	return &Decoder{names: make(map[uint32]string)}
}

// Hello returns the stream's HELLO and whether it has been decoded.
func (d *Decoder) Hello() (Hello, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.hello, d.gotHello
}

// Name resolves a kernel name id ("" when unknown).
func (d *Decoder) Name(id uint32) string {
	d.mu.RLock()
	s := d.names[id]
	d.mu.RUnlock()
	return s
}

// Stats returns a snapshot of the decoder's counters.
func (d *Decoder) Stats() DecoderStats {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.st
}

// Finish accounts for the end of the stream with rest bytes of a partial record left over.
func (d *Decoder) Finish(rest int) {
	if rest > 0 {
		d.mu.Lock()
		d.st.Errors.Truncated++
		d.mu.Unlock()
	}
}

// Decode appends the complete records at the start of p to b and returns how many bytes it
// consumed; a partial record at the end stays for the next call (with more bytes after it).
// Malformed records are counted and skipped. An error (ErrBadLength, ErrBadHello) means the
// stream cannot be decoded further: the caller should drop the connection. Decode never
// panics, whatever p holds.
func (d *Decoder) Decode(p []byte, b *Batch) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.broken {
		return 0, ErrBadLength
	}
	off := 0
	for len(p)-off >= SizeofHeader {
		n := int(binary.LittleEndian.Uint32(p[off:]))
		if n < SizeofHeader || n%8 != 0 || n > MaxRecordLen {
			d.broken = true
			d.st.Errors.BadLength++
			d.st.Bytes += uint64(off)
			return off, fmt.Errorf("%w: %d bytes at stream offset %d", ErrBadLength, n, d.st.Bytes)
		}
		if len(p)-off < n {
			break
		}
		body := p[off+SizeofHeader : off+n]
		typ := RecordType(binary.LittleEndian.Uint16(p[off+4:]))
		flags := binary.LittleEndian.Uint16(p[off+6:])
		off += n
		if !d.gotHello {
			if typ != TypeHello || !d.decodeHello(body) {
				d.broken = true
				d.st.Errors.BadHello++
				d.st.Bytes += uint64(off)
				return off, ErrBadHello
			}
			d.st.Records[TypeHello]++
			continue
		}
		d.record(typ, flags, body, b)
	}
	d.st.Bytes += uint64(off)
	return off, nil
}

func (d *Decoder) decodeHello(body []byte) bool {
	if len(body) < SizeofHello {
		return false
	}
	var h Hello
	load(&h, body)
	if string(h.Magic[:]) != "SPCUPTI1" || h.WireVersion != WireVersion {
		return false
	}
	d.hello, d.gotHello = h, true
	return true
}

// load copies the first sizeof(*dst) bytes of src (at least that long) into *dst. The wire
// structs hold no pointers and the wire is little-endian like the host; copying (rather than
// casting) keeps unaligned input safe.
func load[T any](dst *T, src []byte) {
	copy(unsafe.Slice((*byte)(unsafe.Pointer(dst)), unsafe.Sizeof(*dst)), src)
}

// sizeofWindowV1 is the WINDOW record's size before OpenAsOf was appended.
const sizeofWindowV1 = 16

// appendRec appends the record at the start of body to s; fields past the end
// of a shorter body (a library that predates them) read as zero.
func appendRec[T any](s []T, body []byte) []T {
	var zero T
	s = append(s, zero)
	load(&s[len(s)-1], body)
	return s
}

// record decodes one record after the HELLO.
func (d *Decoder) record(typ RecordType, flags uint16, body []byte, b *Batch) {
	short := func(size int) bool {
		if len(body) < size {
			d.st.Errors.Short++
			return true
		}
		d.st.Records[typ]++
		return false
	}
	switch typ {
	case TypeKernel:
		if !short(SizeofKernel) {
			b.Kernels = appendRec(b.Kernels, body)
		}
	case TypeMemcpy:
		if !short(SizeofMemcpy) {
			b.Memcpys = appendRec(b.Memcpys, body)
		}
	case TypeMemset:
		if !short(SizeofMemset) {
			b.Memsets = appendRec(b.Memsets, body)
		}
	case TypeAPI:
		if !short(SizeofAPI) {
			b.APIs = appendRec(b.APIs, body)
		}
	case TypeSync:
		if !short(SizeofSync) {
			b.Syncs = appendRec(b.Syncs, body)
		}
	case TypeGraphNode:
		if !short(SizeofGraphNode) {
			b.GraphNodes = appendRec(b.GraphNodes, body)
		}
	case TypeOverhead:
		if !short(SizeofOverhead) {
			b.Overheads = appendRec(b.Overheads, body)
		}
	case TypeWindow:
		if !short(sizeofWindowV1) { // a library before OpenAsOf sends 16 bytes: OpenAsOf reads 0
			b.Windows = appendRec(b.Windows, body)
		}
	case TypeGraphExec:
		if !short(SizeofGraphExec) {
			b.GraphExecs = appendRec(b.GraphExecs, body)
		}
	case TypeStats:
		if !short(SizeofStats) {
			load(&b.stats, body)
			b.Stats = &b.stats
			b.FlushAck = b.FlushAck || flags&FlagFlushAck != 0
			b.Final = b.Final || flags&FlagFinal != 0
			d.st.Lib = b.stats
		}
	case TypeName:
		d.name(body)
	case TypeHello:
		d.st.Errors.BadHello++
	default:
		d.st.Errors.UnknownType++
	}
}

func (d *Decoder) name(body []byte) {
	if len(body) < SizeofName {
		d.st.Errors.Short++
		return
	}
	var nh nameHeader
	load(&nh, body)
	if nh.Id == 0 || nh.Len > MaxNameLen || int(nh.Len) > len(body)-SizeofName {
		d.st.Errors.BadName++
		return
	}
	d.st.Records[TypeName]++
	if _, ok := d.names[nh.Id]; !ok && (len(d.names) >= MaxNames || d.nameBytes+int(nh.Len) > MaxNameBytes) {
		d.st.NamesDropped++
		return
	}
	s := string(body[SizeofName : SizeofName+int(nh.Len)])
	d.nameBytes += len(s) - len(d.names[nh.Id])
	d.names[nh.Id] = s
}
