package commands

import (
	"strconv"

	"github.com/tidwall/redcon"
)

// Reply helpers.

func (x *ctx) errorReply(e wireErr) {
	msg := sanitizeError(string(e))
	x.failed = true
	x.s.countError(msg)
	x.c.Out = append(x.c.Out, '-')
	x.c.Out = append(x.c.Out, msg...)
	x.c.Out = append(x.c.Out, '\r', '\n')
}

func (x *ctx) status(s string)  { x.c.Out = redcon.AppendString(x.c.Out, s) }
func (x *ctx) ok()              { x.c.Out = redcon.AppendOK(x.c.Out) }
func (x *ctx) int(n int64)      { x.c.Out = redcon.AppendInt(x.c.Out, n) }
func (x *ctx) array(n int)      { x.c.Out = redcon.AppendArray(x.c.Out, n) }
func (x *ctx) bulk(b []byte)    { x.c.Out = redcon.AppendBulk(x.c.Out, b) }
func (x *ctx) bulkStr(s string) { x.c.Out = redcon.AppendBulkString(x.c.Out, s) }

// Protocol-aware helpers: RESP2 (the default) or RESP3 after HELLO 3, with
// Redis 7's encodings (networking.c addReplyMapLen, addReplySetLen,
// addReplyNull, addReplyNullArray, addReplyVerbatim).

// null is a missing value: $-1 in RESP2, _ in RESP3.
func (x *ctx) null() {
	if x.cl.resp3.Load() {
		x.c.Out = append(x.c.Out, "_\r\n"...)
		return
	}
	x.c.Out = redcon.AppendNull(x.c.Out)
}

// nullArray is a missing aggregate (EXEC aborted by WATCH, CL.INFO of a
// missing key): *-1 in RESP2, _ in RESP3.
func (x *ctx) nullArray() {
	if x.cl.resp3.Load() {
		x.c.Out = append(x.c.Out, "_\r\n"...)
		return
	}
	x.c.Out = append(x.c.Out, "*-1\r\n"...)
}

// mapLen starts a map of n key/value pairs: %n in RESP3, a flat array of
// 2n elements in RESP2.
func (x *ctx) mapLen(n int) {
	if x.cl.resp3.Load() {
		x.c.Out = appendLen(x.c.Out, '%', n)
		return
	}
	x.array(2 * n)
}

// setLen starts a set of n elements: ~n in RESP3, an array in RESP2.
func (x *ctx) setLen(n int) {
	if x.cl.resp3.Load() {
		x.c.Out = appendLen(x.c.Out, '~', n)
		return
	}
	x.array(n)
}

// verbatim writes a text reply (INFO, CLIENT LIST): a verbatim string of
// format txt in RESP3, a bulk string in RESP2.
func (x *ctx) verbatim(s string) {
	if !x.cl.resp3.Load() {
		x.bulkStr(s)
		return
	}
	x.c.Out = appendLen(x.c.Out, '=', len(s)+4)
	x.c.Out = append(x.c.Out, "txt:"...)
	x.c.Out = append(x.c.Out, s...)
	x.c.Out = append(x.c.Out, '\r', '\n')
}

func appendLen(b []byte, kind byte, n int) []byte {
	b = append(b, kind)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

func (x *ctx) bulkInt(n int64) {
	var b [20]byte
	x.bulk(strconv.AppendInt(b[:0], n, 10))
}
