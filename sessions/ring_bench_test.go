package sessions

import (
	"fmt"
	"testing"
)

// BenchmarkRingWrite writes chunks the size of a pty read (4 KiB) and of a
// full frame (32 KiB) into a 1 MiB ring.
func BenchmarkRingWrite(b *testing.B) {
	for _, size := range []int{4 << 10, MaxFrame} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			r := NewRing(1 << 20)
			p := make([]byte, size)
			b.SetBytes(int64(size))
			for b.Loop() {
				r.Write(p)
			}
		})
	}
}

// BenchmarkRingReadAt reads a frame's worth behind the writer, as
// Attachment.Next does, including reads that wrap around the end.
func BenchmarkRingReadAt(b *testing.B) {
	r := NewRing(1 << 20)
	chunk := make([]byte, 5000) // not a divisor of the ring: reads wrap
	buf := make([]byte, MaxFrame)
	b.SetBytes(MaxFrame)
	for b.Loop() {
		for r.End()-r.Start() < MaxFrame || r.End() < 2*MaxFrame {
			r.Write(chunk)
		}
		off := r.End() - MaxFrame
		if n := r.ReadAt(buf, off); n != MaxFrame {
			b.Fatalf("ReadAt = %d", n)
		}
		r.Write(chunk)
	}
}
