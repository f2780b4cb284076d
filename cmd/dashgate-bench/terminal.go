package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/creack/pty"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// The terminal figures type one shell line that switches the terminal to
// raw mode without echo (no output processing: bytes come back as is),
// prints a marker and execs the program measured. The echo of the typed
// line shows the marker's two halves apart, so only printf's output
// matches it.
func shellLine(tag, then string) (line string, marker []byte) {
	return fmt.Sprintf("stty raw -echo; printf '%%s%%s' DGB_ %s_GO; %s", tag, then), []byte("DGB_" + tag + "_GO")
}

func newTag() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sink consumes terminal output: it waits for the marker, then counts
// (and checksums) the bytes after it, timing from the marker to the last
// expected byte.
type sink struct {
	marker []byte
	want   int64 // bytes expected after the marker
	pre    []byte
	found  bool
	got    int64
	crc    uint32
	start  time.Time
	end    time.Time
}

// feed takes the next output bytes; done once want bytes followed the
// marker. More bytes than want is an error.
func (s *sink) feed(p []byte, now time.Time) (done bool, err error) {
	if !s.found {
		s.pre = append(s.pre, p...)
		i := bytes.Index(s.pre, s.marker)
		if i < 0 {
			if len(s.pre) > 64<<10 {
				s.pre = append(s.pre[:0], s.pre[len(s.pre)-len(s.marker):]...)
			}
			return false, nil
		}
		s.found, s.start = true, now
		p = s.pre[i+len(s.marker):]
		s.pre = nil
	}
	if len(p) == 0 {
		return s.got == s.want, nil
	}
	s.got += int64(len(p))
	s.crc = crc32.Update(s.crc, castagnoli, p)
	if s.got > s.want {
		return true, fmt.Errorf("%d bytes after the marker, want %d", s.got, s.want)
	}
	if s.got == s.want {
		s.end = now
		return true, nil
	}
	return false, nil
}

// rate is the bytes per second between the marker and the last byte.
func (s *sink) rate() float64 {
	d := s.end.Sub(s.start)
	if d <= 0 {
		return 0
	}
	return float64(s.got) / d.Seconds()
}

// makeFile writes size pseudo-random bytes and returns their checksum.
func makeFile(path string, size int64) (uint32, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	var seed [32]byte
	rand.Read(seed[:])
	src := mrand.NewChaCha8(seed)
	buf := make([]byte, 1<<20)
	var crc uint32
	for left := size; left > 0; {
		n := int64(len(buf))
		if left < n {
			n = left
		}
		src.Read(buf[:n])
		crc = crc32.Update(crc, castagnoli, buf[:n])
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return 0, err
		}
		left -= n
	}
	return crc, f.Close()
}

// plainPTY runs the line under /bin/sh on a pty of its own (creack/pty, no
// WebSocket) and feeds a plain read loop's output to s. It returns the CPU
// time of the program (sh, then cat).
func plainPTY(ctx context.Context, line string, s *sink) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", line)
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 200, Rows: 50})
	if err != nil {
		return 0, fmt.Errorf("start plain pty: %w", err)
	}
	buf := make([]byte, 32<<10) // dashgate's read size (sessions.MaxFrame)
	done := false
	var ferr error
	for {
		n, err := f.Read(buf)
		if n > 0 && !done && ferr == nil {
			done, ferr = s.feed(buf[:n], time.Now())
		}
		if err != nil {
			break // EIO once the program is gone (pty(7))
		}
	}
	f.Close()
	werr := cmd.Wait()
	var used time.Duration
	if st := cmd.ProcessState; st != nil {
		used = st.UserTime() + st.SystemTime()
	}
	switch {
	case ferr != nil:
		return used, ferr
	case !done:
		return used, fmt.Errorf("plain pty: %d of %d bytes after the marker (found %v)", s.got, s.want, s.found)
	case werr != nil:
		return used, fmt.Errorf("plain pty: %w", werr)
	}
	return used, nil
}

