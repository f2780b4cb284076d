package sessions

// Ring keeps the last Cap bytes of a stream and counts every byte ever
// written, so a reader can ask for "everything from offset N". It is not
// safe for concurrent use; Terminal guards it.
//
// Its buffer grows with what was written, up to the capacity: a terminal
// whose program says little (a shell's prompt) does not allocate and
// clear --pty-buffer bytes (1 MiB) when it starts (issue 18: 11% of
// dashgate's CPU when terminals open back to back). While it grows the
// bytes do not wrap: offset o is at buf[o].
type Ring struct {
	buf []byte
	cap int
	end int64 // bytes ever written
}

// minRing is the first size of a ring's buffer.
const minRing = 4 << 10

// NewRing returns a ring holding at most capacity bytes (capacity > 0).
func NewRing(capacity int) *Ring { return &Ring{cap: capacity} }

// End is the number of bytes ever written.
func (r *Ring) End() int64 { return r.end }

// Start is the offset of the oldest byte still held.
func (r *Ring) Start() int64 { return max(0, r.end-int64(r.cap)) }

// grow makes room for n more bytes while the buffer is below capacity.
func (r *Ring) grow(n int) {
	want := r.end + int64(n)
	if want <= int64(len(r.buf)) {
		return
	}
	size := max(minRing, 2*len(r.buf))
	for int64(size) < want && size < r.cap {
		size *= 2
	}
	size = min(size, r.cap)
	buf := make([]byte, size)
	copy(buf, r.buf[:r.end]) // below capacity nothing wrapped
	r.buf = buf
}

// Write appends p, dropping the oldest bytes when full. It never fails.
func (r *Ring) Write(p []byte) (int, error) {
	n := len(p)
	if len(r.buf) < r.cap {
		r.grow(len(p))
	}
	if len(p) > len(r.buf) {
		r.end += int64(len(p) - len(r.buf))
		p = p[len(p)-len(r.buf):]
	}
	for len(p) > 0 {
		at := int(r.end % int64(len(r.buf)))
		c := copy(r.buf[at:], p)
		p = p[c:]
		r.end += int64(c)
	}
	return n, nil
}

// ReadAt copies into p the bytes from offset off on, at most len(p), and
// returns how many it copied. off must be within [Start, End].
func (r *Ring) ReadAt(p []byte, off int64) int {
	if off < r.Start() || off >= r.end {
		return 0
	}
	n := 0
	for n < len(p) && off < r.end {
		at := int(off % int64(len(r.buf)))
		stop := len(r.buf)
		if rem := r.end - off; int64(stop-at) > rem {
			stop = at + int(rem)
		}
		c := copy(p[n:], r.buf[at:stop])
		n += c
		off += int64(c)
	}
	return n
}
