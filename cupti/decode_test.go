package cupti

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"unsafe"
)

// encRecord encodes one record the way the library does: header, payload, extra bytes,
// zero padding to a multiple of 8.
func encRecord[T any](typ RecordType, flags uint16, payload *T, extra []byte) []byte {
	p := unsafe.Slice((*byte)(unsafe.Pointer(payload)), unsafe.Sizeof(*payload))
	n := (SizeofHeader + len(p) + len(extra) + 7) &^ 7
	b := make([]byte, n)
	binary.LittleEndian.PutUint32(b, uint32(n))
	binary.LittleEndian.PutUint16(b[4:], uint16(typ))
	binary.LittleEndian.PutUint16(b[6:], flags)
	copy(b[SizeofHeader:], p)
	copy(b[SizeofHeader+len(p):], extra)
	return b
}

func encHello(pid uint32) []byte {
	h := Hello{WireVersion: WireVersion, Pid: pid, CuptiVersion: 130001, DriverVersion: 13000,
		ClockSource: ClockCallback}
	copy(h.Magic[:], "SPCUPTI1")
	return encRecord(TypeHello, 0, &h, nil)
}

func encName(id uint32, s string) []byte {
	nh := nameHeader{Id: id, Len: uint32(len(s))}
	return encRecord(TypeName, 0, &nh, []byte(s))
}

// validStream is a HELLO, a NAME and n rounds of one record of every data type plus a STATS.
func validStream(n int) []byte {
	var b bytes.Buffer
	b.Write(encHello(42))
	b.Write(encName(1, "void gemm<128>(float*)"))
	for i := 0; i < n; i++ {
		t := uint64(1000 + i*100)
		b.Write(encRecord(TypeKernel, 0, &Kernel{Start: t, End: t + 50, CorrelationID: uint32(i + 1), NameID: 1,
			Grid: [3]uint32{1, 2, 3}, Block: [3]uint32{128, 1, 1}}, nil))
		b.Write(encRecord(TypeMemcpy, 0, &Memcpy{Start: t, End: t + 5, Bytes: 4096, CopyKind: 2}, nil))
		b.Write(encRecord(TypeMemset, 0, &Memset{Start: t, End: t + 5, Bytes: 64}, nil))
		b.Write(encRecord(TypeAPI, 0, &API{Start: t - 10, End: t - 2, Cbid: 307, Tid: 7, CorrelationID: uint32(i + 1)}, nil))
		b.Write(encRecord(TypeSync, 0, &Sync{Start: t, End: t + 80, Kind: 3}, nil))
		b.Write(encRecord(TypeGraphNode, 0, &GraphNode{NodeID: uint64(i), GraphID: 1, Op: GraphNodeCreated}, nil))
		b.Write(encRecord(TypeOverhead, 0, &Overhead{Start: t, End: t + 1}, nil))
		b.Write(encRecord(TypeGraphExec, 0, &GraphExec{Start: t, End: t + 90, GraphID: 3, Stream: 7, CorrelationID: uint32(i + 1)}, nil))
	}
	b.Write(encRecord(TypeStats, FlagFlushAck, &LibStats{RecordsDelivered: uint64(7 * n)}, nil))
	return b.Bytes()
}

func decodeAll(t testing.TB, d *Decoder, stream []byte, chunk int) (*Batch, error) {
	t.Helper()
	var all Batch
	var b Batch
	buf := make([]byte, 0, 2*MaxRecordLen+chunk)
	for off := 0; off < len(stream); off += chunk {
		end := min(off+chunk, len(stream))
		buf = append(buf, stream[off:end]...)
		n, err := d.Decode(buf, &b)
		all.Kernels = append(all.Kernels, b.Kernels...)
		all.Memcpys = append(all.Memcpys, b.Memcpys...)
		all.Memsets = append(all.Memsets, b.Memsets...)
		all.APIs = append(all.APIs, b.APIs...)
		all.Syncs = append(all.Syncs, b.Syncs...)
		all.GraphNodes = append(all.GraphNodes, b.GraphNodes...)
		all.Overheads = append(all.Overheads, b.Overheads...)
		all.GraphExecs = append(all.GraphExecs, b.GraphExecs...)
		if b.Stats != nil {
			all.stats = *b.Stats
			all.Stats = &all.stats
			all.FlushAck = all.FlushAck || b.FlushAck
		}
		b.Reset()
		buf = buf[:copy(buf, buf[n:])]
		if err != nil {
			return &all, err
		}
	}
	d.Finish(len(buf))
	return &all, nil
}