// cpuSelf is this process's CPU time (user + system).
func cpuSelf() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuOf is the CPU time (user + system) of pid from /proc, 0 when unknown.
func cpuOf(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	f := bytes.Fields(b[i+2:])
	if len(f) < 13 {
		return 0
	}
	// fields 14 and 15 of proc(5) (utime, stime), in clock ticks (100 Hz
	// on Linux: USER_HZ)
	ut, _ := strconv.ParseInt(string(f[11]), 10, 64)
	st, _ := strconv.ParseInt(string(f[12]), 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// wsPTY types the line into a new terminal of t (its shell) and feeds the
// binary frames to s; the program ends the terminal, whose exit frame and
// close are checked.
func wsPTY(ctx context.Context, t *target, line string, s *sink) error {
	tm, err := dialTerm(ctx, t, "cols=200&rows=50")
	if err != nil {
		return err
	}
	defer tm.stop()
	if err := tm.send([]byte(line + "\r")); err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	for done := false; !done; {
		n, _, err := tm.next(buf)
		if err != nil {
			return fmt.Errorf("terminal: %d of %d bytes after the marker (found %v): %w", s.got, s.want, s.found, err)
		}
		if tm.exit != nil {
			return fmt.Errorf("terminal exited (code %d) after %d of %d bytes", *tm.exit, s.got, s.want)
		}
		if n > 0 {
			if done, err = s.feed(buf[:n], time.Now()); err != nil {
				return err
			}
		}
	}
	if err := tm.waitExit(); err != nil {
		return err
	}
	if *tm.exit != 0 {
		return fmt.Errorf("terminal program exit code %d", *tm.exit)
	}
	return nil
}

// throughput: cat of a file through /ws/pty against a plain pty read loop,
// in interleaved pairs (the order alternates), as a ratio.
func (b *bench) throughput(ctx context.Context) {
	size := int64(b.cfg.ThroughputMiB) << 20
	path := filepath.Join(b.tmp, "throughput.bin")
	crc, err := makeFile(path, size)
	if err != nil {
		b.errorf("throughput: make file: %v", err)
		return
	}
	defer os.Remove(path)
	ratio := b.fig("pty_ratio", fmt.Sprintf("terminal throughput, cat %d MiB: /ws/pty ÷ plain pty", b.cfg.ThroughputMiB), "ratio", Target{">=", 0.8})
	plainF := b.fig("pty_plain_mibs", "  plain pty read loop (creack/pty)", "MiB/s", Target{})
	wsF := b.fig("pty_ws_mibs", "  through /ws/pty to a Go client", "MiB/s", Target{})
	plainCPU := b.fig("pty_plain_cpu", "  CPU per MiB: plain reader + cat", "ms", Target{})
	wsCPU := b.fig("pty_ws_cpu", "  CPU per MiB: dashgate + Go client (cat not counted)", "ms", Target{})

	b.withTarget(ctx, "throughput", nil, func(t *target) error {
		// measure returns the rate and the CPU time spent per MiB by the
		// reading side (this process, plus dashgate or cat).
		measure := func(ws bool) (rate, cpu float64, err error) {
			line, marker := shellLine(newTag(), "exec cat '"+path+"'")
			s := &sink{marker: marker, want: size}
			self0, dg0 := cpuSelf(), cpuOf(t.pid)
			var catCPU time.Duration
			if ws {
				err = wsPTY(ctx, t, line, s)
			} else {
				catCPU, err = plainPTY(ctx, line, s)
			}
			used := cpuSelf() - self0 + catCPU
			if ws {
				used += cpuOf(t.pid) - dg0
			}
			if err == nil && s.crc != crc {
				err = errors.New("output differs from the file (checksum)")
			}
			return s.rate(), float64(used) / float64(time.Millisecond) / float64(b.cfg.ThroughputMiB), err
		}
		for run := range b.cfg.Runs {
			var plain, ws, pc, wc float64
			var err error
			for i := range 2 {
				if (i == 0) == (run%2 == 0) {
					plain, pc, err = measure(false)
				} else {
					ws, wc, err = measure(true)
				}
				if err != nil {
					return err
				}
			}
			b.add(plainF, plain/(1<<20))
			b.add(wsF, ws/(1<<20))
			b.add(ratio, ws/plain)
			b.add(plainCPU, pc)
			if t.pid > 0 {
				b.add(wsCPU, wc)
			}
			b.logf("throughput run %d: plain %.0f MiB/s, ws %.0f MiB/s", run, plain/(1<<20), ws/(1<<20))
		}
		return nil
	})
}

// keystrokes: single bytes typed into `cat` on a raw terminal, each timed
// from the frame sent to the byte back; the same on a plain pty in the same
// run (interleaved) shows what the machine itself adds.
func (b *bench) keystrokes(ctx context.Context) {
	p50 := b.fig("key_p50", fmt.Sprintf("keystroke round trip (%d × 1 byte through cat) p50", b.cfg.Keystrokes), "ms", Target{"<=", 0.3})
	p99 := b.fig("key_p99", "keystroke round trip p99", "ms", Target{"<=", 2})
	plain50 := b.fig("key_plain_p50", "  same on a plain pty (no WebSocket) p50", "ms", Target{})
	plain99 := b.fig("key_plain_p99", "  same on a plain pty (no WebSocket) p99", "ms", Target{})
	b.withTarget(ctx, "keys", nil, func(t *target) error {
		for run := range b.cfg.Runs {
			var rtts, plain []time.Duration
			var err error
			for i := range 2 {
				if (i == 0) == (run%2 == 0) {
					plain, err = plainKeystrokes(ctx, b.cfg.Keystrokes)
				} else {
					rtts, err = keystrokeRun(ctx, t, b.cfg.Keystrokes)
				}
				if err != nil {
					return err
				}
			}
			xs, ps := ms(rtts), ms(plain)
			b.add(p50, percentile(xs, 50))
			b.add(p99, percentile(xs, 99))
			b.add(plain50, percentile(ps, 50))
			b.add(plain99, percentile(ps, 99))
			b.logf("keys run %d: p50 %.3f ms p99 %.3f ms (plain pty p50 %.3f ms p99 %.3f ms)", run,
				percentile(xs, 50), percentile(xs, 99), percentile(ps, 50), percentile(ps, 99))
		}
		return nil
	})
}

// keyWarmup keystrokes are typed before the timed ones.
const keyWarmup = 20

// plainKeystrokes types n single bytes into cat on a pty of its own.
func plainKeystrokes(ctx context.Context, n int) ([]time.Duration, error) {
	line, marker := shellLine(newTag(), "exec cat")
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", line)
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 80, Rows: 24})
	if err != nil {
		return nil, fmt.Errorf("start plain pty: %w", err)
	}
	defer func() {
		cmd.Process.Kill()
		f.Close()
		cmd.Wait()
	}()
	s := &sink{marker: marker}
	buf := make([]byte, 4<<10)
	for !s.found {
		k, err := f.Read(buf)
		if err != nil {
			return nil, fmt.Errorf("plain pty: wait for cat: %w", err)
		}
		if _, err := s.feed(buf[:k], time.Now()); err != nil {
			return nil, err
		}
	}
	out := make([]time.Duration, 0, n)
	for i := range keyWarmup + n {
		c := 'a' + byte(i%26)
		t0 := time.Now()
		if _, err := f.Write([]byte{c}); err != nil {
			return nil, err
		}
		k, err := f.Read(buf)
		d := time.Since(t0)
		if err != nil {
			return nil, fmt.Errorf("plain pty: keystroke %d: %w", i, err)
		}
		if k != 1 || buf[0] != c {
			return nil, fmt.Errorf("plain pty: keystroke %d: sent %q, got %q", i, c, buf[:k])
		}
		if i >= keyWarmup {
			out = append(out, d)
		}
	}
	return out, nil
}

