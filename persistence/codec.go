package persistence

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/limiter"
	"github.com/cellserver/cellserver/stream"
)

// ValueFormat is the version of the value encoding that EncodeValue writes
// for values without reservations, and the first byte of every encoded
// value. A value holding reservations is written as ReservedFormat, which
// older binaries refuse (DecodeValue reads both).
const ValueFormat = 1

// ReservedFormat is version 2: version 1 followed by the value's
// reservations (CL.RESERVE), written only when it holds some.
const ReservedFormat = 2

// The value encoding, version 1. All fixed-width integers are little-endian;
// uvarints are encoding/binary's, and must be minimal (the shortest form)
// so that every value has exactly one encoding.
//
//	offset size  field
//	0      1     format version (1)
//	1      1     kind (keyspace.Kind: 1 string, 2 gcra, 3 fixed, 4 sliding,
//	             5 slidinglog, 6 concurrency, 7 stream)
//	2      8     Exp, int64 (ms since the Unix epoch, 0 = none)
//	10     8     N, uint64
//	18     8     M, int64
//	26     ...   the kind's object:
//
//	string       the bytes of Obj ([]byte), to the end
//	gcra, fixed,
//	sliding      nothing: the encoding is exactly 26 bytes
//	slidinglog   uvarint entry count c; c entries of (T int64, N int64);
//	             Units int64, which must equal the sum of the entries' N
//	concurrency  uvarint lease count c; c leases of (uvarint token length,
//	             token bytes, expiry int64 in ns), tokens in strictly
//	             increasing byte order (EncodeValue sorts them); N and M
//	             are 0 (a value whose one lease is packed into N and M is
//	             written as its lease list, and DecodeValue packs it again)
//	stream       the stream's own encoding (stream.Stream.AppendBinary), to
//	             the end; N and M are 0
//
// Version 2 (ReservedFormat) is version 1 with, after the kind's object
// (gcra, fixed, sliding, slidinglog only), the reservations:
//
//	uvarint count c (>= 1, at most limiter.MaxReservations); c records
//	of ID, At, Deadline, Reserved, Actual, Unit (int64 each; IDs
//	strictly increasing, Reserved >= 0, Actual >= -1, Unit >= 1);
//	LastID int64 (>= the last ID); StateExp int64 (>= 0)
//
// DecodeValue rejects anything else: a short or long input, an unknown kind,
// a count that the remaining bytes cannot hold, a non-minimal uvarint, a
// Units that disagrees with the entries, leases out of order, or
// concurrency state with N or M set.
const headerSize = 1 + 1 + 8 + 8 + 8

// logEntrySize is the encoded size of one limiter.LogEntry.
const logEntrySize = 16

