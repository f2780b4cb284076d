package testkit

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	VerifyNoLeaks(m) // no ignores of its own: every child and goroutine is waited for
}

// startSleep starts `sleep 300` (through a symlink named name, which is its
// comm) in its own process group with env, and kills and reaps it at the end.
func startSleep(t *testing.T, name string, env ...string) *exec.Cmd {
	t.Helper()
	bin := "/bin/sleep"
	if name != "" {
		bin = filepath.Join(t.TempDir(), name)
		if err := os.Symlink("/bin/sleep", bin); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "300")
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func pids(ps []Proc) []int {
	var out []int
	for _, p := range ps {
		out = append(out, p.PID)
	}
	return out
}

// A child's life as the kit sees it: running, then a zombie (Gone, not
// Reaped, listed by ZombieChildren), then reaped (no /proc entry).
func TestProcLifecycle(t *testing.T) {
	mark := "DASHGATE_TESTKIT_MARK=" + t.Name()
	cmd := startSleep(t, "", mark)
	pid := cmd.Process.Pid
	self := os.Getpid()
	sid, err := unix.Getsid(0)
	if err != nil {
		t.Fatal(err)
	}

	p, err := ReadProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	// sleep has exec'd once its comm reads "sleep" and its arguments are
	// set up (exec sets comm first, the argument pages a moment later)
	WaitFor(t, 5*time.Second, "sleep exec'd", func() bool {
		p, err = ReadProc(pid)
		cl, _ := Cmdline(pid)
		return err == nil && p.Comm == "sleep" && cl != ""
	})
	want := Proc{PID: pid, PPID: self, PGID: pid, SID: sid, State: p.State, Start: p.Start, Comm: "sleep"}
	if p.flags = 0; p != want || !strings.ContainsRune("RS", rune(p.State)) || p.Start == 0 {
		t.Errorf("ReadProc = %+v, want %+v in state R or S", p, want)
	}
	if Gone(pid) || Reaped(pid) || p.Dead() {
		t.Errorf("a sleeping child is reported gone (Gone %v, Reaped %v, Dead %v)", Gone(pid), Reaped(pid), p.Dead())
	}
	if cl, err := Cmdline(pid); err != nil || cl != "/bin/sleep 300" {
		t.Errorf("Cmdline = %q, %v", cl, err)
	}
	// just after exec the new image may have no resident page yet
	WaitFor(t, 5*time.Second, "ReadUsage reports an RSS", func() bool { u, err := ReadUsage(pid); return err == nil && u.RSSBytes > 0 })
	desc, err := Descendants(self)
	if err != nil || !slices.Contains(pids(desc), pid) {
		t.Errorf("Descendants(self) = %v, %v: no %d", pids(desc), err, pid)
	}
	if d, _ := Descendants(pid); len(d) != 0 {
		t.Errorf("Descendants of a leaf = %v", pids(d))
	}
	if got, err := WithEnv(mark); err != nil || !slices.Equal(pids(got), []int{pid}) {
		t.Errorf("WithEnv(%s) = %v, %v, want [%d]", mark, pids(got), err, pid)
	}
	if got, _ := WithEnv(mark + "x"); len(got) != 0 {
		t.Errorf("WithEnv matched a prefix: %v", pids(got))
	}

	// Killed, not yet waited for: a zombie.
	if err := cmd.Process.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, 5*time.Second, "the child is gone", func() bool { return Gone(pid) })
	WaitFor(t, 5*time.Second, "the child is a zombie", func() bool { p, err = ReadProc(pid); return err == nil && p.Dead() })
	if Reaped(pid) {
		t.Errorf("a zombie counts as reaped")
	}
	if zs, err := ZombieChildren(self); err != nil || !slices.Contains(pids(zs), pid) {
		t.Errorf("ZombieChildren(self) = %v, %v: no %d", pids(zs), err, pid)
	}
	if got, _ := WithEnv(mark); len(got) != 0 {
		t.Errorf("WithEnv lists a zombie: %v", pids(got))
	}

	cmd.Wait()
	if !Reaped(pid) || !Gone(pid) {
		t.Errorf("a reaped child: Reaped %v, Gone %v", Reaped(pid), Gone(pid))
	}
	if _, err := ReadProc(pid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadProc of a reaped pid: %v, want fs.ErrNotExist", err)
	}
}

