package commands

import (
	"encoding/binary"

	"github.com/cellserver/cellserver/keyspace"
)

// DUMP, EXPIRETIME and PEXPIRETIME: a key's exact state and absolute
// expiry, so that tests and operators can compare two nodes (a primary and
// its replicas) byte for byte.

// DumpVersion is the format version DUMP writes after the encoded value
// (Redis writes its RDB version there). It names the layout of the payload:
// Config.DumpValue's encoding, then this version, then the CRC. It changes
// when that layout does.
const DumpVersion = 1

// DUMP key: nil for a missing key, else a bulk string made as Redis makes
// its own: the value, as Config.DumpValue encodes it (cellserver's
// persistence codec, expiry included: not Redis's RDB encoding), the 2-byte
// DumpVersion and the CRC-64 (Jones, Redis's crc64) of everything before
// it, both little endian. There is no RESTORE.
func cmdDump(x *ctx) {
	if x.s.dumpValue == nil {
		x.errorReply(msgDumpUnavailable)
		return
	}
	v := x.keys[0].peek(x.clockMS())
	x.s.lookedUp(v != nil)
	if v == nil {
		x.null()
		return
	}
	// Encoded under the shard lock: limiters update their values in place.
	x.bulk(dumpPayload(x.s.dumpValue, *v))
}

// dumpPayload is DUMP's bulk string for v.
func dumpPayload(encode func(dst []byte, v keyspace.Value) []byte, v keyspace.Value) []byte {
	b := encode(make([]byte, 0, 64), v)
	b = binary.LittleEndian.AppendUint16(b, DumpVersion)
	return binary.LittleEndian.AppendUint64(b, crc64Jones(0, b))
}

func cmdExpireTime(x *ctx)  { expireTimeReply(x, false) }
func cmdPExpireTime(x *ctx) { expireTimeReply(x, true) }

// EXPIRETIME / PEXPIRETIME key, as Redis 7.0 (db.c ttlGenericCommand with
// output_abs): the absolute Unix time of the expiry, in ms or in seconds
// rounded to the nearest ((ms+500)/1000); -1 without expiry; -2 for a
// missing key.
func expireTimeReply(x *ctx, ms bool) {
	v := x.keys[0].peek(x.clockMS())
	x.s.lookedUp(v != nil)
	switch {
	case v == nil:
		x.int(-2)
	case v.Exp == 0:
		x.int(-1)
	default:
		t := v.Exp
		if t < 0 {
			t = 0
		}
		if !ms {
			t = (t + 500) / 1000
		}
		x.int(t)
	}
}

// crcJonesPoly is the Jones polynomial 0xad93d23594c935a9 bit-reversed: the
// CRC-64 Redis uses for DUMP and RDB files (src/crc64.c: reflected in and
// out, initial value 0, no final xor). hash/crc64 offers only ISO and ECMA
// and inverts the CRC before and after, so it cannot compute this one.
const crcJonesPoly = 0x95ac9329ac4bc9b5

var crcJonesTable = func() (t [256]uint64) {
	for i := range t {
		c := uint64(i)
		for range 8 {
			if c&1 == 1 {
				c = c>>1 ^ crcJonesPoly
			} else {
				c >>= 1
			}
		}
		t[i] = c
	}
	return t
}()

// crc64Jones continues crc over b; crc64Jones(0, b) is Redis's crc64(0, b).
func crc64Jones(crc uint64, b []byte) uint64 {
	for _, c := range b {
		crc = crcJonesTable[byte(crc)^c] ^ crc>>8
	}
	return crc
}
