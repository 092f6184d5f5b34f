package resp

import (
	"math"
	"strconv"
	"sync/atomic"
)

// Protocol is the reply protocol a connection negotiated: RESP2 (every
// connection's start, and after RESET) or RESP3 (after HELLO 3).
type Protocol uint32

const (
	RESP2 Protocol = 2
	RESP3 Protocol = 3
)

// proto holds a connection's Protocol; its zero value means RESP2.
type proto struct{ v atomic.Uint32 }

func (p *proto) load() Protocol {
	if v := Protocol(p.v.Load()); v == RESP3 {
		return RESP3
	}
	return RESP2
}

// Protocol returns the protocol the connection negotiated (RESP2 until
// SetProtocol says otherwise). Safe for concurrent use: another
// connection's command may read it to encode a push for this one.
func (c *Conn) Protocol() Protocol { return c.proto.load() }

// SetProtocol records the protocol negotiated by HELLO (or RESET's
// return to RESP2).
func (c *Conn) SetProtocol(p Protocol) { c.proto.v.Store(uint32(p)) }

// The appenders below encode one reply element as Redis 7 does for each
// protocol (networking.c: addReplyNull, addReplyNullArray,
// addReplyMapLen, addReplySetLen, addReplyVerbatim, addReplyPushLen).
// The protocol-neutral ones (integers, bulks, arrays, simple strings) are
// redcon's: AppendInt, AppendBulk, AppendArray, AppendString.

// AppendNull appends a missing value: $-1 in RESP2, _ in RESP3.
func AppendNull(b []byte, p Protocol) []byte {
	if p == RESP3 {
		return append(b, "_\r\n"...)
	}
	return append(b, "$-1\r\n"...)
}

// AppendDouble appends a floating-point number: a double (,text) in
// RESP3, where text is f written the shortest way that reads back as f
// ("inf", "-inf", "nan" for those), and in RESP2 the bulk string human,
// the number as the command writes it as a string (Redis's
// addReplyHumanLongDouble).
func AppendDouble(b []byte, p Protocol, f float64, human []byte) []byte {
	if p != RESP3 {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(human)), 10)
		b = append(b, "\r\n"...)
		b = append(b, human...)
		return append(b, "\r\n"...)
	}
	b = append(b, ',')
	switch {
	case math.IsInf(f, 1):
		b = append(b, "inf"...)
	case math.IsInf(f, -1):
		b = append(b, "-inf"...)
	case math.IsNaN(f):
		b = append(b, "nan"...)
	default:
		b = strconv.AppendFloat(b, f, 'g', -1, 64)
	}
	return append(b, "\r\n"...)
}

// AppendNullArray appends a missing aggregate (EXEC aborted by WATCH):
// *-1 in RESP2, _ in RESP3.
func AppendNullArray(b []byte, p Protocol) []byte {
	if p == RESP3 {
		return append(b, "_\r\n"...)
	}
	return append(b, "*-1\r\n"...)
}

// AppendMapLen starts a map of n key/value pairs: %n in RESP3, a flat
// array of 2n elements in RESP2.
func AppendMapLen(b []byte, p Protocol, n int) []byte {
	if p == RESP3 {
		return AppendLen(b, '%', n)
	}
	return AppendLen(b, '*', 2*n)
}

// AppendSetLen starts a set of n elements: ~n in RESP3, an array in RESP2.
func AppendSetLen(b []byte, p Protocol, n int) []byte {
	if p == RESP3 {
		return AppendLen(b, '~', n)
	}
	return AppendLen(b, '*', n)
}

// AppendPushLen starts an out-of-band message of n elements (pub/sub
// messages, invalidations): >n in RESP3, an array in RESP2.
func AppendPushLen(b []byte, p Protocol, n int) []byte {
	if p == RESP3 {
		return AppendLen(b, '>', n)
	}
	return AppendLen(b, '*', n)
}

// AppendVerbatim appends a text reply (INFO, CLIENT LIST): a verbatim
// string of format txt in RESP3, a bulk string in RESP2.
func AppendVerbatim(b []byte, p Protocol, s string) []byte {
	if p != RESP3 {
		b = AppendLen(b, '$', len(s))
	} else {
		b = AppendLen(b, '=', len(s)+4)
		b = append(b, "txt:"...)
	}
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// AppendLen appends a type byte and a length: the header of an aggregate
// or a bulk (kind '*', '%', '~', '>', '$', '=').
func AppendLen(b []byte, kind byte, n int) []byte {
	b = append(b, kind)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}
