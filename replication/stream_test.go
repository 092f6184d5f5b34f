package replication

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/limiter"
	"github.com/cellserver/cellserver/persistence"
)

// TestFramesRoundTrip encodes every kind of change and reads it back.
func TestFramesRoundTrip(t *testing.T) {
	log := &limiter.Log{}
	log.Entries = append(log.Entries, limiter.LogEntry{T: 5, N: 2}, limiter.LogEntry{T: 9, N: 1})
	log.Units = 3
	values := []keyspace.Value{
		{Kind: keyspace.KindGCRA, N: 1234567890123, Exp: 99},
		{Kind: keyspace.KindString, Obj: []byte("hello")},
		{Kind: keyspace.KindString, Obj: bytes.Repeat([]byte("x"), 300)},
		{Kind: keyspace.KindFixed, N: 3, M: 77},
		{Kind: keyspace.KindLog, Obj: log, Exp: 1},
	}
	var b []byte
	for i, v := range values {
		b = appendPut(b, framePut, i, []byte{'k', byte(i)}, &v)
	}
	b = appendDelete(b, 3, []byte("gone"))
	b = appendFlushDB(b, 15)
	b = appendEmpty(b, frameFlushAll)
	b = appendEmpty(b, framePing)
	fr := frameReader{br: bufio.NewReader(bytes.NewReader(b)), max: 1 << 20}
	total := 0
	for i := range values {
		tp, p, raw, err := fr.next()
		if err != nil {
			t.Fatal(err)
		}
		total += len(raw)
		c, err := decodeChange(tp, p, 16)
		if err != nil {
			t.Fatal(err)
		}
		if c.t != framePut || c.db != i || string(c.key) != string([]byte{'k', byte(i)}) || c.v.Kind != values[i].Kind ||
			c.v.N != values[i].N || c.v.M != values[i].M || c.v.Exp != values[i].Exp {
			t.Fatalf("frame %d: got %+v, want %+v", i, c, values[i])
		}
	}
	want := []struct {
		t   byte
		db  int
		key string
	}{{frameDelete, 3, "gone"}, {frameFlushDB, 15, ""}, {frameFlushAll, 0, ""}, {framePing, 0, ""}}
	for _, w := range want {
		tp, p, raw, err := fr.next()
		if err != nil {
			t.Fatal(err)
		}
		total += len(raw)
		c, err := decodeChange(tp, p, 16)
		if err != nil || c.t != w.t || c.db != w.db || string(c.key) != w.key {
			t.Fatalf("got %+v %v, want %+v", c, err, w)
		}
	}
	if total != len(b) {
		t.Fatalf("raw frames cover %d bytes, stream has %d", total, len(b))
	}
	if _, _, _, err := fr.next(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}
}

// TestFramesRejectBadInput: a database out of range, a truncated frame
// and an unknown type are errors, not panics.
func TestFramesRejectBadInput(t *testing.T) {
	v := keyspace.Value{Kind: keyspace.KindGCRA, N: 1}
	good := appendPut(nil, framePut, 20, []byte("k"), &v)
	fr := frameReader{br: bufio.NewReader(bytes.NewReader(good)), max: 1 << 20}
	tp, p, _, err := fr.next()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeChange(tp, p, 16); !errors.Is(err, errStream) {
		t.Fatalf("db 20 of 16: %v, want errStream", err)
	}
	fr = frameReader{br: bufio.NewReader(bytes.NewReader(good[:len(good)-3])), max: 1 << 20}
	if _, _, _, err := fr.next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated: %v", err)
	}
	if _, err := decodeChange('Z', nil, 16); !errors.Is(err, errStream) {
		t.Fatalf("unknown type: %v", err)
	}
	if _, err := decodeChange(framePut, []byte{0, 200}, 16); !errors.Is(err, errStream) {
		t.Fatalf("key length past the end: %v", err)
	}
}

// TestFrameReaderBoundsMemory: a frame announcing more than the reader's
// limit is refused before anything is allocated, and one announcing a
// large payload that never comes costs only what arrived.
func TestFrameReaderBoundsMemory(t *testing.T) {
	hdr := appendFrameHeader(nil, frameAck, 1<<29)
	fr := frameReader{br: bufio.NewReader(bytes.NewReader(hdr)), max: 10}
	if _, _, _, err := fr.next(); !errors.Is(err, errStream) {
		t.Fatalf("ack frame of 512 MiB: %v, want errStream", err)
	}
	fr = frameReader{br: bufio.NewReader(bytes.NewReader(append(hdr, "only this"...))), max: 1 << 30}
	if _, _, _, err := fr.next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated 512 MiB frame: %v", err)
	}
	if c := cap(fr.buf); c > 2<<20 {
		t.Fatalf("a 512 MiB frame with 9 bytes behind it grew the buffer to %d bytes", c)
	}
}

