package commands

import (
	"encoding/binary"
	"testing"
)

// TestCRC64Jones checks crc64Jones against Redis: the check value of
// src/crc64.c's own test, and the trailers of two DUMP payloads that
// redis-server 7.0.15 produced (redis-cli --no-raw DUMP after SET k hello
// and SET n 12345): the CRC of the bytes before it, little endian.
func TestCRC64Jones(t *testing.T) {
	if got, want := crc64Jones(0, []byte("123456789")), uint64(0xe9c6d914c4b8d9ca); got != want {
		t.Errorf("crc64Jones(123456789) = %#x, want %#x", got, want)
	}
	for _, dump := range []string{
		"\x00\x05hello\n\x00cr\xdfve4 \n",
		"\x00\xc190\n\x00\x9d\x94\xea'\x93\xfc\b\xb9",
	} {
		body, trailer := dump[:len(dump)-8], dump[len(dump)-8:]
		if got, want := crc64Jones(0, []byte(body)), binary.LittleEndian.Uint64([]byte(trailer)); got != want {
			t.Errorf("crc64Jones(%q) = %#x, Redis's DUMP says %#x", body, got, want)
		}
	}
	// Continuing a CRC over a split input gives the CRC of the whole.
	b := []byte("the quick brown fox")
	if got, want := crc64Jones(crc64Jones(0, b[:7]), b[7:]), crc64Jones(0, b); got != want {
		t.Errorf("split crc %#x, whole %#x", got, want)
	}
}
