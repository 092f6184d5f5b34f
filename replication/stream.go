package replication

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

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
//	'C'  continued: the first bytes of the payload     as the frame
//	     of the next frame that is not a 'C'           it continues
//	'G'  getack: empty; acknowledge now (sent only to   no
//	     a replica that announced CapaGetAck)
//	'a'  (replica to primary) ack: uvarint offset      no
//
// A 'P', 'S' or 'D' payload longer than frameChunk is split (stream
// version 2, Capability): 'C' frames of exactly frameChunk bytes each,
// then the frame itself with the remaining 1 to frameChunk bytes. So a
// frame never exceeds frameChunk bytes of payload whatever a value holds
// (a sliding log or a lease set can outgrow proto-max-bulk-len), a
// replica can bound the frames it accepts (Config.MaxFrame) and reads a
// large value only as fast as its bytes arrive, and every change still
// has exactly one encoding: a replica re-encodes a split change from its
// payload for its own backlog and gets the primary's bytes.
const (
	framePut      = 'P'
	frameDelete   = 'D'
	frameFlushDB  = 'F'
	frameFlushAll = 'A'
	framePing     = 'K'
	frameSnap     = 'S'
	frameSnapEnd  = 'E'
	frameCont     = 'C'
	frameGetAck   = 'G'
	frameAck      = 'a'
)

// frameChunk is the largest payload of a frame a primary sends: longer
// payloads are split into 'C' frames of this size.
const frameChunk = 64 << 10

// FrameOverhead is what a replica accepts in one frame beyond
// Config.MaxFrame (proto-max-bulk-len): room for the database, key and
// value header beside a value of proto-max-bulk-len from a primary that
// does not split frames (stream version 1).
const FrameOverhead = 64 << 10

// DefaultMaxFrame is the default of Config.MaxFrame: 16 MiB, the
// default proto-max-bulk-len.
const DefaultMaxFrame = 16 << 20

// errStream reports a malformed stream.
var errStream = errors.New("replication: malformed stream")

// ErrFrameTooLarge reports a frame longer than the replica accepts
// (Config.MaxFrame plus FrameOverhead): the replica drops the link, and
// its next sync is a full one.
var ErrFrameTooLarge = errors.New("replication: frame larger than the replica accepts (proto-max-bulk-len)")

// ErrChangeTooLarge reports a change split into frames whose joined size
// would pass what the replica accepts (its maxmemory): it is refused as
// its parts arrive, before they pass that size.
var ErrChangeTooLarge = errors.New("replication: change larger than the replica accepts (maxmemory)")

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

// appendFrame appends a frame of type t carrying payload, split into 'C'
// frames when it is longer than frameChunk.
func appendFrame(dst []byte, t byte, payload []byte) []byte {
	for len(payload) > frameChunk {
		dst = appendFrameHeader(dst, frameCont, frameChunk)
		dst = append(dst, payload[:frameChunk]...)
		payload = payload[frameChunk:]
	}
	dst = appendFrameHeader(dst, t, len(payload))
	return append(dst, payload...)
}

// writeFrame is appendFrame into a function that takes the bytes in
// pieces (the backlog), without a copy of the payload.
func writeFrame(write func([]byte), t byte, payload []byte) {
	var hdr [1 + binary.MaxVarintLen64]byte
	for len(payload) > frameChunk {
		write(appendFrameHeader(hdr[:0], frameCont, frameChunk))
		write(payload[:frameChunk])
		payload = payload[frameChunk:]
	}
	write(appendFrameHeader(hdr[:0], t, len(payload)))
	write(payload)
}

func uvarintLen[T int | uint64](x T) int {
	var tmp [binary.MaxVarintLen64]byte
	return binary.PutUvarint(tmp[:], uint64(x))
}

// appendPut appends a put (or, with t frameSnap, a full-copy entry) frame.
// The value is encoded in place after a length reserved for the largest
// unsplit payload, then the header is rewritten to its minimal form; a
// payload longer than frameChunk is split (appendFrame).
func appendPut(dst []byte, t byte, db int, key []byte, v *keyspace.Value) []byte {
	start := len(dst)
	dst = append(dst, t, 0, 0, 0) // type and room for a 3-byte uvarint (up to frameChunk)
	body := len(dst)
	dst = binary.AppendUvarint(dst, uint64(db))
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	if t == framePut {
		dst = persistence.EncodeChange(dst, *v) // a stream's change: its delta
	} else {
		dst = persistence.EncodeValue(dst, *v)
	}
	n := len(dst) - body
	if n > frameChunk {
		return splitInPlace(dst, start, t)
	}
	var hdr [binary.MaxVarintLen64 + 1]byte
	h := appendFrameHeader(hdr[:0], t, n)
	// Move the payload left so the header is minimal (every frame has one
	// encoding, so replicas and primaries hold the same bytes).
	gap := 4 - len(h)
	copy(dst[start:], h)
	if gap > 0 {
		copy(dst[start+len(h):], dst[body:])
		dst = dst[:len(dst)-gap]
	}
	return dst
}

