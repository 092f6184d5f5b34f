package replication

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/limiter"
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
	fr := frameReader{br: bufio.NewReader(bytes.NewReader(b))}
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
	fr := frameReader{br: bufio.NewReader(bytes.NewReader(good))}
	tp, p, _, err := fr.next()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeChange(tp, p, 16); !errors.Is(err, errStream) {
		t.Fatalf("db 20 of 16: %v, want errStream", err)
	}
	fr = frameReader{br: bufio.NewReader(bytes.NewReader(good[:len(good)-3]))}
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
	fr = frameReader{br: bufio.NewReader(bytes.NewReader(append(hdr, "only this"...)))}
	if _, _, _, err := fr.next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated 512 MiB frame: %v", err)
	}
	if c := cap(fr.buf); c > 2<<20 {
		t.Fatalf("a 512 MiB frame with 9 bytes behind it grew the buffer to %d bytes", c)
	}
}
