package commands

import (
	"math/big"
	"strconv"

	"github.com/cellserver/cellserver/resp"
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

// Protocol-aware helpers: RESP2 (the default) or RESP3 after HELLO 3,
// encoded by resp's appenders with the connection's protocol.

// proto is the protocol the command's connection negotiated.
func (x *ctx) proto() resp.Protocol { return x.c.Protocol() }

// null is a missing value: $-1 in RESP2, _ in RESP3.
func (x *ctx) null() { x.c.Out = resp.AppendNull(x.c.Out, x.proto()) }

// nullArray is a missing aggregate (EXEC aborted by WATCH, CL.INFO of a
// missing key): *-1 in RESP2, _ in RESP3.
func (x *ctx) nullArray() { x.c.Out = resp.AppendNullArray(x.c.Out, x.proto()) }

// mapLen starts a map of n key/value pairs: %n in RESP3, a flat array of
// 2n elements in RESP2.
func (x *ctx) mapLen(n int) { x.c.Out = resp.AppendMapLen(x.c.Out, x.proto(), n) }

// setLen starts a set of n elements: ~n in RESP3, an array in RESP2.
func (x *ctx) setLen(n int) { x.c.Out = resp.AppendSetLen(x.c.Out, x.proto(), n) }

// verbatim writes a text reply (INFO, CLIENT LIST): a verbatim string of
// format txt in RESP3, a bulk string in RESP2.
func (x *ctx) verbatim(s string) { x.c.Out = resp.AppendVerbatim(x.c.Out, x.proto(), s) }

func (x *ctx) bulkInt(n int64) {
	var b [20]byte
	x.bulk(strconv.AppendInt(b[:0], n, 10))
}

// longDouble writes a long double result (INCREX BYFLOAT): as
// formatLongDouble's digits in a bulk string in RESP2, a double in RESP3.
func (x *ctx) longDouble(f *big.Float) {
	var buf [64]byte
	x.c.Out = resp.AppendDouble(x.c.Out, x.proto(), ldToFloat64(f), formatLongDouble(buf[:0], f))
}
