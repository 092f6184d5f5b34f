package resp

import (
	"bytes"
	"io"
	"math"
)

// Buffer sizes of the request reader.
const (
	// initReadBuf is the size of a connection's first read buffer (Redis
	// PROTO_IOBUF_LEN).
	initReadBuf = 16 << 10
	// minRead is the least free space offered to a read when the length of
	// the data awaited is unknown.
	minRead = 4 << 10
	// maxRetainedBuf is the largest read or reply buffer kept between
	// batches; a larger one is dropped once it is empty.
	maxRetainedBuf = 1 << 20
	// maxRetainedArgs is the largest argument slice kept between batches.
	maxRetainedArgs = 4096
	// preallocArgs caps the argument slice reserved for a "*N" header, so a
	// client cannot make the server reserve memory for arguments it never
	// sends (Redis reserves min(N, 1024) too).
	preallocArgs = 1024
)

// Parse states of the request reader.
const (
	stIdle     = iota // between commands
	stInline          // in an inline command line
	stCount           // in a "*N" line
	stBulkLen         // expecting a "$N" line
	stBulkData        // expecting bulk bytes and their "\r\n"
)

// reader parses requests (RESP2 multibulk arrays and inline lines) from
// its buffer. It is resumable: all parse state lives in the struct, so data
// arriving in pieces is examined once, however it is split.
//
// Offsets into buf satisfy start <= pos <= end <= len(buf) == cap(buf):
//
//	buf[:start]      consumed (arguments of returned commands may still
//	                 point here until the caller's batch ends)
//	buf[start:pos]   the command being parsed, its parsed part
//	buf[pos:end]     unparsed input
//	buf[end:]        free space for the next read
//
// Data moves (compaction, growth) only in fill, which the caller runs
// between batches, never while a returned command is being handled.
type reader struct {
	buf   []byte
	start int // first byte of the command being parsed
	pos   int // first unparsed byte
	end   int // end of the data read
	scan  int // buf[pos:scan] is known to hold no '\n'
	want  int // in stBulkData: offset just past the bulk's "\r\n"

	state     int
	remaining int64 // bulks still expected by the current "*N" command
	args      [][]byte

	// Limits; see Config. maxMulti, maxBulk and unauth may be changed per
	// connection between commands.
	unauth    bool // the client has not authenticated: Unauth* limits apply
	maxBulk   int64
	maxMulti  int64
	maxQuery  int
	maxInline int
}

// newReader returns a reader enforcing the limits of cfg, which must have
// its defaults applied.
func newReader(cfg *Config) reader {
	return reader{
		maxBulk:   cfg.MaxBulkLen,
		maxMulti:  cfg.MaxMultiBulkLen,
		maxQuery:  int(cfg.MaxQueryBuffer),
		maxInline: cfg.MaxInlineLen,
	}
}

// buffered is the number of unparsed bytes held for the current command
// (Redis CLIENT LIST qbuf).
func (r *reader) buffered() int { return r.end - r.start }

// next parses the next command. It returns its arguments (at least one), or
// nil and a nil error when the buffer holds no complete command, or a
// *protocolError. The arguments alias buf and the returned slice is reused:
// both are valid until the next call of fill. Empty commands ("*0", "*-1",
// blank inline lines) are skipped, as Redis does.
//
// After an error the reader must not be used again.
func (r *reader) next() ([][]byte, error) {
	for {
		switch r.state {
		case stIdle:
			r.start = r.pos
			r.scan = r.pos
			if r.pos == r.end {
				return nil, nil
			}
			if r.buf[r.pos] == '*' {
				r.state = stCount
			} else {
				r.state = stInline
			}

		case stInline:
			nl, err := r.line(r.maxInline, errTooBigInline)
			if nl < 0 {
				return nil, err
			}
			line := r.buf[r.pos:nl]
			if len(line) > 0 && line[len(line)-1] == '\r' {
				line = line[:len(line)-1]
			}
			r.pos = nl + 1
			r.state = stIdle
			args, ok := splitInline(line, r.args[:0])
			r.args = args
			if !ok {
				return nil, errUnbalanced
			}
			if len(args) > 0 {
				return args, nil
			}

		case stCount:
			nl, err := r.line(maxCountLine, errTooBigMbulk)
			if nl < 0 {
				return nil, err
			}
			n, ok := parseCount(r.buf[r.pos+1 : nl])
			if !ok || n > r.maxMulti {
				return nil, errInvalidMultibulk
			}
			if r.unauth && n > UnauthMaxMultiBulkLen {
				return nil, errUnauthMultibulk
			}
			r.pos = nl + 1
			if n <= 0 {
				r.state = stIdle
				continue
			}
			r.remaining = n
			r.args = r.args[:0]
			if want := int(min(n, preallocArgs)); cap(r.args) < want {
				r.args = make([][]byte, 0, want)
			}
			r.state = stBulkLen
			r.scan = r.pos

		case stBulkLen:
			nl, err := r.line(maxCountLine, errTooBigBulk)
			if nl < 0 {
				return nil, err
			}
			if r.buf[r.pos] != '$' {
				return nil, errExpectedDollar(r.buf[r.pos])
			}
			n, ok := parseCount(r.buf[r.pos+1 : nl])
			if !ok || n < 0 || n > r.maxBulk {
				return nil, errInvalidBulk
			}
			if r.unauth && n > UnauthMaxBulkLen {
				return nil, errUnauthBulk
			}
			r.pos = nl + 1
			// n <= maxBulk, which Config.Validate keeps well inside int.
			r.want = r.pos + int(n) + 2
			if r.want-r.start > r.maxQuery {
				return nil, errQueryBufLimit
			}
			r.state = stBulkData

		case stBulkData:
			if r.end < r.want {
				return nil, nil
			}
			// Redis skips the two bytes after a bulk without looking at
			// them; cellserver insists on "\r\n" so that a client that
			// miscounted is stopped before its data is read as commands.
			if r.buf[r.want-2] != '\r' || r.buf[r.want-1] != '\n' {
				return nil, errInvalidBulk
			}
			r.args = append(r.args, r.buf[r.pos:r.want-2])
			r.pos = r.want
			r.scan = r.pos
			r.want = 0
			r.remaining--
			if r.remaining == 0 {
				r.state = stIdle
				return r.args, nil
			}
			r.state = stBulkLen
		}
	}
}