// EncodeValue appends the encoding of v to dst and returns the extended
// slice. A nil Obj encodes as the kind's empty object (empty string, empty
// log), except for concurrency state, where it means the leases packed
// into N and M (none when N is 0; see limiter.Leases.Pack).
//
// It panics if v.Kind is not one of keyspace's kinds or if Obj has the wrong
// type for the kind: both are bugs in the caller, and writing such a record
// would only make the next start fail.
func EncodeValue(dst []byte, v keyspace.Value) []byte {
	var packed *limiter.Leases
	if v.Kind == keyspace.KindLeases && v.Obj == nil {
		packed = new(limiter.Leases)
		packed.Unpack(v.N, v.M)
		v.N, v.M = 0, 0
	}
	res := reservationsIn(v)
	format := byte(ValueFormat)
	if res != nil {
		format = ReservedFormat
	}
	dst = append(dst, format, byte(v.Kind))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(v.Exp))
	dst = binary.LittleEndian.AppendUint64(dst, v.N)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(v.M))
	switch v.Kind {
	case keyspace.KindGCRA, keyspace.KindFixed, keyspace.KindSliding:
		switch v.Obj.(type) {
		case nil, *limiter.Reservations:
		default:
			panic(fmt.Sprintf("persistence: EncodeValue: %s value holds %T, want nil or *limiter.Reservations", v.Kind, v.Obj))
		}
	case keyspace.KindString:
		switch s := v.Obj.(type) {
		case nil:
		case []byte:
			dst = append(dst, s...)
		default:
			panic(fmt.Sprintf("persistence: EncodeValue: %s value holds %T, want []byte", v.Kind, v.Obj))
		}
	case keyspace.KindStream:
		st, ok := v.Obj.(*stream.Stream)
		if !ok {
			panic(fmt.Sprintf("persistence: EncodeValue: %s value holds %T, want *stream.Stream", v.Kind, v.Obj))
		}
		dst = st.AppendBinary(dst)
	case keyspace.KindLog:
		var l *limiter.Log
		switch o := v.Obj.(type) {
		case nil:
		case *limiter.Log:
			l = o
		default:
			panic(fmt.Sprintf("persistence: EncodeValue: %s value holds %T, want *limiter.Log", v.Kind, v.Obj))
		}
		if l == nil {
			l = &limiter.Log{}
		}
		dst = binary.AppendUvarint(dst, uint64(len(l.Entries)))
		for _, e := range l.Entries {
			dst = binary.LittleEndian.AppendUint64(dst, uint64(e.T))
			dst = binary.LittleEndian.AppendUint64(dst, uint64(e.N))
		}
		dst = binary.LittleEndian.AppendUint64(dst, uint64(l.Units))
	case keyspace.KindLeases:
		ls := packed
		switch o := v.Obj.(type) {
		case nil:
		case *limiter.Leases:
			ls = o
		default:
			panic(fmt.Sprintf("persistence: EncodeValue: %s value holds %T, want *limiter.Leases", v.Kind, v.Obj))
		}
		type lease struct {
			token string
			exp   int64
		}
		var leases []lease
		if ls != nil {
			ls.Each(func(token string, exp int64) { leases = append(leases, lease{token, exp}) })
		}
		slices.SortFunc(leases, func(a, b lease) int { return strings.Compare(a.token, b.token) })
		dst = binary.AppendUvarint(dst, uint64(len(leases)))
		for _, l := range leases {
			dst = binary.AppendUvarint(dst, uint64(len(l.token)))
			dst = append(dst, l.token...)
			dst = binary.LittleEndian.AppendUint64(dst, uint64(l.exp))
		}
	default:
		panic(fmt.Sprintf("persistence: EncodeValue: unknown kind %d", v.Kind))
	}
	if res != nil {
		dst = binary.AppendUvarint(dst, uint64(len(res.List)))
		for _, r := range res.List {
			for _, x := range [...]int64{r.ID, r.At, r.Deadline, r.Reserved, r.Actual, r.Unit} {
				dst = binary.LittleEndian.AppendUint64(dst, uint64(x))
			}
		}
		dst = binary.LittleEndian.AppendUint64(dst, uint64(res.LastID))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(res.StateExp))
	}
	return dst
}

// reservationsIn returns the reservations v holds, or nil when it holds
// none (nil, or an empty list: version 1 is then written).
func reservationsIn(v keyspace.Value) *limiter.Reservations {
	var res *limiter.Reservations
	switch o := v.Obj.(type) {
	case *limiter.Reservations:
		res = o
	case *limiter.Log:
		if o != nil {
			res = o.Res
		}
	}
	if res == nil || len(res.List) == 0 {
		return nil
	}
	return res
}

// reservationRecordSize is the encoded size of one limiter.Reservation.
const reservationRecordSize = 6 * 8