func TestDecodeValidStream(t *testing.T) {
	const n = 50
	stream := validStream(n)
	for _, chunk := range []int{1, 7, 64, 4096, len(stream)} {
		d := NewDecoder()
		b, err := decodeAll(t, d, stream, chunk)
		if err != nil {
			t.Fatalf("chunk %d: %v", chunk, err)
		}
		if len(b.Kernels) != n || len(b.Memcpys) != n || len(b.Memsets) != n || len(b.APIs) != n ||
			len(b.Syncs) != n || len(b.GraphNodes) != n || len(b.Overheads) != n || len(b.GraphExecs) != n {
			t.Fatalf("chunk %d: decoded %d kernels %d memcpys %d memsets %d apis %d syncs %d graph nodes %d overheads",
				chunk, len(b.Kernels), len(b.Memcpys), len(b.Memsets), len(b.APIs), len(b.Syncs), len(b.GraphNodes),
				len(b.Overheads))
		}
		if g := b.GraphExecs[4]; g.Start != 1400 || g.End != 1490 || g.GraphID != 3 || g.Stream != 7 || g.CorrelationID != 5 {
			t.Errorf("chunk %d: graph exec 4 = %+v", chunk, g)
		}
		k := b.Kernels[3]
		if k.Start != 1300 || k.End != 1350 || k.CorrelationID != 4 || k.Grid != [3]uint32{1, 2, 3} || d.Name(k.NameID) != "void gemm<128>(float*)" {
			t.Errorf("chunk %d: kernel 3 = %+v name %q", chunk, k, d.Name(k.NameID))
		}
		if b.Stats == nil || b.Stats.RecordsDelivered != 7*n || !b.FlushAck {
			t.Errorf("chunk %d: stats %+v ack %v", chunk, b.Stats, b.FlushAck)
		}
		h, ok := d.Hello()
		if !ok || h.Pid != 42 || h.CuptiVersion != 130001 {
			t.Errorf("chunk %d: hello %+v %v", chunk, h, ok)
		}
		st := d.Stats()
		if st.Errors.Total() != 0 || st.Bytes != uint64(len(stream)) || st.Records[TypeKernel] != n || st.Records[TypeName] != 1 {
			t.Errorf("chunk %d: stats %+v", chunk, st)
		}
	}
}