// line finds the '\n' ending the line that starts at pos. It returns its
// offset, or -1 and nil when more data is needed, or -1 and tooBig when the
// line has more than limit bytes before its '\n'. Bytes already searched
// are not searched again, and the search never looks past the limit.
//
// The limit is applied to the whole line even when its end is already
// buffered, so the outcome does not depend on how the input was split
// into reads. (Redis checks only while the end is missing, which gives the
// same answer whenever the line arrives in pieces of at most the limit.)
func (r *reader) line(limit int, tooBig error) (int, error) {
	hi := r.end
	if m := r.pos + limit + 1; m < hi {
		hi = m
	}
	if r.scan < hi {
		if i := bytes.IndexByte(r.buf[r.scan:hi], '\n'); i >= 0 {
			return r.scan + i, nil
		}
		r.scan = hi
	}
	if r.end-r.pos > limit {
		return -1, tooBig
	}
	if r.end-r.start > r.maxQuery {
		return -1, errQueryBufLimit
	}
	return -1, nil
}

// parseCount parses the digits of a "*N\r" or "$N\r" line (the '\r' is
// the last byte of b) with the rules of Redis string2ll: an optional '-',
// no '+', no leading zeros, no spaces, at most 20 characters, no overflow.
func parseCount(b []byte) (int64, bool) {
	if len(b) < 2 || b[len(b)-1] != '\r' {
		return 0, false
	}
	b = b[:len(b)-1]
	if len(b) > 20 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	if b[0] < '1' || b[0] > '9' {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' || v > math.MaxUint64/10 {
			return 0, false
		}
		v *= 10
		d := uint64(c - '0')
		if v > math.MaxUint64-d {
			return 0, false
		}
		v += d
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return int64(-v), true // -(1<<63) wraps to math.MinInt64, as wanted
	}
	if v > math.MaxInt64 {
		return 0, false
	}
	return int64(v), true
}

// fill reads once from src into the free space of the buffer, first making
// room: dropping consumed bytes, and growing the buffer when the pending
// command needs it. It returns what src.Read returned.
//
// The buffer grows only when the bytes received of the pending command
// leave less than minRead free, and then doubles (stopping at the end of
// an awaited bulk), so a long command arriving in small pieces costs
// O(its size) in copies, and the buffer stays under twice what has
// arrived (plus minRead): a client announcing a large bulk and sending
// little gets little memory, whatever length it declares.
// The buffer never grows past maxQuery+minRead: next fails before that is
// needed.
func (r *reader) fill(src io.Reader) (int, error) {
	r.makeRoom()
	n, err := src.Read(r.buf[r.end:])
	if n > 0 {
		r.end += n
	}
	return n, err
}

