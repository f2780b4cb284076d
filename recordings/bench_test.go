package recordings_test

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/dashgate/dashgate/recordings"
)

// BenchmarkRecording64MiB records 64 MiB of base64 text with CRLF line
// ends (what peerbench's cat prints) in 32 KiB reads into a real file, and
// waits for the file: the CPU a recorded terminal's output costs
// (ns/op per MiB: run with -benchtime 1x and divide, or read cpu_ms/MiB).
func BenchmarkRecording64MiB(b *testing.B) {
	raw := make([]byte, 3<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	enc := base64.StdEncoding.EncodeToString(raw)
	var text bytes.Buffer
	for len(enc) > 0 {
		n := min(76, len(enc))
		text.WriteString(enc[:n])
		text.WriteString("\r\n")
		enc = enc[n:]
	}
	chunk := text.Bytes()
	const total = 64 << 20
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	for b.Loop() {
		// A queue that takes it all: every byte is encoded and written.
		st, err := recordings.Open(recordings.Config{Dir: filepath.Join(b.TempDir(), "r"), MaxBytes: 1 << 30, QueueBytes: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		r := st.Start("u", "s", 80, 24)
		for sent := 0; sent < total; {
			off := sent % (len(chunk) - 32<<10)
			r.Output(chunk[off : off+32<<10])
			sent += 32 << 10
		}
		r.Close()
		<-r.Done()
		if res := r.Result(); res.Truncated() {
			b.Logf("truncated: %+v", res)
		}
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N)/(total>>20), "cpu_ms/MiB")
	b.SetBytes(total)
}
