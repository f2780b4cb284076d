package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"

	"github.com/dashgate/dashgate/internal/testkit"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// term is one terminal: a plain pty of the tool's own running /bin/sh, or
// a new /ws/pty of dashgate (a new session, no keepalive).
type term struct {
	send func([]byte) error
	recv func() ([]byte, error) // the next output
	stop func() error           // ends it; for a plain pty returns once sh was reaped
	cmd  *exec.Cmd              // the plain pty's shell
}

// openTerm opens a terminal of cols×rows: on dashgate when t is not nil,
// else /bin/sh on a pty of the tool's own (creack/pty).
func openTerm(ctx context.Context, t *target, cols, rows int) (*term, error) {
	if t == nil {
		cmd := exec.CommandContext(ctx, "/bin/sh")
		cmd.Env = testkit.CleanEnv()
		f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
		if err != nil {
			return nil, fmt.Errorf("start plain pty: %w", err)
		}
		buf := make([]byte, 32<<10) // dashgate's read size (sessions.MaxFrame)
		return &term{cmd: cmd,
			send: func(b []byte) error { _, err := f.Write(b); return err },
			recv: func() ([]byte, error) { n, err := f.Read(buf); return buf[:n], err },
			stop: func() error { cmd.Process.Kill(); f.Close(); cmd.Wait(); return nil },
		}, nil
	}
	return dialTerm(ctx, t.WSURL(fmt.Sprintf("ws/pty?cols=%d&rows=%d", cols, rows)), t.Token)
}

// dialTerm opens a terminal of url: a /ws/pty of dashgate, or of a
// reference relay (no token).
func dialTerm(ctx context.Context, url, token string) (*term, error) {
	p, _, err := testkit.DialPTY(ctx, url, testkit.DialOptions{Token: token})
	if err != nil {
		return nil, err
	}
	return &term{
		send: func(b []byte) error { return p.Send(ctx, b) },
		recv: func() ([]byte, error) {
			for {
				if f, err := p.Next(ctx); err != nil || f.Type == websocket.MessageBinary && len(f.Data) > 0 {
					return f.Data, err
				}
			}
		},
		stop: p.Close,
	}, nil
}

// runMarked types `stty raw -echo` (bytes then come back as they are), a
// marker printed by printf, then the shell line cmd into tm, and returns
// the output after the marker. The echo of the typed line shows the
// marker's halves apart, so only printf's output matches it.
func (tm *term) runMarked(cmd string) ([]byte, error) {
	var tag [6]byte
	rand.Read(tag[:])
	marker := fmt.Appendf(nil, "DGB_%x_GO", tag)
	if err := tm.send(fmt.Appendf(nil, "stty raw -echo; printf '%%s%%s' DGB_ %x_GO; %s\r", tag, cmd)); err != nil {
		return nil, err
	}
	var out []byte
	for {
		if _, after, ok := bytes.Cut(out, marker); ok {
			return after, nil
		}
		b, err := tm.recv()
		if err != nil {
			return nil, fmt.Errorf("wait for the marker: %w", err)
		}
		out = append(out, b...)
	}
}

// pair runs side on a plain pty (x nil, out[0]) and on dashgate t (out[1]),
// plain first on even runs, so that a drift of the machine hits both.
func pair[T any](r int, t *target, side func(x *target) (T, error)) (out [2]T, err error) {
	for i := range 2 {
		j := (i + r) % 2
		if out[j], err = side([]*target{nil, t}[j]); err != nil {
			return out, err
		}
	}
	return out, nil
}

