package replication

// ring is the replication backlog: the last bytes of the change stream, in
// a circular buffer. Offsets count every byte the stream ever held: the
// ring holds [start, end). Callers synchronise (Replication.blMu).
type ring struct {
	buf        []byte
	start, end int64
}

// reset empties the ring and makes offset the next byte's.
func (r *ring) reset(size int64, offset int64) {
	if int64(len(r.buf)) != size {
		r.buf = make([]byte, size)
	}
	r.start, r.end = offset, offset
}

// write appends p. Bytes older than the ring's size fall out.
func (r *ring) write(p []byte) {
	size := int64(len(r.buf))
	if size == 0 {
		r.end += int64(len(p))
		r.start = r.end
		return
	}
	if int64(len(p)) >= size {
		// Only the last size bytes stay: put each where its offset goes
		// (buf[off % size] holds offset off), in two copies.
		r.end += int64(len(p))
		r.start = r.end - size
		p = p[int64(len(p))-size:]
		at := r.start % size
		n := copy(r.buf[at:], p)
		copy(r.buf, p[n:])
		return
	}
	at := r.end % size
	n := copy(r.buf[at:], p)
	copy(r.buf, p[n:])
	r.end += int64(len(p))
	if r.end-r.start > size {
		r.start = r.end - size
	}
}

// read copies bytes from offset off into dst and returns how many; ok is
// false when off is no longer (or not yet) held.
func (r *ring) read(off int64, dst []byte) (n int, ok bool) {
	if off < r.start || off > r.end {
		return 0, false
	}
	size := int64(len(r.buf))
	want := min(int64(len(dst)), r.end-off)
	for want > 0 {
		at := off % size
		c := copy(dst[n:int64(n)+min(want, size-at)], r.buf[at:])
		n += c
		off += int64(c)
		want -= int64(c)
	}
	return n, true
}