// makeRoom ensures at least minRead bytes of free space after end.
func (r *reader) makeRoom() {
	if r.start == r.end {
		// Nothing pending: no command is in progress, so nothing points
		// into the buffer and it can be reused, or dropped if grown large.
		r.start, r.pos, r.end, r.scan = 0, 0, 0, 0
		if len(r.buf) > maxRetainedBuf || r.buf == nil {
			r.buf = make([]byte, initReadBuf)
		}
		if cap(r.args) > maxRetainedArgs {
			r.args = nil
		}
		return
	}
	// Only what has arrived counts: a declared bulk length alone reserves
	// nothing.
	pending := r.end - r.start
	required := pending + minRead
	if r.state == stBulkData {
		// The rest of the bulk is enough, if that is less.
		required = min(required, max(r.want-r.start, pending+1))
	}
	switch {
	case len(r.buf)-r.start >= required:
		// Room after the pending bytes already.
	case len(r.buf) > maxRetainedBuf && required <= initReadBuf:
		r.moveTo(make([]byte, initReadBuf))
	case len(r.buf) >= required:
		r.moveTo(r.buf)
	default:
		size := max(2*len(r.buf), required)
		if r.state == stBulkData && 2*(r.want-r.pos) >= len(r.buf) {
			// Growing for a long bulk: not past its end.
			size = min(size, max(r.want-r.start, required))
		}
		if limit := r.maxQuery + minRead; size > limit {
			size = max(limit, required)
		}
		r.moveTo(make([]byte, size))
	}
}

// moveTo copies the pending bytes buf[start:end] to the front of dst, which
// may be buf itself, and rebases every offset and the arguments parsed so
// far for the multibulk command in progress.
//
// An argument is always buf[i:j] (two-index slicing), so its offset in buf
// is cap(buf)-cap(arg): no parallel offset slice is needed.
func (r *reader) moveTo(dst []byte) {
	shift := r.start
	if r.state == stBulkLen || r.state == stBulkData {
		for i, a := range r.args {
			off := cap(r.buf) - cap(a) - shift
			r.args[i] = dst[off : off+len(a)]
		}
	} else {
		// The arguments are those of a command already handled.
		r.args = r.args[:0]
	}
	copy(dst, r.buf[r.start:r.end])
	r.buf = dst
	r.start = 0
	r.pos -= shift
	r.end -= shift
	r.scan -= shift
	if r.want > 0 {
		r.want -= shift
	}
}

// splitInline splits an inline command line in place, appending the
// arguments to args. It follows Redis sdssplitargs:
//
//   - arguments are separated by spaces, tabs, CR or LF; leading blanks may
//     also be vertical tab or form feed;
//   - "double quotes" take the escapes \n \r \t \b \a \xHH and \<any>
//     for <any>;
//   - 'single quotes' take only \' ;
//   - a quote may start in the middle of an argument (a"b c" is `ab c`);
//   - a closing quote must be followed by a blank or the end of the line.
//
// It reports false for an unterminated quote or a closing quote followed
// by something else. Unescaping only ever shortens, so the arguments are
// written over the line itself and alias it. Redis stops at a NUL byte
// (C strings); a NUL is an ordinary byte here. (Redis never hands such a
// line to sdssplitargs anyway: its search for '\n' stops at the NUL.)
func splitInline(line []byte, args [][]byte) ([][]byte, bool) {
	p, w, n := 0, 0, len(line)
	for {
		for p < n && isSpace(line[p]) {
			p++
		}
		if p == n {
			return args, true
		}
		start := w
		var quote byte // the open quote, 0 outside quotes
	token:
		for {
			switch {
			case quote != 0:
				if p == n {
					return args, false
				}
				c := line[p]
				switch {
				case quote == '"' && c == '\\' && p+3 < n && line[p+1] == 'x' && isHex(line[p+2]) && isHex(line[p+3]):
					line[w] = unhex(line[p+2])<<4 | unhex(line[p+3])
					p += 4
				case quote == '"' && c == '\\' && p+1 < n:
					switch c = line[p+1]; c {
					case 'n':
						c = '\n'
					case 'r':
						c = '\r'
					case 't':
						c = '\t'
					case 'b':
						c = '\b'
					case 'a':
						c = '\a'
					}
					line[w] = c
					p += 2
				case quote == '\'' && c == '\\' && p+1 < n && line[p+1] == '\'':
					line[w] = '\''
					p += 2
				case c == quote:
					if p+1 < n && !isSpace(line[p+1]) {
						return args, false
					}
					p++
					break token
				default:
					line[w] = c
					p++
				}
				w++
			default:
				if p == n {
					break token
				}
				switch c := line[p]; c {
				case ' ', '\n', '\r', '\t':
					p++
					break token
				case '"', '\'':
					quote = c
				default:
					line[w] = c
					w++
				}
				p++
			}
		}
		args = append(args, line[start:w])
	}
}

// isSpace is C isspace in the "C" locale.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	default:
		return c - 'a' + 10
	}
}