// throughput: a file of pseudo-random bytes cat through a raw terminal,
// timed from the marker to its last byte (checked by CRC-32C), on a plain
// pty and through /ws/pty in pairs: the ratio of their rates, and the CPU
// time per MiB of this process plus cat (plain, once it exited) or dashgate.
func (b *bench) throughput(mib int) group {
	path, size := filepath.Join(b.tmp, "throughput.bin"), int64(mib)<<20
	var crc uint32
	side := func(ctx context.Context, t *target) (rate [2]float64, err error) {
		cpu0 := cpu(t)
		tm, err := openTerm(ctx, t, 200, 50)
		if err != nil {
			return rate, err
		}
		defer tm.stop()
		out, err := tm.runMarked("exec cat '" + path + "'")
		start, h, got := time.Now(), crc32.New(castagnoli), int64(0)
		for err == nil {
			h.Write(out)
			if got += int64(len(out)); got >= size {
				break
			}
			out, err = tm.recv()
		}
		end, used := time.Now(), cpu(t)-cpu0
		if t == nil && err == nil {
			err = tm.cmd.Wait()
			used += tm.cmd.ProcessState.UserTime() + tm.cmd.ProcessState.SystemTime()
		}
		if err != nil || got != size || h.Sum32() != crc {
			return rate, fmt.Errorf("%d of %d bytes after the marker, checksum ok: %v (%v)", got, size, h.Sum32() == crc, err)
		}
		return [2]float64{float64(mib) / end.Sub(start).Seconds(), float64(used) / float64(time.Millisecond) / float64(mib)}, nil
	}
	return group{name: "throughput",
		figs: []*Figure{
			fig(fmt.Sprintf("terminal throughput, cat %d MiB: /ws/pty ÷ plain pty", mib), "ratio", ">= 0.8"),
			fig("  plain pty read loop (creack/pty)", "MiB/s", ""),
			fig("  through /ws/pty to a Go client", "MiB/s", ""),
			fig("  CPU per MiB: plain reader + cat", "ms", ""),
			fig("  CPU per MiB: dashgate + Go client (cat not counted)", "ms", ""),
		},
		setup: func(context.Context, *target) error { // the file, once
			if crc != 0 {
				return nil
			}
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			var seed [32]byte
			rand.Read(seed[:])
			h := crc32.New(castagnoli)
			_, err = io.CopyN(io.MultiWriter(f, h), mrand.NewChaCha8(seed), size)
			crc = h.Sum32()
			return errors.Join(err, f.Close())
		},
		run: func(ctx context.Context, t *target, r int) ([]float64, error) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
			defer cancel()
			v, err := pair(r, t, func(x *target) ([2]float64, error) { return side(ctx, x) })
			return []float64{v[1][0] / v[0][0], v[0][0], v[1][0], v[0][1], v[1][1]}, err
		}}
}

// cpu is the CPU time (user + system) of this process, plus dashgate's
// when t is not nil.
func cpu(t *target) time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	d := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if t != nil {
		u, _ := testkit.ReadUsage(t.PID())
		d += u.CPU
	}
	return d
}

// dashgateCPU is the CPU time (user + system) of t's dashgate.
func dashgateCPU(t *target) time.Duration {
	u, _ := testkit.ReadUsage(t.PID())
	return u.CPU
}

// latency is a group of the p50 and p99 of a path through dashgate and of
// its plain pty baseline, measured in pairs by side.
func latency(name string, figs []*Figure, side func(ctx context.Context, x *target) ([]time.Duration, error)) group {
	return group{name: name, figs: figs, run: func(ctx context.Context, t *target, r int) ([]float64, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		ds, err := pair(r, t, func(x *target) ([]time.Duration, error) { return side(ctx, x) })
		ws, plain := ms(ds[1]), ms(ds[0])
		return []float64{percentile(ws, 50), percentile(ws, 99), percentile(plain, 50), percentile(plain, 99)}, err
	}}
}