func keystrokeRun(ctx context.Context, t *target, n int) ([]time.Duration, error) {
	tm, err := dialTerm(ctx, t, "cols=80&rows=24")
	if err != nil {
		return nil, err
	}
	defer tm.close()
	line, marker := shellLine(newTag(), "exec cat")
	if err := tm.send([]byte(line + "\r")); err != nil {
		return nil, err
	}
	s := &sink{marker: marker}
	buf := make([]byte, 64<<10)
	for !s.found {
		k, _, err := tm.next(buf)
		if err != nil {
			return nil, fmt.Errorf("wait for cat: %w", err)
		}
		if _, err := s.feed(buf[:k], time.Now()); err != nil {
			return nil, err
		}
	}
	out := make([]time.Duration, 0, n)
	for i := range keyWarmup + n {
		c := 'a' + byte(i%26)
		t0 := time.Now()
		if err := tm.send([]byte{c}); err != nil {
			return nil, err
		}
		k := 0
		for k == 0 {
			if k, _, err = tm.next(buf); err != nil {
				return nil, fmt.Errorf("keystroke %d: %w", i, err)
			}
		}
		d := time.Since(t0)
		if k != 1 || buf[0] != c {
			return nil, fmt.Errorf("keystroke %d: sent %q, got %q", i, c, buf[:k])
		}
		if i >= keyWarmup {
			out = append(out, d)
		}
	}
	return out, nil
}
