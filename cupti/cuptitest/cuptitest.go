package cuptitest

import (
	"encoding/binary"
	"unsafe"

	"github.com/specprof/specprof/cupti"
)

// Record encodes one record: the header (length, type, flags), then payload,
// a wire struct such as cupti.Hello's mirror, padded to 8 bytes.
func Record[T any](typ cupti.RecordType, flags uint16, payload *T) []byte {
	p := unsafe.Slice((*byte)(unsafe.Pointer(payload)), unsafe.Sizeof(*payload))
	n := (cupti.SizeofHeader + len(p) + 7) &^ 7
	b := make([]byte, n)
	binary.LittleEndian.PutUint32(b, uint32(n))
	binary.LittleEndian.PutUint16(b[4:], uint16(typ))
	binary.LittleEndian.PutUint16(b[6:], flags)
	copy(b[cupti.SizeofHeader:], p)
	return b
}
