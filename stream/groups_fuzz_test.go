package stream

import (
	"encoding/binary"
	"math/rand"
	"testing"
)

// FuzzDecodeGroups: any input is refused or decoded into groups whose
// invariants hold and whose encoding decodes to itself; never a panic.
func FuzzDecodeGroups(f *testing.F) {
	for seed := int64(0); seed < 4; seed++ {
		s := groupStream()
		randomOps(s, rand.New(rand.NewSource(seed)), 80)
		f.Add(groupsBytes(s))
	}
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, b []byte) {
		s := groupStream()
		r := reader{b: b}
		decodeGroups(&r, s)
		if r.err != nil {
			return
		}
		checkInvariants(t, s)
		enc := groupsBytes(s)
		s2 := groupStream()
		r2 := reader{b: enc}
		decodeGroups(&r2, s2)
		if r2.err != nil || len(r2.b) != 0 || string(groupsBytes(s2)) != string(enc) {
			t.Fatal("re-decode differs")
		}
	})
}

// FuzzApplyGroupOps: any operations applied to a stream with groups are
// refused or applied without a panic, leaving consistent groups.
func FuzzApplyGroupOps(f *testing.F) {
	base := func() *Stream {
		s := groupStream()
		randomOps(s, rand.New(rand.NewSource(1)), 100)
		s.ResetDelta()
		return s
	}
	src := base()
	randomOps(src, rand.New(rand.NewSource(2)), 40)
	if d, _ := src.Delta(); len(d) > deltaHeader {
		f.Add(uint32(binary.LittleEndian.Uint32(d[16:])), d[deltaHeader:])
	}
	f.Add(uint32(1), []byte{opAck, 1, 'g', 0, 0})
	f.Fuzz(func(t *testing.T, n uint32, ops []byte) {
		s := base()
		d := binary.LittleEndian.AppendUint64(nil, s.inc)
		d = binary.LittleEndian.AppendUint64(d, s.ver)
		d = binary.LittleEndian.AppendUint32(d, n%64)
		d = append(d, ops...)
		for i := deltaHeader; i < len(d); i++ {
			// Keep the codes in the groups' range most of the time.
			if d[i] < firstGroupOp && i == deltaHeader {
				d[i] += firstGroupOp
			}
		}
		if _, err := s.ApplyDelta(d); err != nil {
			return
		}
		checkInvariants(t, s)
	})
}