// TestDecodeErrors feeds one defect of each class and checks it is counted and skipped.
func TestDecodeErrors(t *testing.T) {
	kernel := encRecord(TypeKernel, 0, &Kernel{Start: 1, End: 2}, nil)
	short := encRecord(TypeKernel, 0, &Sync{}, nil) // a KERNEL with a 40-byte payload
	unknown := encRecord(RecordType(999), 0, &Kernel{}, nil)
	badName := encName(0, "x")
	longName := encName(5, "abc")
	binary.LittleEndian.PutUint32(longName[SizeofHeader+4:], 1000) // name length past the record
	secondHello := encHello(1)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

	cases := []struct {
		name    string
		stream  []byte
		wantErr error
		kernels int
		check   func(e DecodeErrors) bool
	}{
		{"short", cat(encHello(1), short, kernel), nil, 1, func(e DecodeErrors) bool { return e.Short == 1 }},
		{"unknown type", cat(encHello(1), unknown, kernel), nil, 1, func(e DecodeErrors) bool { return e.UnknownType == 1 }},
		{"bad name id", cat(encHello(1), badName, kernel), nil, 1, func(e DecodeErrors) bool { return e.BadName == 1 }},
		{"name too long", cat(encHello(1), longName, kernel), nil, 1, func(e DecodeErrors) bool { return e.BadName == 1 }},
		{"second hello", cat(encHello(1), secondHello, kernel), nil, 1, func(e DecodeErrors) bool { return e.BadHello == 1 }},
		{"truncated", cat(encHello(1), kernel, kernel[:20]), nil, 1, func(e DecodeErrors) bool { return e.Truncated == 1 }},
		{"no hello", cat(kernel, kernel), ErrBadHello, 0, func(e DecodeErrors) bool { return e.BadHello == 1 }},
		{"bad magic", func() []byte { h := encHello(1); h[SizeofHeader] = 'X'; return cat(h, kernel) }(), ErrBadHello, 0,
			func(e DecodeErrors) bool { return e.BadHello == 1 }},
		{"length not a multiple of 8", func() []byte {
			k := cat(kernel)
			binary.LittleEndian.PutUint32(k, 13)
			return cat(encHello(1), kernel, k, kernel)
		}(), ErrBadLength, 1, func(e DecodeErrors) bool { return e.BadLength == 1 }},
		{"length too large", func() []byte {
			k := cat(kernel)
			binary.LittleEndian.PutUint32(k, MaxRecordLen+8)
			return cat(encHello(1), k)
		}(), ErrBadLength, 0, func(e DecodeErrors) bool { return e.BadLength == 1 }},
		{"length below header", func() []byte {
			k := cat(kernel)
			binary.LittleEndian.PutUint32(k, 0)
			return cat(encHello(1), k)
		}(), ErrBadLength, 0, func(e DecodeErrors) bool { return e.BadLength == 1 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := NewDecoder()
			b, err := decodeAll(t, d, c.stream, len(c.stream))
			if !errors.Is(err, c.wantErr) && !(err == nil && c.wantErr == nil) {
				t.Fatalf("error %v, want %v", err, c.wantErr)
			}
			st := d.Stats()
			if !c.check(st.Errors) || st.Errors.Total() != 1 {
				t.Errorf("errors %+v", st.Errors)
			}
			if len(b.Kernels) != c.kernels {
				t.Errorf("decoded %d kernels, want %d", len(b.Kernels), c.kernels)
			}
			if err != nil { // a broken stream stays broken
				if n, err2 := d.Decode(kernel, &Batch{}); n != 0 || err2 == nil {
					t.Errorf("decode after a fatal error: %d, %v", n, err2)
				}
			}
		})
	}
}

func TestDecodeLongerPayloadAccepted(t *testing.T) {
	// A newer library may append fields: the known prefix is decoded, the rest ignored.
	type kernelV2 struct {
		Kernel
		Extra [2]uint64
	}
	s := append(encHello(1), encRecord(TypeKernel, 0, &kernelV2{Kernel: Kernel{Start: 5, End: 9}}, nil)...)
	d := NewDecoder()
	b, err := decodeAll(t, d, s, len(s))
	if err != nil || len(b.Kernels) != 1 || b.Kernels[0].End != 9 || d.Stats().Errors.Total() != 0 {
		t.Fatalf("err %v kernels %+v errors %+v", err, b.Kernels, d.Stats().Errors)
	}
}

func TestDecodeWindowVersions(t *testing.T) {
	// A library from before OpenAsOf sends 16-byte windows: accepted, OpenAsOf 0. A record
	// shorter than that is an error.
	type windowV1 struct{ Open, Close uint64 }
	s := encHello(1)
	s = append(s, encRecord(TypeWindow, 0, &windowV1{Open: 5, Close: 9}, nil)...)
	s = append(s, encRecord(TypeWindow, 0, &Window{Open: 10, OpenAsOf: 20}, nil)...)
	s = append(s, encRecord(TypeWindow, 0, &struct{ Open uint64 }{Open: 30}, nil)...)
	d := NewDecoder()
	var b Batch
	n, err := d.Decode(s, &b)
	if err != nil || n != len(s) {
		t.Fatalf("decoded %d of %d bytes: %v", n, len(s), err)
	}
	want := []Window{{Open: 5, Close: 9}, {Open: 10, OpenAsOf: 20}}
	if len(b.Windows) != 2 || b.Windows[0] != want[0] || b.Windows[1] != want[1] {
		t.Errorf("windows %+v, want %+v", b.Windows, want)
	}
	if e := d.Stats().Errors; e.Short != 1 || e.Total() != 1 {
		t.Errorf("errors %+v: want the 8-byte window counted short", e)
	}
}