// splitInPlace rewrites dst[start:], a frame of type t whose payload
// (longer than frameChunk) begins at start+4, as appendFrame splits it:
// the pieces move right, last first, to make room for their headers.
func splitInPlace(dst []byte, start int, t byte) []byte {
	const contHdr = 4 // 'C' and the uvarint of frameChunk
	payload := start + 4
	n := len(dst) - payload
	full := (n - 1) / frameChunk // the 'C' frames
	last := n - full*frameChunk
	lastHdr := 1 + uvarintLen(last)
	size := full*(contHdr+frameChunk) + lastHdr + last
	dst = slices.Grow(dst, start+size-len(dst))[:start+size]
	// The last piece, then the others from the end: each moves right.
	copy(dst[start+full*(contHdr+frameChunk)+lastHdr:], dst[payload+full*frameChunk:payload+n])
	for i := full - 1; i >= 0; i-- {
		copy(dst[start+i*(contHdr+frameChunk)+contHdr:], dst[payload+i*frameChunk:payload+(i+1)*frameChunk])
	}
	for i := 0; i < full; i++ {
		appendFrameHeader(dst[start+i*(contHdr+frameChunk):start+i*(contHdr+frameChunk)], frameCont, frameChunk)
	}
	appendFrameHeader(dst[start+full*(contHdr+frameChunk):start+full*(contHdr+frameChunk)], t, last)
	return dst
}

func appendDelete(dst []byte, db int, key []byte) []byte {
	var tmp [binary.MaxVarintLen64]byte
	d := binary.PutUvarint(tmp[:], uint64(db))
	if d+len(key) > frameChunk {
		return appendFrame(dst, frameDelete, append(tmp[:d:d], key...))
	}
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
	max uint64 // the largest payload of one frame accepted; 0 means no frame has a payload
	// maxChange, when not 0, is the largest payload of a split change
	// accepted (the replica's maxmemory): the 'C' frame that would pass it
	// is refused (ErrChangeTooLarge) before it is read.
	maxChange uint64
	buf       []byte // the last frame: header and payload, or a split frame's joined payload
	// parts are the 'C' frames' payloads of the split change being read.
	parts [][]byte
	// given is set when the caller keeps the last payload (a decoded
	// value aliases it): the next frame is read into a new buffer.
	given bool
}

// readPiece is the most a reader reads into its buffer at once: the
// buffer grows as the bytes arrive, never for a declared length alone.
const readPiece = 64 << 10

// next returns the next frame's type, its payload, and the whole frame as
// it arrived (header included), all valid until the next call. A change
// split into 'C' frames is returned whole: t is its last frame's type,
// payload the joined payload, and raw nil (the split is canonical, so
// appendFrame(t, payload) gives back the bytes that arrived).
//
// A frame longer than r.max is refused (ErrFrameTooLarge) before any of
// its payload is read; one announcing a length that its bytes never
// follow costs no more memory than the bytes that came.
func (r *frameReader) next() (t byte, payload, raw []byte, err error) {
	if r.given || cap(r.buf) > 1<<20 {
		r.buf, r.given = nil, false // do not keep a huge buffer after one huge frame
	}
	r.buf = r.buf[:0]
	clear(r.parts)
	r.parts = r.parts[:0]
	split := false
	for {
		var n uint64
		var hl int
		t, n, hl, err = r.header()
		if err != nil {
			if split && err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, nil, nil, err
		}
		if n > r.max {
			return 0, nil, nil, fmt.Errorf("%w: %w: a %q frame of %d bytes (at most %d)", errStream, ErrFrameTooLarge, t, n, r.max)
		}
		if t == frameCont || split {
			// Part of a split change: only the canonical split is valid.
			switch {
			case t == frameCont && n != frameChunk, t != frameCont && (n == 0 || n > frameChunk),
				hl != 1+uvarintLen(n):
				return 0, nil, nil, fmt.Errorf("%w: a split change's %q frame of %d bytes", errStream, t, n)
			case t != frameCont && t != framePut && t != frameSnap && t != frameDelete:
				return 0, nil, nil, fmt.Errorf("%w: a %q frame cannot continue a split change", errStream, t)
			}
			split = true
			if r.maxChange != 0 && uint64(len(r.parts)*frameChunk)+n > r.maxChange {
				return 0, nil, nil, fmt.Errorf("%w: %w: a split change past %d bytes (at most %d)", errStream, ErrChangeTooLarge, uint64(len(r.parts)*frameChunk)+n, r.maxChange)
			}
			if t == frameCont {
				// Kept apart until the last frame: the joined payload is
				// then allocated once, at its size, instead of a buffer
				// regrown (and copied) as it fills.
				part := make([]byte, frameChunk)
				if _, err := io.ReadFull(r.br, part); err != nil {
					return 0, nil, nil, unexpected(err)
				}
				r.parts = append(r.parts, part)
				continue
			}
			if total := len(r.parts)*frameChunk + int(n); cap(r.buf) < total {
				r.buf = make([]byte, 0, total)
			}
			for i, part := range r.parts {
				r.buf = append(r.buf, part...)
				r.parts[i] = nil
			}
			if err := r.read(int(n)); err != nil {
				return 0, nil, nil, err
			}
			return t, r.buf, nil, nil
		}
		r.buf = appendFrameHeader(r.buf, t, int(n))
		if err := r.read(int(n)); err != nil {
			return 0, nil, nil, err
		}
		return t, r.buf[hl:], r.buf, nil
	}
}