// ReadProc counts fields from the last ')' of /proc/<pid>/stat, so a comm
// holding spaces and parentheses does not shift them.
func TestReadProcOddComm(t *testing.T) {
	for _, name := range []string{"a) b (c", ") R 1 1 1 (", "x))", "plain"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := startSleep(t, name)
			pid := cmd.Process.Pid
			var p Proc
			WaitFor(t, 5*time.Second, "exec'd", func() bool {
				var err error
				p, err = ReadProc(pid)
				return err == nil && p.Comm == name
			})
			if p.PPID != os.Getpid() || p.PGID != pid || p.Dead() {
				t.Errorf("ReadProc = %+v", p)
			}
		})
	}
}

// ReapZombieChildren reaps a zombie child by pid, but not one marked Own.
func TestReapZombieChildren(t *testing.T) {
	a, b := startSleep(t, ""), startSleep(t, "")
	Own(b.Process.Pid)
	defer Disown(b.Process.Pid)
	for _, c := range []*exec.Cmd{a, b} {
		c.Process.Kill()
		WaitFor(t, 5*time.Second, "zombie", func() bool { p, err := ReadProc(c.Process.Pid); return err == nil && p.Dead() })
	}
	if got := ReapZombieChildren(); !slices.Equal(got, []int{a.Process.Pid}) {
		t.Errorf("ReapZombieChildren = %v, want [%d]", got, a.Process.Pid)
	}
	if !Reaped(a.Process.Pid) || Reaped(b.Process.Pid) {
		t.Errorf("reaped: a %v (want true), owned b %v (want false)", Reaped(a.Process.Pid), Reaped(b.Process.Pid))
	}
}

func TestPoll(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel()
	calls := 0
	start := time.Now()
	if err := Poll(ctx, func() bool { calls++; return false }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Poll of a false condition = %v", err)
	}
	// backoff 1, 2, 4, 8, 16, 20 ms: a few calls, not hundreds
	if el := time.Since(start); calls < 3 || calls > 10 || el < 20*time.Millisecond {
		t.Errorf("%d calls in %v", calls, el)
	}
	n := 0
	if err := Poll(t.Context(), func() bool { n++; return n == 3 }); err != nil || n != 3 {
		t.Errorf("Poll = %v after %d calls", err, n)
	}
	boom := errors.New("boom")
	if err := PollErr(t.Context(), func() (bool, error) { return false, boom }); err != boom {
		t.Errorf("PollErr = %v", err)
	}
}

func TestLogBuffer(t *testing.T) {
	t.Parallel()
	log, lb := NewLogger()
	log.Debug("a", "n", 3, "s", "x")
	log.Info("b")
	log.Info("a", "n", 4)
	recs := lb.Records("a")
	if len(recs) != 2 || len(lb.Records("")) != 3 || recs[0].Str("level") != "DEBUG" {
		t.Fatalf("records %v", lb.Records(""))
	}
	if n, ok := recs[1].Int("n"); !ok || n != 4 {
		t.Errorf("Int(n) = %d, %v", n, ok)
	}
	if _, ok := recs[0].Int("s"); ok || recs[0].Str("s") != "x" || recs[0].Str("n") != "" {
		t.Errorf("Int of a string or Str of a number: %v", recs[0])
	}
	mark := lb.Mark()
	done := make(chan struct{})
	go func() { defer close(done); log.Info("a", "n", 5) }()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	r, err := lb.WaitRecord(ctx, mark, func(r Record) bool { return r.Msg() == "a" })
	<-done
	if n, _ := r.Int("n"); err != nil || n != 5 {
		t.Errorf("WaitRecord after the mark = %v, %v", r, err)
	}
	short, cancel2 := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel2()
	if _, err := lb.WaitRecord(short, lb.Mark(), func(Record) bool { return true }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitRecord with nothing new = %v", err)
	}

	// The same records through a file, with a half-written last line.
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte(lb.String()+`{"msg":"half`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := (LogFile{path}).Records("a"); len(got) != 3 {
		t.Errorf("LogFile.Records(a) = %v", got)
	}
}
