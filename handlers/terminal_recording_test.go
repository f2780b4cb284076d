package handlers_test

import (
	"context"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/recordings"
	"github.com/dashgate/dashgate/sessions"
)

// recordedEnv is newEnv with terminals recorded into a recordings.Store
// (mod adjusts its config; its Dir is set). The store's writers are
// waited for after the registry ended every terminal.
func recordedEnv(t *testing.T, mod func(*recordings.Config), reg func(*sessions.Config)) (*env, *recordings.Store) {
	t.Helper()
	var recs *recordings.Store // set before the first terminal starts
	t.Cleanup(func() {         // after the env's cleanup (registered later): its terminals ended
		if recs == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := recs.Wait(ctx); err != nil {
			t.Errorf("recordings still being written: %v", err)
		}
	})
	e := newEnv(t, envOpts{reg: func(c *sessions.Config) {
		c.Record = func(owner, sid string, cols, rows uint16) sessions.Recording {
			return recs.Start(owner, sid, cols, rows)
		}
		if reg != nil {
			reg(c)
		}
	}})
	cfg := recordings.Config{Dir: filepath.Join(t.TempDir(), "recordings"), Log: e.log}
	if mod != nil {
		mod(&cfg)
	}
	var err error
	if recs, err = recordings.Open(cfg); err != nil {
		t.Fatal(err)
	}
	return e, recs
}

// finished waits until the store lists exactly one recording, no longer
// being written, and returns it.
func finished(t *testing.T, recs *recordings.Store) recordings.Info {
	t.Helper()
	var list []recordings.Info
	testkit.WaitFor(t, 15*time.Second, "one finished recording", func() bool {
		list, _ = recs.ListAll()
		return len(list) == 1 && !list[0].Active
	})
	return list[0]
}

var csi = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// TestTerminalRecording: with Config.Record a terminal's hello says
// recorded; its recording is a valid asciicast v2 file with its first size,
// its output from the shell's first prompt on (also when a spare served
// it: the prompt its ring held), its resizes, and not what was typed with
// echo off; its program's "worker closed" record names the file.
func TestTerminalRecording(t *testing.T) {
	t.Parallel()
	for _, spare := range []bool{false, true} {
		name := "started for it"
		if spare {
			name = "a spare"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, recs := recordedEnv(t, nil, func(c *sessions.Config) { c.PTYSpare = spare })
			if spare {
				// The first terminal's first output refills the spares;
				// the next terminal of its size takes that spare.
				first := e.pty(url.Values{"cols": {"90"}, "rows": {"25"}})
				first.expect(`[$#] `, 10*time.Second)
				first.send("exit\n")
				first.waitText("exit")
				finished(t, recs)
				os.RemoveAll(filepath.Join(recs.Dir(), "_anonymous"))
			}
			p := e.pty(url.Values{"cols": {"90"}, "rows": {"25"}})
			if p.texts[0]["recorded"] != true {
				t.Fatalf("hello %v: want recorded true", p.texts[0])
			}
			// Typed after the prompt: typed before it, the tty echoes the
			// line ahead of the prompt and readline draws it again after.
			p.expect(`[$#] `, 10*time.Second)
			p.send("echo rec-$((6*7))\n")
			p.expect(`rec-42\r\n`, 10*time.Second)
			p.control(`{"type":"resize","cols":100,"rows":30}`)
			p.send("stty size\n")
			p.expect(`30 100\r\n`, 10*time.Second)
			p.send("stty -echo; echo ready-$((1+2)); read -r secret; stty echo; echo got-${#secret}\n")
			p.expect(`ready-3\r\n`, 10*time.Second)
			p.send("hunter2\n")
			p.expect(`got-7\r\n`, 10*time.Second)
			p.send("exit\n")
			p.waitText("exit")

			in := finished(t, recs)
			path := filepath.Join(recs.Dir(), in.Dir, in.File)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			c, err := testkit.ParseCast(b)
			if err != nil {
				t.Fatal(err)
			}
			if c.Header["width"] != float64(90) || c.Header["height"] != float64(25) {
				t.Errorf("header %v: want 90x25", c.Header)
			}
			out := csi.ReplaceAllString(c.Output(), "")
			// From the first prompt on: the first line is that prompt and the command.
			for _, want := range []string{`^[^\n]*[$#] echo rec-\$\(\(6\*7\)\)\r\n\r?rec-42\r\n`, `got-7\r\n`, `exit\r\n`} {
				if !regexp.MustCompile(want).MatchString(out) {
					t.Errorf("recorded output does not match %q:\n%q", want, out)
				}
			}
			if strings.Contains(c.Output(), "hunter2") {
				t.Errorf("the recording has what was typed with echo off")
			}
			if rs := c.Of("r"); len(rs) != 1 || rs[0].Data != "100x30" {
				t.Errorf("resize events %v, want one 100x30", rs)
			}
			var named int
			for _, rec := range e.logs.Records("worker closed") {
				if rec["kind"] == "pty" && rec["sid"] == p.texts[0]["session_id"] {
					if rec["recording"] != path {
						t.Errorf("worker closed record %v: want recording=%s", rec, path)
					}
					named++
				}
			}
			if named != 1 {
				t.Errorf("%d worker closed records of the terminal, want 1", named)
			}
		})
	}
}

