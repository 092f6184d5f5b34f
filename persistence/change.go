package persistence

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/stream"
)

// DeltaFormat is the first byte of a change that is a delta rather than a
// whole value: a stream's change, as its journal writes carry it. It is
// never a stored value (DecodeValue refuses it): it appears only in the
// change log's records and in the replication stream's put frames, and is
// applied to the key's value as it stands (ApplyChange).
//
//	offset size  field
//	0      1     3
//	1      1     kind (keyspace.KindStream)
//	2      8     Exp, int64 (the key's expiry after the change)
//	10     ...   the stream's delta (stream.Stream.Delta)
const DeltaFormat = 3

const deltaHeader = 1 + 1 + 8

// EncodeChange appends the encoding of a change that made v, key's value,
// what it is: a delta when v's object records one (a stream changed in
// place since it was last journaled), else the whole value (EncodeValue).
// The journal consumers that replay changes in order (the change log, the
// replication stream) write this; snapshots and checkpoints write whole
// values.
func EncodeChange(dst []byte, v keyspace.Value) []byte {
	if v.Kind == keyspace.KindStream {
		if st, ok := v.Obj.(*stream.Stream); ok {
			if d, ok := st.Delta(); ok {
				dst = append(dst, DeltaFormat, byte(v.Kind))
				dst = binary.LittleEndian.AppendUint64(dst, uint64(v.Exp))
				return append(dst, d...)
			}
		}
	}
	return EncodeValue(dst, v)
}

// IsDelta reports whether b, an EncodeChange result, is a delta.
func IsDelta(b []byte) bool { return len(b) > 0 && b[0] == DeltaFormat }

// ErrNotBase reports a delta that does not apply to the key's value as it
// stands: the key is missing, holds another type, or a stream other than
// the one the delta was taken from (stream.ErrNotBase).
var ErrNotBase = errors.New("persistence: the change is a delta of another value")

// ApplyChange returns the value that change b (an EncodeChange result)
// makes of cur, the key's current value (nil when absent). A whole value
// is decoded (cur is ignored); a delta is applied to cur's stream in
// place. applied is false when cur already held every change of the
// delta (a change log replayed over a checkpoint taken after it). An
// error wrapping ErrNotBase means the delta does not start from cur; one
// wrapping ErrCorrupt means b is malformed, and cur's stream may hold
// part of it.
func ApplyChange(cur *keyspace.Value, b []byte) (v keyspace.Value, applied bool, err error) {
	if !IsDelta(b) {
		v, err = DecodeValue(b)
		return v, err == nil, err
	}
	if len(b) < deltaHeader || keyspace.Kind(b[1]) != keyspace.KindStream {
		return v, false, corruptf("delta change: bad header")
	}
	if cur == nil || cur.Kind != keyspace.KindStream {
		return v, false, fmt.Errorf("%w (the key holds no stream)", ErrNotBase)
	}
	st, ok := cur.Obj.(*stream.Stream)
	if !ok {
		return v, false, fmt.Errorf("%w (the key holds no stream)", ErrNotBase)
	}
	applied, err = st.ApplyDelta(b[deltaHeader:])
	switch {
	case errors.Is(err, stream.ErrNotBase):
		return v, false, fmt.Errorf("%w: %w", ErrNotBase, err)
	case err != nil:
		return v, applied, corruptf("delta change: %v", err)
	}
	v = *cur
	v.Exp = int64(binary.LittleEndian.Uint64(b[2:]))
	return v, applied, nil
}
