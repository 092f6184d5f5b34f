package stream

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// seedStream builds a stream with several nodes, deleted entries and
// different field names, for the fuzz corpora.
func seedStream() *Stream {
	s := New()
	for i := uint64(1); i <= 250; i++ {
		f := [][]byte{[]byte("k"), []byte("v"), []byte("n"), []byte("12")}
		if i%7 == 0 {
			f = [][]byte{[]byte("other"), bytes.Repeat([]byte{'x'}, int(i))}
		}
		s.Append(ID{Ms: i / 3, Seq: i % 3}, f)
	}
	s.Delete(ID{Ms: 10, Seq: 1})
	s.Trim(TrimArgs{MaxLen: 220})
	return s
}

// FuzzDecode: Decode never panics, and what it accepts encodes back to
// the same bytes and takes every operation without panicking.
func FuzzDecode(f *testing.F) {
	s := seedStream()
	f.Add(s.AppendBinary(nil))
	f.Add(New().AppendBinary(nil))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Decode(b)
		if err != nil {
			return
		}
		if !bytes.Equal(s.AppendBinary(nil), b) {
			t.Fatalf("accepted encoding does not round-trip")
		}
		s.Range(ID{}, MaxID, true, func(Entry) bool { return true })
		s.FirstID()
		s.LastEntryID()
		s.Append(ID{Ms: s.LastID().Ms + 1}, [][]byte{[]byte("a"), []byte("b")})
		s.Trim(TrimArgs{MaxLen: int64(s.Len() / 2), Approx: true})
		s.Trim(TrimArgs{ByID: true, MinID: ID{Ms: s.LastID().Ms / 2}})
	})
}

// FuzzApplyDelta: ApplyDelta never panics on any delta applied to a
// stream, and a delta it accepts leaves a stream that encodes and decodes.
func FuzzApplyDelta(f *testing.F) {
	s := seedStream()
	base := s.AppendBinary(nil)
	journaled(s)
	s.Append(ID{Ms: 1000}, [][]byte{[]byte("k"), []byte("v"), []byte("n"), []byte("1")})
	s.Delete(ID{Ms: 50, Seq: 1})
	s.Trim(TrimArgs{MaxLen: 100, Approx: true, Limit: 100})
	s.Trim(TrimArgs{ByID: true, MinID: ID{Ms: 60}})
	s.SetID(ID{Ms: 2000}, 500, ID{Ms: 50, Seq: 1})
	d, _ := s.Delta()
	f.Add(false, uint32(5), d[deltaHeader:])
	f.Add(true, uint32(0), d)
	f.Add(false, uint32(1), []byte{opTrim, 3, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, raw bool, n uint32, body []byte) {
		s, err := Decode(base)
		if err != nil {
			t.Fatal(err)
		}
		d := body
		if !raw {
			// A header naming the stream's incarnation and version, so
			// that the operations are reached.
			d = binary.LittleEndian.AppendUint64(nil, s.inc)
			d = binary.LittleEndian.AppendUint64(d, s.ver)
			d = binary.LittleEndian.AppendUint32(d, n)
			d = append(d, body...)
		}
		if _, err := s.ApplyDelta(d); err != nil {
			return
		}
		if _, err := Decode(s.AppendBinary(nil)); err != nil {
			t.Fatalf("after an accepted delta: %v", err)
		}
	})
}
