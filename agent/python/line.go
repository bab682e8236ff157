package python

// Line returns the source line a frame of code is at, given the frame's
// FrameRef.Instr, or -1 when unknown (no line table, instruction outside
// the code, or an instruction without a line). code must come from this
// Symbolizer.
func (s *Symbolizer) Line(code Code, instr uint64) int {
	if code.linetable == nil {
		return -1
	}
	if s.off.Flags&FlagFrameObject != 0 { // 3.10: f_lasti, an instruction index
		lasti := int32(uint32(instr))
		if lasti < 0 {
			return code.FirstLine
		}
		return line310(code.linetable, code.FirstLine, int(lasti)*2)
	}
	start := code.Addr + s.off.CodeAdaptive
	if instr < start {
		return -1
	}
	units := (instr - start) / 2 // _Py_CODEUNIT is 2 bytes
	if units > 1<<24 {
		return -1
	}
	return line311(code.linetable, code.FirstLine, int(units))
}

// line310 decodes a 3.10 co_linetable (Objects/lnotab_notes.txt): pairs of
// (unsigned bytecode delta, signed line delta), line delta -128 meaning
// "no line"; addr is a byte offset.
func line310(table []byte, first, addr int) int {
	line, end := first, 0
	for i := 0; i+1 < len(table); i += 2 {
		start := end
		end += int(table[i])
		cur := -1
		if ld := int8(table[i+1]); ld != -128 {
			line += int(ld)
			cur = line
		}
		if addr >= start && addr < end {
			return cur
		}
	}
	return -1
}

// line311 decodes a 3.11+ location table (Objects/locations.md); unit is
// an offset in code units. Each entry starts with a byte 1cccclll: code
// c, length l+1 units. Only the line delta matters here:
//
//	15      no location
//	14      long form: signed varint line delta, then columns
//	13      no columns: signed varint line delta
//	10..12  one-line form: delta c-10, then two column bytes
//	0..9    short form: delta 0, one column byte
//
// Entry bytes after the first never have the top bit set, which is how
// the next entry is found.
func line311(table []byte, first, unit int) int {
	line, end := first, 0
	for i := 0; i < len(table); {
		b := table[i]
		if b&0x80 == 0 {
			return -1 // corrupt or torn table
		}
		code := int(b >> 3 & 15)
		start := end
		end += int(b&7) + 1
		delta := 0
		switch {
		case code == 14 || code == 13:
			delta, _ = signedVarint(table[i+1:])
		case code >= 10 && code <= 12:
			delta = code - 10
		}
		line += delta
		if unit >= start && unit < end {
			if code == 15 {
				return -1
			}
			return line
		}
		for i++; i < len(table) && table[i]&0x80 == 0; i++ {
		}
	}
	return -1
}

// varint reads CPython's location-table varint: 6-bit groups, least
// significant first, bit 6 set on all but the last.
func varint(b []byte) (v uint, n int) {
	var shift uint
	for n < len(b) {
		c := b[n]
		n++
		v |= uint(c&63) << shift
		if c&64 == 0 {
			break
		}
		shift += 6
	}
	return v, n
}

func signedVarint(b []byte) (int, int) {
	u, n := varint(b)
	if u&1 != 0 {
		return -int(u >> 1), n
	}
	return int(u >> 1), n
}
