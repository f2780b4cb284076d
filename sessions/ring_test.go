package sessions

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// A ring's buffer grows with what was written (issue 18): a terminal that
// printed a prompt holds a few KiB, not its whole capacity.
func TestRingGrowsWithOutput(t *testing.T) {
	t.Parallel()
	r := NewRing(1 << 20)
	r.Write([]byte("$ "))
	if len(r.buf) > minRing {
		t.Fatalf("a ring holding 2 bytes has a %d-byte buffer", len(r.buf))
	}
	r.Write(make([]byte, 5000))
	if len(r.buf) >= 1<<20 || len(r.buf) < 5002 {
		t.Fatalf("after 5002 bytes the buffer is %d bytes", len(r.buf))
	}
	buf := make([]byte, 4)
	if n := r.ReadAt(buf, 0); string(buf[:n]) != "$ \x00\x00" {
		t.Fatalf("ReadAt(0) after growing = %q", buf[:n])
	}
}

// Whatever the sizes written, across growth and wrapping, a ring holds
// exactly the stream's last Cap bytes.
func TestRingMatchesStreamTail(t *testing.T) {
	t.Parallel()
	for _, capacity := range []int{1, 7, minRing - 1, minRing, minRing + 1, 3 * minRing, 64 << 10} {
		rng := rand.New(rand.NewPCG(uint64(capacity), 18))
		r := NewRing(capacity)
		var stream []byte
		for i := range 300 {
			p := make([]byte, rng.IntN(2*capacity+10))
			for j := range p {
				p[j] = byte(i + j)
			}
			r.Write(p)
			stream = append(stream, p...)
			start := max(0, len(stream)-capacity)
			if r.End() != int64(len(stream)) || r.Start() != int64(start) {
				t.Fatalf("cap %d write %d: start %d end %d, want %d %d", capacity, i, r.Start(), r.End(), start, len(stream))
			}
			off := start + rng.IntN(len(stream)-start+1)
			got := make([]byte, rng.IntN(capacity+1)+1)
			n := r.ReadAt(got, int64(off))
			want := stream[off:min(len(stream), off+len(got))]
			if !bytes.Equal(got[:n], want) {
				t.Fatalf("cap %d write %d: ReadAt(%d) = %d bytes, differs from the stream's %d", capacity, i, off, n, len(want))
			}
		}
	}
}