// reservations reads version 2's reservations.
func (r *reader) reservations() (*limiter.Reservations, error) {
	n, err := r.count(reservationRecordSize)
	if err != nil {
		return nil, err
	}
	if n < 1 || n > limiter.MaxReservations {
		return nil, corruptf("%s value: %d reservations, want 1 to %d", r.kind, n, limiter.MaxReservations)
	}
	res := &limiter.Reservations{List: make([]limiter.Reservation, n)}
	for i := range res.List {
		var f [6]int64
		for j := range f {
			f[j], _ = r.int64() // count checked the room
		}
		rv := limiter.Reservation{ID: f[0], At: f[1], Deadline: f[2], Reserved: f[3], Actual: f[4], Unit: f[5]}
		if i > 0 && rv.ID <= res.List[i-1].ID {
			return nil, corruptf("%s value: reservation %d out of order or repeated", r.kind, i)
		}
		if rv.Reserved < 0 || rv.Actual < -1 || rv.Unit < 1 {
			return nil, corruptf("%s value: reservation %d has reserved %d, actual %d, unit %d", r.kind, i, rv.Reserved, rv.Actual, rv.Unit)
		}
		res.List[i] = rv
	}
	if res.LastID, err = r.int64(); err != nil {
		return nil, err
	}
	if res.StateExp, err = r.int64(); err != nil {
		return nil, err
	}
	if res.LastID < res.List[n-1].ID || res.StateExp < 0 {
		return nil, corruptf("%s value: reservations' last id %d, state expiry %d", r.kind, res.LastID, res.StateExp)
	}
	return res, nil
}

// DecodeValue decodes an encoding made by EncodeValue. The result does not
// share memory with b. It never panics: a malformed input gives an error
// wrapping ErrCorrupt (and also ErrFormat when the version byte is not 1).
func DecodeValue(b []byte) (keyspace.Value, error) { return decodeValue(b, false) }

// DecodeValueOwned is DecodeValue for an input the caller gives up: a
// string value's bytes are b's own (capped at their length) instead of a
// copy, so that decoding a large string does not hold it twice. b must not
// be modified or reused afterwards.
func DecodeValueOwned(b []byte) (keyspace.Value, error) { return decodeValue(b, true) }

func decodeValue(b []byte, owned bool) (keyspace.Value, error) {
	var v keyspace.Value
	if len(b) == 0 {
		return v, corruptf("empty value")
	}
	if b[0] != ValueFormat && b[0] != ReservedFormat {
		return v, fmt.Errorf("%w: %w: value format version %d, want %d or %d", ErrCorrupt, ErrFormat, b[0], ValueFormat, ReservedFormat)
	}
	if len(b) < headerSize {
		return v, corruptf("value truncated: %d bytes, the header alone is %d", len(b), headerSize)
	}
	v.Kind = keyspace.Kind(b[1])
	v.Exp = int64(binary.LittleEndian.Uint64(b[2:]))
	v.N = binary.LittleEndian.Uint64(b[10:])
	v.M = int64(binary.LittleEndian.Uint64(b[18:]))
	r := reader{b: b[headerSize:], kind: v.Kind}
	switch v.Kind {
	case keyspace.KindGCRA, keyspace.KindFixed, keyspace.KindSliding:
	case keyspace.KindString:
		if owned {
			v.Obj = r.b[:len(r.b):len(r.b)]
		} else {
			v.Obj = append([]byte{}, r.b...)
		}
		r.b = nil
	case keyspace.KindStream:
		if v.N != 0 || v.M != 0 {
			return keyspace.Value{}, corruptf("%s value: N and M must be 0", v.Kind)
		}
		st, err := stream.Decode(r.b)
		if err != nil {
			return keyspace.Value{}, corruptf("%s value: %v", v.Kind, err)
		}
		v.Obj, r.b = st, nil
	case keyspace.KindLog:
		n, err := r.count(logEntrySize)
		if err != nil {
			return keyspace.Value{}, err
		}
		l := &limiter.Log{}
		if n > 0 {
			l.Entries = make([]limiter.LogEntry, n)
		}
		var sum int64
		for i := range l.Entries {
			t, _ := r.int64()
			u, _ := r.int64()
			l.Entries[i] = limiter.LogEntry{T: t, N: u}
			s, ok := addInt64(sum, u)
			if !ok {
				return keyspace.Value{}, corruptf("%s value: units overflow int64", v.Kind)
			}
			sum = s
		}
		units, err := r.int64()
		if err != nil {
			return keyspace.Value{}, err
		}
		if units != sum {
			return keyspace.Value{}, corruptf("%s value: Units %d, entries hold %d", v.Kind, units, sum)
		}
		l.Units = units
		v.Obj = l
	case keyspace.KindLeases:
		// The smallest lease is an empty token: 1 length byte + 8 expiry.
		n, err := r.count(1 + 8)
		if err != nil {
			return keyspace.Value{}, err
		}
		ls := &limiter.Leases{}
		var prev []byte
		for i := 0; i < n; i++ {
			tok, err := r.bytes()
			if err != nil {
				return keyspace.Value{}, err
			}
			if i > 0 && bytes.Compare(prev, tok) >= 0 {
				return keyspace.Value{}, corruptf("%s value: lease %d out of order or repeated", v.Kind, i)
			}
			prev = tok
			exp, err := r.int64()
			if err != nil {
				return keyspace.Value{}, err
			}
			ls.Put(string(tok), exp)
		}
		if v.N != 0 || v.M != 0 {
			return keyspace.Value{}, corruptf("%s value: N and M must be 0", v.Kind)
		}
		if tok, exp, ok := ls.Pack(); ok {
			v.N, v.M = tok, exp // the form the commands store
		} else {
			v.Obj = ls
		}
	default:
		return keyspace.Value{}, corruptf("unknown value kind %d", b[1])
	}
	if b[0] == ReservedFormat {
		var res *limiter.Reservations
		var err error
		switch v.Kind {
		case keyspace.KindGCRA, keyspace.KindFixed, keyspace.KindSliding:
			res, err = r.reservations()
			v.Obj = res
		case keyspace.KindLog:
			res, err = r.reservations()
			v.Obj.(*limiter.Log).Res = res
		default:
			err = corruptf("%s value: a %s value holds no reservations", v.Kind, v.Kind)
		}
		if err != nil {
			return keyspace.Value{}, err
		}
	}
	if len(r.b) != 0 {
		return keyspace.Value{}, corruptf("%s value: %d trailing bytes", v.Kind, len(r.b))
	}
	return v, nil
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

func addInt64(a, b int64) (int64, bool) {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		return 0, false
	}
	return s, true
}