// unexpected turns io.EOF inside a frame into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// header reads a frame's type and payload length, and returns the
// header's length in bytes.
func (r *frameReader) header() (t byte, n uint64, hl int, err error) {
	t, err = r.br.ReadByte()
	if err != nil {
		return 0, 0, 0, err
	}
	var shift uint
	for i := 1; ; i++ {
		b, err := r.br.ReadByte()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, 0, 0, err
		}
		if i > binary.MaxVarintLen64 || i == binary.MaxVarintLen64 && b > 1 {
			return 0, 0, 0, fmt.Errorf("%w: frame length overflows 64 bits", errStream)
		}
		n |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return t, n, 1 + i, nil
		}
		shift += 7
	}
}

// read appends n bytes of payload to r.buf, growing it as they arrive.
func (r *frameReader) read(n int) error {
	for n > 0 {
		piece := min(n, readPiece)
		at := len(r.buf)
		r.buf = slices.Grow(r.buf, piece)[:at+piece]
		if _, err := io.ReadFull(r.br, r.buf[at:]); err != nil {
			return unexpected(err)
		}
		n -= piece
	}
	return nil
}

// change is one decoded change frame.
type change struct {
	t   byte
	db  int
	key []byte
	v   keyspace.Value
	// delta, if not nil, is a put that is a stream's delta
	// (persistence.EncodeChange), applied to the key's value as it
	// stands; it aliases the payload.
	delta []byte
}

// decodeChange decodes the payload of a 'P', 'S', 'D', 'F', 'A' or 'K' frame.
// numDB bounds the database index. The key aliases p.
func decodeChange(t byte, p []byte, numDB int) (change, error) {
	c, _, err := decodeChangeOwned(t, p, numDB, false)
	return c, err
}

// ownMin is the smallest string value that a replica keeps in the buffer
// it read it into rather than copying it.
const ownMin = 64 << 10

// decodeChangeOwned is decodeChange for a payload that the caller may
// give up (own): a large string value that fills most of p's buffer is
// then decoded in place (persistence.DecodeValueOwned) instead of copied,
// and kept reports it, so that a value is held once, not twice.
func decodeChangeOwned(t byte, p []byte, numDB int, own bool) (c change, kept bool, err error) {
	c = change{t: t}
	switch t {
	case framePing, frameFlushAll:
		if len(p) != 0 {
			return c, false, fmt.Errorf("%w: %q frame with a payload", errStream, t)
		}
		return c, false, nil
	}
	whole := cap(p)
	db, n := binary.Uvarint(p)
	if n <= 0 || db >= uint64(numDB) {
		return c, false, fmt.Errorf("%w: database index in a %q frame (this node has %d databases)", errStream, t, numDB)
	}
	c.db = int(db)
	p = p[n:]
	switch t {
	case frameFlushDB:
		if len(p) != 0 {
			return c, false, fmt.Errorf("%w: flush frame too long", errStream)
		}
	case frameDelete:
		c.key = p
	case framePut, frameSnap:
		kl, n := binary.Uvarint(p)
		if n <= 0 || kl > uint64(len(p)-n) {
			return c, false, fmt.Errorf("%w: key length in a %q frame", errStream, t)
		}
		c.key = p[n : n+int(kl)]
		enc := p[n+int(kl):]
		if t == framePut && persistence.IsDelta(enc) {
			c.delta = enc
			return c, false, nil
		}
		decode := persistence.DecodeValue
		// Only a value that fills most of the buffer is kept in it: the
		// rest of the buffer (key, spare capacity) is held as long as the
		// value is.
		owned := own && len(enc) >= ownMin && len(enc) >= whole/4*3
		if owned {
			decode = persistence.DecodeValueOwned
		}
		v, err := decode(enc)
		if err != nil {
			return c, false, fmt.Errorf("%w: %w", errStream, err)
		}
		c.v = v
		kept = owned && v.Kind == keyspace.KindString
	default:
		return c, false, fmt.Errorf("%w: unknown frame type %q", errStream, t)
	}
	return c, kept, nil
}