func TestDecodeNameLimits(t *testing.T) {
	d := NewDecoder()
	var s []byte
	s = append(s, encHello(1)...)
	long := string(bytes.Repeat([]byte("n"), MaxNameLen))
	const count = MaxNameBytes/MaxNameLen + 10
	for i := 1; i <= count; i++ {
		s = append(s, encName(uint32(i), long)...)
	}
	if _, err := decodeAll(t, d, s, 1<<20); err != nil {
		t.Fatal(err)
	}
	st := d.Stats()
	if st.NamesDropped != 10 {
		t.Errorf("names dropped %d, want 10", st.NamesDropped)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(validStream(3))
	f.Add(validStream(0))
	f.Add(append(encHello(1), encName(1, "k")...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewDecoder()
		var b Batch
		total := 0
		for len(data) > 0 {
			n, err := d.Decode(data, &b)
			total += b.Len()
			b.Reset()
			if n < 0 || n > len(data) {
				t.Fatalf("consumed %d of %d", n, len(data))
			}
			if err != nil || n == 0 {
				break
			}
			data = data[n:]
		}
		st := d.Stats()
		if st.Bytes > uint64(total+1)*MaxRecordLen && total > 0 {
			t.Fatalf("bytes %d for %d records", st.Bytes, total)
		}
		for id := uint32(0); id < 4; id++ {
			_ = d.Name(id)
		}
	})
}

// BenchmarkDecode decodes a stream shaped like real traffic (mostly kernels and API records) in
// 256 KiB reads, as a connection does, and reports records/s.
func BenchmarkDecode(b *testing.B) {
	var s bytes.Buffer
	s.Write(encHello(1))
	s.Write(encName(1, "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4>>(Flash_fwd_params)"))
	const rounds = 4096
	for i := 0; i < rounds; i++ {
		t := uint64(i) * 1000
		s.Write(encRecord(TypeKernel, 0, &Kernel{Start: t, End: t + 500, NameID: 1, CorrelationID: uint32(i)}, nil))
		s.Write(encRecord(TypeKernel, 0, &Kernel{Start: t + 500, End: t + 900, NameID: 1, CorrelationID: uint32(i)}, nil))
		s.Write(encRecord(TypeAPI, 0, &API{Start: t, End: t + 5, Cbid: 307, CorrelationID: uint32(i)}, nil))
		if i%16 == 0 {
			s.Write(encRecord(TypeMemcpy, 0, &Memcpy{Start: t, End: t + 5, Bytes: 4}, nil))
		}
	}
	stream := s.Bytes()
	records := 0
	{
		d := NewDecoder()
		var bt Batch
		n, _ := d.Decode(stream, &bt)
		if n != len(stream) {
			b.Fatalf("setup: consumed %d of %d", n, len(stream))
		}
		records = bt.Len()
	}
	const chunk = readBufSize
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	b.ResetTimer()
	var bt Batch
	for i := 0; i < b.N; i++ {
		d := NewDecoder()
		data := stream
		pending := make([]byte, 0, chunk)
		for len(data) > 0 {
			m := copy(pending[len(pending):cap(pending)], data)
			pending = pending[:len(pending)+m]
			data = data[m:]
			n, err := d.Decode(pending, &bt)
			if err != nil {
				b.Fatal(err)
			}
			bt.Reset()
			pending = pending[:copy(pending, pending[n:])]
		}
	}
	b.ReportMetric(float64(records)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