// reader consumes the object part of an encoded value.
type reader struct {
	b    []byte
	kind keyspace.Kind
}

func (r *reader) truncated(what string) error {
	return corruptf("%s value truncated: %d bytes left for %s", r.kind, len(r.b), what)
}

func (r *reader) int64() (int64, error) {
	if len(r.b) < 8 {
		return 0, r.truncated("an int64")
	}
	x := int64(binary.LittleEndian.Uint64(r.b))
	r.b = r.b[8:]
	return x, nil
}

// uvarint reads a minimal uvarint.
func (r *reader) uvarint() (uint64, error) {
	x, n := binary.Uvarint(r.b)
	if n == 0 {
		return 0, r.truncated("a uvarint")
	}
	if n < 0 {
		return 0, corruptf("%s value: uvarint overflows 64 bits", r.kind)
	}
	// binary.Uvarint accepts padded forms such as 0x80 0x00; only the
	// shortest one is valid, so that re-encoding gives the same bytes.
	if n > 1 && r.b[n-1] == 0 {
		return 0, corruptf("%s value: non-minimal uvarint", r.kind)
	}
	r.b = r.b[n:]
	return x, nil
}

// count reads an element count and checks that the remaining bytes can hold
// that many elements of at least minSize bytes, so that a corrupt count
// cannot make DecodeValue allocate more than the input's size.
func (r *reader) count(minSize int) (int, error) {
	n, err := r.uvarint()
	if err != nil {
		return 0, err
	}
	if n > uint64(len(r.b)/minSize) {
		return 0, corruptf("%s value: count %d does not fit in %d bytes", r.kind, n, len(r.b))
	}
	return int(n), nil
}

// bytes reads a uvarint length and that many bytes; the result aliases the
// input.
func (r *reader) bytes() ([]byte, error) {
	n, err := r.uvarint()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)) || n > math.MaxInt {
		return nil, corruptf("%s value: length %d exceeds the %d bytes left", r.kind, n, len(r.b))
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s, nil
}
