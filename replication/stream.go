package replication

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/persistence"
)

// The stream a primary sends a replica after "+FULLRESYNC" or "+CONTINUE"
// is a sequence of frames: a type byte, the payload's length as a uvarint,
// the payload. The change frames (frameIsChange) are the replication
// stream proper: they are what the backlog holds, byte for byte, and what
// the offsets count. The other frames carry a full copy and are not
// counted. A replica sends the primary ack frames only.
//
//	type payload                                      counted
//	'P'  put: uvarint db, uvarint key length, key,    yes
//	     value (persistence.EncodeValue) to the end
//	'D'  delete: uvarint db, key to the end            yes
//	'F'  flush one database: uvarint db                yes
//	'A'  flush every database: empty                   yes
//	'K'  keepalive: empty                              yes
//	'S'  an entry of the full copy: as 'P'             no
//	'E'  end of the full copy: empty                   no
//	'a'  (replica to primary) ack: uvarint offset      no
const (
	framePut      = 'P'
	frameDelete   = 'D'
	frameFlushDB  = 'F'
	frameFlushAll = 'A'
	framePing     = 'K'
	frameSnap     = 'S'
	frameSnapEnd  = 'E'
	frameAck      = 'a'
)

// maxFrame bounds a frame's payload: a key of up to 512 MiB and a value of
// up to 512 MiB (Redis's proto-max-bulk-len) with room for the headers.
const maxFrame = 1<<30 + 1<<20

// errStream reports a malformed stream.
var errStream = errors.New("replication: malformed stream")

func frameIsChange(t byte) bool {
	switch t {
	case framePut, frameDelete, frameFlushDB, frameFlushAll, framePing:
		return true
	}
	return false
}

// appendFrameHeader appends a frame's type and payload length.
func appendFrameHeader(dst []byte, t byte, n int) []byte {
	dst = append(dst, t)
	return binary.AppendUvarint(dst, uint64(n))
}

// appendPut appends a put (or, with t frameSnap, a full-copy entry) frame.
// The value is encoded in place after a length reserved for the largest
// payload, then the header is rewritten to its minimal form.
func appendPut(dst []byte, t byte, db int, key []byte, v *keyspace.Value) []byte {
	start := len(dst)
	dst = append(dst, t, 0, 0, 0, 0, 0) // type and room for a 5-byte uvarint
	body := len(dst)
	dst = binary.AppendUvarint(dst, uint64(db))
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	dst = persistence.EncodeValue(dst, *v)
	n := len(dst) - body
	var hdr [binary.MaxVarintLen64 + 1]byte
	h := appendFrameHeader(hdr[:0], t, n)
	// Move the payload left so the header is minimal (every frame has one
	// encoding, so replicas and primaries hold the same bytes).
	gap := 6 - len(h)
	copy(dst[start:], h)
	if gap > 0 {
		copy(dst[start+len(h):], dst[body:])
		dst = dst[:len(dst)-gap]
	}
	return dst
}

func appendDelete(dst []byte, db int, key []byte) []byte {
	var tmp [binary.MaxVarintLen64]byte
	d := binary.PutUvarint(tmp[:], uint64(db))
	dst = appendFrameHeader(dst, frameDelete, d+len(key))
	dst = append(dst, tmp[:d]...)
	return append(dst, key...)
}

func appendFlushDB(dst []byte, db int) []byte {
	var tmp [binary.MaxVarintLen64]byte
	d := binary.PutUvarint(tmp[:], uint64(db))
	dst = appendFrameHeader(dst, frameFlushDB, d)
	return append(dst, tmp[:d]...)
}

func appendEmpty(dst []byte, t byte) []byte { return appendFrameHeader(dst, t, 0) }

func appendAck(dst []byte, off int64) []byte {
	var tmp [binary.MaxVarintLen64]byte
	d := binary.PutUvarint(tmp[:], uint64(off))
	dst = appendFrameHeader(dst, frameAck, d)
	return append(dst, tmp[:d]...)
}

// frameReader reads frames from a buffered stream.
type frameReader struct {
	br  *bufio.Reader
	max uint64 // the largest payload accepted; 0 means maxFrame
	buf []byte // the last frame, header included
}

// next returns the next frame's type, its payload, and the whole frame
// (header included, valid until the next call). A payload is read in
// pieces of at most 1 MiB, so a length that the bytes never follow costs
// no more memory than the bytes that came.
func (r *frameReader) next() (t byte, payload, raw []byte, err error) {
	t, err = r.br.ReadByte()
	if err != nil {
		return 0, nil, nil, err
	}
	n, err := binary.ReadUvarint(r.br)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, nil, err
	}
	limit := r.max
	if limit == 0 {
		limit = maxFrame
	}
	if n > limit {
		return 0, nil, nil, fmt.Errorf("%w: frame of %d bytes (at most %d)", errStream, n, limit)
	}
	if cap(r.buf) > 1<<20 && n < 1<<16 {
		r.buf = nil // do not keep a huge buffer after one huge frame
	}
	r.buf = appendFrameHeader(r.buf[:0], t, int(n))
	h := len(r.buf)
	for left := int(n); left > 0; {
		piece := min(left, 1<<20)
		at := len(r.buf)
		r.buf = append(r.buf, make([]byte, piece)...)
		if _, err := io.ReadFull(r.br, r.buf[at:]); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, nil, nil, err
		}
		left -= piece
	}
	return t, r.buf[h:], r.buf, nil
}

// change is one decoded change frame.
type change struct {
	t   byte
	db  int
	key []byte
	v   keyspace.Value
}

// decodeChange decodes the payload of a 'P', 'S', 'D', 'F', 'A' or 'K' frame.
// numDB bounds the database index.
func decodeChange(t byte, p []byte, numDB int) (change, error) {
	c := change{t: t}
	switch t {
	case framePing, frameFlushAll:
		if len(p) != 0 {
			return c, fmt.Errorf("%w: %q frame with a payload", errStream, t)
		}
		return c, nil
	}
	db, n := binary.Uvarint(p)
	if n <= 0 || db >= uint64(numDB) {
		return c, fmt.Errorf("%w: database index in a %q frame (this node has %d databases)", errStream, t, numDB)
	}
	c.db = int(db)
	p = p[n:]
	switch t {
	case frameFlushDB:
		if len(p) != 0 {
			return c, fmt.Errorf("%w: flush frame too long", errStream)
		}
	case frameDelete:
		c.key = p
	case framePut, frameSnap:
		kl, n := binary.Uvarint(p)
		if n <= 0 || kl > uint64(len(p)-n) {
			return c, fmt.Errorf("%w: key length in a %q frame", errStream, t)
		}
		c.key = p[n : n+int(kl)]
		v, err := persistence.DecodeValue(p[n+int(kl):])
		if err != nil {
			return c, fmt.Errorf("%w: %w", errStream, err)
		}
		c.v = v
	default:
		return c, fmt.Errorf("%w: unknown frame type %q", errStream, t)
	}
	return c, nil
}
