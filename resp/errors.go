package resp

import "errors"

// ErrServerClosed is returned by [Server.Serve] after a call to
// [Server.Shutdown] or [Server.Close].
var ErrServerClosed = errors.New("resp: server closed")

// Wire texts. They are compatibility surface: each one is the exact text
// Redis 7 sends (src/networking.c), except msgQueryBufLimit, which Redis
// does not send (it closes the client silently and logs instead).
const (
	// msgMaxClients is written, raw, to a connection refused because
	// Config.MaxClients connections are already open (Redis
	// acceptCommonHandler).
	msgMaxClients = "-ERR max number of clients reached\r\n"

	msgInvalidMultibulk = "Protocol error: invalid multibulk length"
	msgInvalidBulk      = "Protocol error: invalid bulk length"
	msgTooBigMbulk      = "Protocol error: too big mbulk count string"
	msgTooBigBulk       = "Protocol error: too big bulk count string"
	msgTooBigInline     = "Protocol error: too big inline request"
	msgUnbalanced       = "Protocol error: unbalanced quotes in request"
	msgQueryBufLimit    = "Protocol error: client query buffer limit reached"
	// msgUnauthMultibulk and msgUnauthBulk answer a client that has not
	// authenticated and announces more than UnauthMaxMultiBulkLen elements
	// or a bulk over UnauthMaxBulkLen bytes (Redis processMultibulkBuffer).
	msgUnauthMultibulk = "Protocol error: unauthenticated multibulk length"
	msgUnauthBulk      = "Protocol error: unauthenticated bulk length"
	// msgExpectedDollar is followed by the offending byte and a closing
	// quote: "Protocol error: expected '$', got 'X'".
	msgExpectedDollar = "Protocol error: expected '$', got '"
)

// rawMaxClients is msgMaxClients as bytes, so a refusal does not allocate.
var rawMaxClients = []byte(msgMaxClients)

// protocolError is a malformed or over-limit request. Its text is what the
// client receives after "-ERR ", and the connection is closed after it.
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return e.msg }

var (
	errInvalidMultibulk = &protocolError{msgInvalidMultibulk}
	errInvalidBulk      = &protocolError{msgInvalidBulk}
	errTooBigMbulk      = &protocolError{msgTooBigMbulk}
	errTooBigBulk       = &protocolError{msgTooBigBulk}
	errTooBigInline     = &protocolError{msgTooBigInline}
	errUnbalanced       = &protocolError{msgUnbalanced}
	errQueryBufLimit    = &protocolError{msgQueryBufLimit}
	errUnauthMultibulk  = &protocolError{msgUnauthMultibulk}
	errUnauthBulk       = &protocolError{msgUnauthBulk}
)

// errExpectedDollar reports the byte found where a bulk header ('$') was
// expected. Like Redis's %c, the byte is written as is (no UTF-8 encoding);
// a CR or LF becomes a space when the reply is encoded.
func errExpectedDollar(got byte) *protocolError {
	return &protocolError{msgExpectedDollar + string([]byte{got}) + "'"}
}