// stallFile is a recording's file whose writes block until release is
// closed: a disk that stopped answering.
type stallFile struct {
	*os.File
	release <-chan struct{}
}

func (f *stallFile) Write(p []byte) (int, error) {
	<-f.release
	return f.File.Write(p)
}

// TestTerminalRecordingStalledDiskStaysResponsive: while the recording's
// writes are stuck, the terminal streams 3 MB (46 times the recording's
// queue) to its client and answers the next command; the recording then
// says output is missing and one WARN record counts it.
func TestTerminalRecordingStalledDiskStaysResponsive(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var once sync.Once
	e, recs := recordedEnv(t, func(c *recordings.Config) {
		c.QueueBytes = 64 << 10
		c.Create = func(path string) (io.WriteCloser, error) {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return nil, err
			}
			return &stallFile{File: f, release: release}, nil
		}
	}, nil)
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the env's: its terminals then end
	p := e.pty(nil)
	p.send("head -c 3000000 /dev/zero | tr '\\0' x; echo; echo done-$((1+1))\n")
	p.expect(`done-2\r\n`, 15*time.Second)
	p.send("echo still-$((2+2))\n")
	p.expect(`still-4\r\n`, 10*time.Second)
	if n := strings.Count(p.output(), "x"); n < 3000000 {
		t.Fatalf("the client got %d of the 3000000 bytes", n)
	}

	once.Do(func() { close(release) })
	p.send("exit\n")
	p.waitText("exit")
	in := finished(t, recs)
	b, err := os.ReadFile(filepath.Join(recs.Dir(), in.Dir, in.File))
	if err != nil {
		t.Fatal(err)
	}
	c, err := testkit.ParseCast(b)
	if err != nil {
		t.Fatal(err)
	}
	if ms := c.Of("m"); len(ms) == 0 || !strings.Contains(ms[0].Data, "not recorded") {
		t.Fatalf("markers %v: want one saying output was not recorded", ms)
	}
	if n := strings.Count(c.Output(), "x"); n > 64<<10 {
		t.Fatalf("the recording has %d bytes of the flood, more than its queue", n)
	}
	recsW := e.logs.Records("recording truncated")
	if len(recsW) != 1 || recsW[0]["level"] != "WARN" {
		t.Fatalf("records %v: want one WARN recording truncated", recsW)
	}
	if d, _ := recsW[0].Int("dropped_bytes"); d < 2900000 {
		t.Fatalf("record %v: want about 3 MB dropped", recsW[0])
	}
}

// TestTerminalRecordingFullDisk: on a real file system that fills up (a
// 128 KiB tmpfs), the terminal streams 1 MB to its client and answers the
// next command; the recording ends at its last whole line, and one WARN
// record says why (no space left). Needs root (mount); skipped otherwise.
func TestTerminalRecordingFullDisk(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=128k,mode=0700"); err != nil {
		t.Skipf("mount a tmpfs (needs root): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	e, recs := recordedEnv(t, func(c *recordings.Config) { c.Dir = filepath.Join(dir, "recordings") }, nil)
	p := e.pty(nil)
	p.send("head -c 1000000 /dev/zero | tr '\\0' y; echo; echo done-$((1+1))\n")
	p.expect(`done-2\r\n`, 15*time.Second)
	p.send("echo still-$((2+2))\n")
	p.expect(`still-4\r\n`, 10*time.Second)
	p.send("exit\n")
	p.waitText("exit")
	in := finished(t, recs)
	b, err := os.ReadFile(filepath.Join(recs.Dir(), in.Dir, in.File))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testkit.ParseCast(b); err != nil {
		t.Fatalf("the recording on a full disk: %v", err)
	}
	w := e.logs.Records("recording truncated")
	if len(w) != 1 || !strings.Contains(w[0].Str("err"), "no space left") {
		t.Fatalf("records %v: want one WARN recording truncated saying no space left", w)
	}
}