// TestSplitFrames: a change longer than frameChunk leaves the primary as
// 'C' frames of exactly frameChunk bytes and a last frame; the reader
// joins them, and splitting the joined payload again gives the very bytes
// that arrived (a replica's backlog holds its primary's stream).
func TestSplitFrames(t *testing.T) {
	big := keyspace.Value{Kind: keyspace.KindString, Obj: bytes.Repeat([]byte("v"), 3*frameChunk+100)}
	key := bytes.Repeat([]byte("k"), frameChunk+1)
	var b []byte
	b = appendPut(b, framePut, 3, []byte("big"), &big)
	b = appendPut(b, frameSnap, 0, []byte("big"), &big)
	b = appendDelete(b, 1, key)
	b = appendEmpty(b, framePing)
	// Every frame of the stream is at most frameChunk bytes of payload.
	for rest := b; len(rest) > 0; {
		n, k := binary.Uvarint(rest[1:])
		if n > frameChunk {
			t.Fatalf("a %q frame of %d bytes", rest[0], n)
		}
		rest = rest[1+k+int(n):]
	}
	fr := frameReader{br: bufio.NewReader(bytes.NewReader(b)), max: frameChunk}
	var again []byte
	for _, want := range []byte{framePut, frameSnap, frameDelete, framePing} {
		tp, p, raw, err := fr.next()
		if err != nil || tp != want {
			t.Fatalf("got %q %v, want %q", tp, err, want)
		}
		if want == framePing {
			again = append(again, raw...)
			break
		}
		if raw != nil {
			t.Fatalf("%q: a split change returned raw bytes", tp)
		}
		c, err := decodeChange(tp, p, 16)
		if err != nil {
			t.Fatal(err)
		}
		switch tp {
		case framePut, frameSnap:
			if string(c.key) != "big" || !bytes.Equal(c.v.Obj.([]byte), big.Obj.([]byte)) {
				t.Fatalf("%q: the value did not survive the split", tp)
			}
		case frameDelete:
			if c.db != 1 || !bytes.Equal(c.key, key) {
				t.Fatalf("delete: db %d, key of %d bytes", c.db, len(c.key))
			}
		}
		var viaWrite []byte
		writeFrame(func(p []byte) { viaWrite = append(viaWrite, p...) }, tp, p)
		if !bytes.Equal(viaWrite, appendFrame(nil, tp, p)) {
			t.Fatalf("%q: writeFrame and appendFrame differ", tp)
		}
		again = appendFrame(again, tp, p)
	}
	if !bytes.Equal(again, b) {
		t.Fatalf("re-split stream of %d bytes differs from the %d that arrived", len(again), len(b))
	}
}

// TestSplitFramesRefuseOtherSplits: a split other than the canonical one
// (a short 'C', an empty last frame, a frame type that is never split)
// is a malformed stream: re-splitting it would not give its bytes back.
func TestSplitFramesRefuseOtherSplits(t *testing.T) {
	piece := bytes.Repeat([]byte("x"), frameChunk)
	cases := map[string][]byte{
		"short C":     append(appendFrameHeader(nil, frameCont, 10), piece[:10]...),
		"empty last":  appendFrameHeader(append(appendFrameHeader(nil, frameCont, frameChunk), piece...), framePut, 0),
		"C then ping": appendEmpty(append(appendFrameHeader(nil, frameCont, frameChunk), piece...), framePing),
		"padded C":    append([]byte{frameCont, 0x80, 0x80, 0x84, 0x00}, piece...),
	}
	for name, b := range cases {
		b = append(b, appendEmpty(nil, framePing)...)
		fr := frameReader{br: bufio.NewReader(bytes.NewReader(b)), max: 1 << 20}
		if _, _, _, err := fr.next(); !errors.Is(err, errStream) {
			t.Errorf("%s: %v, want errStream", name, err)
		}
	}
}

// TestFrameReaderRefusesLargeFrames: a frame declaring more than the
// reader's bound is refused (ErrFrameTooLarge) before a byte of its
// payload is read or allocated.
func TestFrameReaderRefusesLargeFrames(t *testing.T) {
	stream := append(appendFrameHeader(nil, framePut, 1<<30), bytes.Repeat([]byte{0}, 4096)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 10
	for range runs {
		fr := frameReader{br: bufio.NewReaderSize(bytes.NewReader(stream), 16), max: 16<<20 + FrameOverhead}
		if _, _, _, err := fr.next(); !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("a 1 GiB frame: %v, want ErrFrameTooLarge", err)
		}
	}
	runtime.ReadMemStats(&after)
	// Bytes, not allocation counts: the race detector adds allocations of
	// its own, while a frame buffer would be 1 GiB.
	if n := after.TotalAlloc - before.TotalAlloc; n > runs*64<<10 {
		t.Fatalf("refusing a 1 GiB frame %d times allocated %d bytes", runs, n)
	}
}

