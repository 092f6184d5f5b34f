package stream

import "encoding/binary"

// The primitives every encoding of this package is made of: minimal
// uvarints, length-prefixed bytes and IDs (two uvarints).

func appendUvarint(dst []byte, v uint64) []byte { return binary.AppendUvarint(dst, v) }

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendID(dst []byte, id ID) []byte {
	dst = binary.AppendUvarint(dst, id.Ms)
	return binary.AppendUvarint(dst, id.Seq)
}

// appendInt64 encodes v zig-zag (binary.AppendVarint).
func appendInt64(dst []byte, v int64) []byte { return binary.AppendVarint(dst, v) }

// reader decodes the primitives; the first error sticks (err) and every
// later read returns zero values, so a decoder checks err once at the end
// of a record. It never panics and never allocates more than its input
// can hold.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = ErrCorrupt
	}
	r.b = nil
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	// n <= 0: truncated or overflow; a non-minimal form is refused so
	// that every value has one encoding.
	if n <= 0 || (n > 1 && r.b[n-1] == 0) {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) int64() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 || (n > 1 && r.b[n-1] == 0) {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a count of items each at least min bytes long, refusing one
// the remaining input cannot hold (so a corrupt count allocates nothing).
func (r *reader) count(min int) int {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)/max(min, 1)) {
		r.fail()
		return 0
	}
	return int(n)
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	b := r.b[:n:n]
	r.b = r.b[n:]
	return b
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.fail()
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) id() ID {
	ms := r.uvarint()
	return ID{ms, r.uvarint()}
}
