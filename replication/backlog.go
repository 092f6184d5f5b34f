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
		r.end += int64(len(p))
		p = p[int64(len(p))-size:]
		copy(r.buf, p)
		// Keep the invariant buf[(off) % size] holds offset off.
		r.rotate(r.end - size)
		r.start = r.end - size
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

// rotate moves buf (which holds the size bytes starting at from, starting
// at index 0) so that offset from sits at from % size.
func (r *ring) rotate(from int64) {
	size := int64(len(r.buf))
	k := from % size
	if k == 0 {
		return
	}
	tmp := make([]byte, size)
	for i := int64(0); i < size; i++ {
		tmp[(k+i)%size] = r.buf[i]
	}
	copy(r.buf, tmp)
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