// TestDecodeKeepsLargeStrings: a large string value is decoded in place
// when the caller gives the buffer up, copied otherwise.
func TestDecodeKeepsLargeStrings(t *testing.T) {
	v := keyspace.Value{Kind: keyspace.KindString, Obj: bytes.Repeat([]byte("v"), 2*ownMin)}
	for _, own := range []bool{false, true} {
		b := appendPut(nil, framePut, 0, []byte("k"), &v)
		fr := frameReader{br: bufio.NewReader(bytes.NewReader(b)), max: 1 << 20}
		tp, p, _, err := fr.next()
		if err != nil {
			t.Fatal(err)
		}
		c, kept, err := decodeChangeOwned(tp, p, 16, own)
		if err != nil {
			t.Fatal(err)
		}
		got := c.v.Obj.([]byte)
		inPlace := &got[0] == &p[len(p)-len(got)]
		if kept != own || inPlace != own || !bytes.Equal(got, v.Obj.([]byte)) || cap(got) != len(got) {
			t.Fatalf("own %v: kept %v, in place %v", own, kept, inPlace)
		}
	}
}

// TestSplitInPlaceAtBoundaries: appendPut's split, done in place, gives
// appendFrame's bytes for payloads around multiples of frameChunk.
func TestSplitInPlaceAtBoundaries(t *testing.T) {
	key := []byte("key")
	overhead := len(appendPut(nil, framePut, 0, key, &keyspace.Value{Kind: keyspace.KindString, Obj: []byte{}})) - 2
	for _, payload := range []int{frameChunk - 1, frameChunk, frameChunk + 1, 2 * frameChunk, 2*frameChunk + 1, 5*frameChunk + 127, 5*frameChunk + 128} {
		v := keyspace.Value{Kind: keyspace.KindString, Obj: bytes.Repeat([]byte{'x'}, payload-overhead)}
		enc := binary.AppendUvarint(nil, 0)
		enc = binary.AppendUvarint(enc, uint64(len(key)))
		enc = append(enc, key...)
		enc = persistence.EncodeValue(enc, v)
		if len(enc) != payload {
			t.Fatalf("payload of %d bytes, want %d", len(enc), payload)
		}
		prefix := []byte("before")
		got := appendPut(append([]byte(nil), prefix...), framePut, 0, key, &v)
		want := appendFrame(append([]byte(nil), prefix...), framePut, enc)
		if !bytes.Equal(got, want) {
			t.Fatalf("payload %d: appendPut gives %d bytes, appendFrame %d, or they differ", payload, len(got), len(want))
		}
	}
}

// TestFrameReaderBoundsSplitChanges: a change split into 'C' frames whose
// joined size would pass the reader's maxChange (the replica's maxmemory)
// is refused (ErrChangeTooLarge) as its parts arrive, so a primary that
// keeps sending parts costs the replica no more than that bound; a change
// of exactly the bound, and any change without one, is joined whole.
func TestFrameReaderBoundsSplitChanges(t *testing.T) {
	const bound = 4 * frameChunk
	payload := func(n int) []byte { return bytes.Repeat([]byte{'v'}, n) }
	for _, c := range []struct {
		size, maxChange int
		refused         bool
	}{
		{bound, bound, false},
		{bound + 1, bound, true},
		{64 * frameChunk, bound, true},
		{64 * frameChunk, 0, false},
	} {
		stream := appendEmpty(appendFrame(nil, framePut, payload(c.size)), framePing)
		fr := frameReader{br: bufio.NewReader(bytes.NewReader(stream)), max: frameChunk, maxChange: uint64(c.maxChange)}
		_, p, _, err := fr.next()
		switch {
		case c.refused && !errors.Is(err, ErrChangeTooLarge):
			t.Errorf("a %d-byte change with maxChange %d: %v, want ErrChangeTooLarge", c.size, c.maxChange, err)
		case c.refused && len(fr.parts)*frameChunk > c.maxChange:
			t.Errorf("a %d-byte change with maxChange %d: %d bytes of parts held, want at most %d", c.size, c.maxChange, len(fr.parts)*frameChunk, c.maxChange)
		case !c.refused && (err != nil || len(p) != c.size):
			t.Errorf("a %d-byte change with maxChange %d: %d bytes, %v; want it whole", c.size, c.maxChange, len(p), err)
		}
	}
	// A primary that never ends its change: refused at the bound.
	var endless []byte
	for range 1000 {
		endless = appendFrameHeader(endless, frameCont, frameChunk)
		endless = append(endless, payload(frameChunk)...)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fr := frameReader{br: bufio.NewReader(bytes.NewReader(endless)), max: frameChunk, maxChange: bound}
	if _, _, _, err := fr.next(); !errors.Is(err, ErrChangeTooLarge) {
		t.Fatalf("1000 'C' frames with maxChange %d: %v, want ErrChangeTooLarge", bound, err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 2*bound+64<<10 {
		t.Errorf("refusing an endless split change allocated %d bytes, want about %d", n, bound)
	}
}