// keys: n single bytes typed into cat on a raw terminal, each timed from
// the write to its echo, after 20 warm-up bytes. In the same run, in an
// order that rotates run by run: the same on a plain pty (what the machine
// itself adds) and through the two reference relays of relay.go (what any
// WebSocket relay adds, with nothing of dashgate's on the path).
func keys(n int) group {
	figs := []*Figure{
		fig(fmt.Sprintf("keystroke round trip (%d × 1 byte through cat) p50", n), "ms", "<= 0.3"),
		fig("keystroke round trip p99", "ms", "<= 2"),
		fig("  same on a plain pty (no WebSocket) p50", "ms", ""),
		fig("  same on a plain pty (no WebSocket) p99", "ms", ""),
		fig("  same through a minimal Go relay (coder/websocket) p50", "ms", ""),
		fig("  same through a minimal Go relay (coder/websocket) p99", "ms", ""),
		fig("  same through a raw relay (poll(2), one thread) p50", "ms", ""),
		fig("  same through a raw relay (poll(2), one thread) p99", "ms", ""),
		fig("  dashgate's CPU per keystroke, one idle terminal beside it", "µs", ""),
	}
	typeKeys := func(tm *term) ([]time.Duration, error) {
		defer tm.stop()
		var ds []time.Duration
		_, err := tm.runMarked("exec cat")
		for i := 0; err == nil && i < 20+n; i++ {
			c, t0 := 'a'+byte(i%26), time.Now()
			var got []byte
			if err = tm.send([]byte{c}); err == nil {
				got, err = tm.recv()
			}
			if ds = append(ds, time.Since(t0)); err == nil && string(got) != string(c) {
				err = fmt.Errorf("keystroke %d: sent %q, got %q", i, c, got)
			}
		}
		return ds[min(20, len(ds)):], err
	}
	var relays []*relay
	return group{name: "keys", figs: figs,
		setup: func(ctx context.Context, _ *target) error {
			for _, kind := range []string{"go", "raw"} {
				if len(relays) == 2 {
					break
				}
				r, err := startRelay(context.WithoutCancel(ctx), kind)
				if err != nil {
					return err
				}
				relays = append(relays, r)
			}
			return nil
		},
		done: func() {
			for _, r := range relays {
				r.stop()
			}
			relays = nil
		},
		run: func(ctx context.Context, t *target, r int) ([]float64, error) {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			open := []func() (*term, error){
				func() (*term, error) { return openTerm(ctx, t, 80, 24) },
				func() (*term, error) { return openTerm(ctx, nil, 80, 24) },
				func() (*term, error) { return dialTerm(ctx, relays[0].url, "") },
				func() (*term, error) { return dialTerm(ctx, relays[1].url, "") },
			}
			// A terminal left idle beside the typed one, as a second tab
			// is (and the spare terminal, --pty-spare): its reader waits
			// beside the typed one's.
			idle, err := openTerm(ctx, t, 80, 24)
			if err != nil {
				return nil, err
			}
			defer idle.stop()
			var vals []float64
			var keyCPU time.Duration
			ds := make([][]time.Duration, len(open))
			for k := range open {
				i := (k + r) % len(open)
				tm, err := open[i]()
				if err == nil {
					used := dashgateCPU(t)
					ds[i], err = typeKeys(tm)
					if i == 0 {
						keyCPU = dashgateCPU(t) - used
					}
				}
				if err != nil {
					return nil, err
				}
			}
			for _, d := range ds {
				v := ms(d)
				vals = append(vals, percentile(v, 50), percentile(v, 99))
			}
			return append(vals, float64(keyCPU.Microseconds())/float64(20+n)), nil
		}}
}

// connect: n terminals opened in sequence, each timed from the start (the
// WebSocket dial of /ws/pty, or starting /bin/sh on a plain pty) to its
// first output byte, and closed.
func connect(n int) group {
	figs := []*Figure{
		fig(fmt.Sprintf("terminal connect → first output byte (%d new /ws/pty in sequence) p50", n), "ms", ""),
		fig("terminal connect → first output byte p99", "ms", ""),
		fig("  /bin/sh on a plain pty: start → first byte p50", "ms", ""),
		fig("  /bin/sh on a plain pty: start → first byte p99", "ms", ""),
	}
	return latency("connect", figs, func(ctx context.Context, x *target) (ds []time.Duration, err error) {
		for i := 0; err == nil && i < n; i++ {
			t0 := time.Now()
			var tm *term
			if tm, err = openTerm(ctx, x, 80, 24); err != nil {
				return nil, err
			}
			_, err = tm.recv()
			ds = append(ds, time.Since(t0))
			err = errors.Join(err, tm.stop())
		}
		return ds, err
	})
}
