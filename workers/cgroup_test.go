package workers

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/internal/testkit"
)

// testCgroupRoot makes a cgroup directory of the test's own under the
// cgroup2 mount, for --cgroup-root, and removes it (and what is left in it)
// at cleanup. It skips the test, saying why, where cgroup v2 cannot be
// written.
func testCgroupRoot(t *testing.T) string {
	t.Helper()
	mount, err := cgroup2Mount()
	if err != nil {
		t.Skipf("cgroup mode cannot be tested here: %v", err)
	}
	root := filepath.Join(mount, "dashgate-test-"+newMarker())
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Skipf("cgroup mode cannot be tested here: cgroup v2 at %s is not writable: %v", mount, err)
	}
	t.Cleanup(func() {
		if err := removeTree(root, 5*time.Second); err != nil {
			t.Errorf("test cgroup root: %v", err)
		}
	})
	return root
}

// newCgroupManager is newTestManager in cgroup mode, its instance's cgroup
// under a test root; opts' Mode, Root and Instance are filled in.
func newCgroupManager(t *testing.T, opts CgroupOptions) (*Manager, *testkit.LogBuffer, *Cgroups) {
	t.Helper()
	opts.Mode, opts.Root, opts.Instance = CgroupOn, testCgroupRoot(t), newMarker()
	cg, err := SetupCgroups(opts)
	if err != nil {
		t.Fatalf("SetupCgroups: %v", err)
	}
	t.Cleanup(func() {
		if err := cg.Close(); err != nil {
			t.Errorf("Cgroups.Close: %v", err)
		}
	})
	m, lb := newTestManager(t, Config{Instance: opts.Instance, Cgroups: cg})
	return m, lb, cg
}

// escapes are the ways out of a child's process group, terminal session,
// parent chain and marker, as a hostile user would type them; each writes
// its escaped process's pid to <dir>/<name>. Every one drops its stdio, so
// only the cgroup still knows whose it is. The one that ignores signals
// publishes its own pid once its trap is set (a close before that would
// end it with SIGHUP, and the test would see no kill).
var escapes = []struct{ name, script string }{
	{"setsid-env-i", `setsid env -i /bin/sleep 300 </dev/null >/dev/null 2>&1 & printf %s $! >"$D/setsid-env-i.tmp"`},
	{"double-fork", `( sleep 300 </dev/null >/dev/null 2>&1 & printf %s $! >"$D/double-fork.tmp" ) & DF=$!`},
	{"nohup", `nohup sleep 300 </dev/null >/dev/null 2>&1 & printf %s $! >"$D/nohup.tmp"`},
	{"own-group", `perl -e 'setpgrp(0, 0); exec "sleep", "300"' </dev/null >/dev/null 2>&1 & printf %s $! >"$D/own-group.tmp"`},
	{"ignores-hup-term", `setsid sh -c 'trap "" HUP TERM; printf %s $$ >"$D/ignores-hup-term.tmp"; mv "$D/ignores-hup-term.tmp" "$D/ignores-hup-term"; exec env -i /bin/sleep 300' </dev/null >/dev/null 2>&1 &`},
}

// escapeScript runs every escape, publishes the pid files, then stays as
// the leader until it is ended.
func escapeScript() string {
	var b strings.Builder
	b.WriteString("unset " + EnvWorkerID + "\n")
	for _, e := range escapes {
		b.WriteString(e.script + "\n")
	}
	b.WriteString("wait $DF\n") // the double fork's subshell has written its file
	for _, e := range escapes {
		if !strings.Contains(e.script, "mv ") {
			fmt.Fprintf(&b, "mv \"$D/%s.tmp\" \"$D/%s\"\n", e.name, e.name)
		}
	}
	b.WriteString("exec sleep 300\n")
	return b.String()
}

// TestCgroupCloseEndsEveryEscape: in cgroup mode a child's tree is its
// cgroup, whatever its members did to leave the process group, session,
// parent chain and marker, and ignoring SIGHUP and SIGTERM does not help:
// Close ends them all with cgroup.kill, removes the cgroup, and its record
// names the cgroup and counts the members.
func TestCgroupCloseEndsEveryEscape(t *testing.T) {
	// Not parallel: it runs a reaper (see startReaper).
	for _, kind := range []Kind{KindChat, KindPTY} {
		t.Run(string(kind), func(t *testing.T) {
			m, lb, cg := newCgroupManager(t, CgroupOptions{})
			startReaper(t, m)
			d := t.TempDir()
			spec := Spec{Kind: kind, SessionID: "s-escape", Path: "/bin/sh", Args: []string{"-c", escapeScript()},
				Env: []string{"D=" + d, "PATH=" + os.Getenv("PATH")}}
			p, err := m.Start(spec)
			if err != nil {
				t.Fatal(err)
			}
			if p.PTY() != nil {
				t.Cleanup(func() { p.PTY().Close() })
			}
			pids := map[string]int{}
			for _, e := range escapes {
				pids[e.name] = readPidFile(t, filepath.Join(d, e.name))
				killOnCleanup(t, pids[e.name])
			}
			leaf := filepath.Join(cg.Dir, string(kind)+"-"+p.marker)
			members := p.Descendants()
			for name, pid := range pids {
				if !slices.Contains(members, pid) {
					t.Errorf("%s: pid %d not among the cgroup's members %v", name, pid, members)
				}
				if own := readString(fmt.Sprintf("/proc/%d/cgroup", pid)); !strings.Contains(own, strings.TrimPrefix(leaf, cg.Mount)) {
					t.Errorf("%s: pid %d is in %q, want %s", name, pid, own, leaf)
				}
			}

			res := p.Close(ReasonSessionClosed)

			for name, pid := range pids {
				if !testkit.Gone(pid) {
					t.Errorf("%s: pid %d alive after Close", name, pid)
				}
			}
			if res.Cgroup != leaf || res.Escalation != EscalationKill || res.Descendants < len(pids) {
				t.Errorf("result %+v: want cgroup %s, escalation kill, descendants >= %d", res, leaf, len(pids))
			}
			if _, err := os.Stat(leaf); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the child's cgroup %s is still there after Close: %v", leaf, err)
			}
			rec := oneCloseRecord(t, lb)
			if rec["cgroup"] != leaf || rec["descendants"] != float64(res.Descendants) {
				t.Errorf("record %v: want cgroup=%s descendants=%d", rec, leaf, res.Descendants)
			}
		})
	}
}

// leavers move themselves out of the child's cgroup into the cgroup2
// root's, as root may, and are orphaned to the test process (a subreaper,
// as dashgate is); each publishes its pid (in <dir>/<name>) once it left.
// One keeps the marker and drops its stdio; the other drops the marker
// (env -i) but keeps the child's terminal or pipes, and ignores SIGHUP and
// SIGTERM.
var leavers = []struct{ name, script string }{
	{"marker", `( setsid sh -c 'echo $$ >"$R/cgroup.procs" && printf %s $$ >"$D/marker.tmp" && mv "$D/marker.tmp" "$D/marker" && exec sleep 300' </dev/null >/dev/null 2>&1 & )`},
	{"stdio", `( setsid sh -c 'trap "" HUP TERM; echo $$ >"$R/cgroup.procs" && printf %s $$ >"$D/stdio.tmp" && mv "$D/stdio.tmp" "$D/stdio" && exec env -i /bin/sleep 300' & )`},
}

// TestCgroupCloseEndsWhatLeftTheCgroup: a root process can leave any
// cgroup, so in cgroup mode Close also ends what the fallback claims
// outside the cgroup: a process that moved itself to the cgroup2 root and
// was adopted is ended at its child's Close, found by its marker, or by
// the terminal or pipes it holds, and killed when it ignores the polite
// signals.
func TestCgroupCloseEndsWhatLeftTheCgroup(t *testing.T) {
	// Not parallel: it runs a reaper (see startReaper).
	for _, kind := range []Kind{KindChat, KindPTY} {
		t.Run(string(kind), func(t *testing.T) {
			m, lb, cg := newCgroupManager(t, CgroupOptions{})
			startReaper(t, m)
			d := t.TempDir()
			var script strings.Builder
			for _, l := range leavers {
				script.WriteString(l.script + "\n")
			}
			script.WriteString("exec sleep 300\n")
			p, err := m.Start(Spec{Kind: kind, SessionID: "s-leave", Path: "/bin/sh", Args: []string{"-c", script.String()},
				Env: []string{"D=" + d, "R=" + cg.Mount, "PATH=" + os.Getenv("PATH")}})
			if err != nil {
				t.Fatal(err)
			}
			if p.PTY() != nil {
				t.Cleanup(func() { p.PTY().Close() })
			}
			pids := map[string]int{}
			for _, l := range leavers {
				pid := readPidFile(t, filepath.Join(d, l.name))
				killOnCleanup(t, pid)
				pids[l.name] = pid
				testkit.WaitFor(t, 10*time.Second, l.name+" adopted, its program started", func() bool {
					st, ok := readStat(pid)
					return ok && st.ppid == os.Getpid() && (l.name != "stdio" || environValue(pid, EnvWorkerID) == "")
				})
				if own := readString(fmt.Sprintf("/proc/%d/cgroup", pid)); !slices.Contains(strings.Split(own, "\n"), "0::/") {
					t.Fatalf("%s: pid %d is in %q, want the cgroup v2 root 0::/", l.name, pid, own)
				}
			}

			res := p.Close(ReasonSessionClosed)

			for name, pid := range pids {
				if !testkit.Gone(pid) {
					t.Errorf("%s: pid %d, out of the cgroup, alive after Close", name, pid)
				}
			}
			if res.Escalation != EscalationKill || res.Descendants < len(pids) {
				t.Errorf("result %+v: want escalation kill, descendants >= %d", res, len(pids))
			}
			if rec := oneCloseRecord(t, lb); rec["descendants"] != float64(res.Descendants) {
				t.Errorf("record %v: want descendants=%d", rec, res.Descendants)
			}
		})
	}
}

// TestCgroupChildStartsInside: a child runs in its own cgroup from its first
// instruction (clone3 with CLONE_INTO_CGROUP): a program that reads its own
// cgroup as the first thing it does finds the leaf, not dashgate's cgroup.
func TestCgroupChildStartsInside(t *testing.T) {
	t.Parallel()
	m, _, cg := newCgroupManager(t, CgroupOptions{})
	p, err := m.Start(Spec{Kind: KindPTY, SessionID: "s-inside", Path: "/bin/cat", Args: []string{"/proc/self/cgroup"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ReasonSessionClosed)
	defer p.PTY().Close()
	var out []byte
	buf := make([]byte, 4096)
	for !strings.Contains(string(out), "\n") {
		n, err := p.PTY().Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			break
		}
	}
	want := "0::" + strings.TrimPrefix(filepath.Join(cg.Dir, "pty-"+p.marker), cg.Mount)
	if !strings.Contains(string(out), want) {
		t.Fatalf("the child read its cgroup as %q, want %s", out, want)
	}
}

// TestCgroupTableFromCgroup: the process table lists a child's members from
// its cgroup (a member with no marker, in a session of its own, is there)
// with the cgroup's CPU time.
func TestCgroupTableFromCgroup(t *testing.T) {
	t.Parallel()
	m, _, _ := newCgroupManager(t, CgroupOptions{})
	d := t.TempDir()
	p, err := m.Start(Spec{Kind: KindChat, SessionID: "s-table", Path: "/bin/sh", Env: []string{"PATH=" + os.Getenv("PATH")},
		Args: []string{"-c", `env -i setsid /bin/sleep 300 </dev/null >/dev/null 2>&1 & printf %s $! >"$0.tmp"; mv "$0.tmp" "$0"; exec sleep 300`, filepath.Join(d, "pid")}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ReasonSessionClosed)
	escaped := readPidFile(t, filepath.Join(d, "pid"))
	killOnCleanup(t, escaped)
	rows := m.Table(t.Context())
	if len(rows) != 1 || rows[0].Cgroup != p.cg.dir || !slices.Contains(rows[0].Descendants, escaped) || rows[0].CgroupStats.CPUUsec < 0 {
		t.Fatalf("table %+v: want one row with cgroup %s, the escaped %d among its descendants, and cpu usage", rows, p.cg.dir, escaped)
	}
	if slices.Contains(unownedPIDs(m), escaped) {
		t.Errorf("the cgroup member %d is listed as unowned: %v", escaped, unownedPIDs(m))
	}
}

// TestCgroupSweep: the startup sweep kills and removes the cgroup of an
// instance whose lock is free, logging each process it ended, and leaves a
// live instance's cgroup and processes alone.
func TestCgroupSweep(t *testing.T) {
	t.Parallel()
	root := testCgroupRoot(t)
	state := t.TempDir()
	self, err := AcquireInstance(state)
	if err != nil {
		t.Fatal(err)
	}
	defer self.Release()
	live, err := AcquireInstance(state) // another dashgate on the same state dir
	if err != nil {
		t.Fatal(err)
	}
	defer live.Release()
	dead, err := AcquireInstance(state)
	if err != nil {
		t.Fatal(err)
	}
	deadID := dead.ID
	dead.f.Close() // crashed: its lock is free, its file stays

	// A process in each instance's cgroup, the dead one's without a marker
	// or an instance variable: only its cgroup says whose it is.
	inCgroup := func(instance string) (int, string) {
		leaf := filepath.Join(root, InstancePrefix+instance, "pty-"+newMarker())
		if err := os.MkdirAll(leaf, 0o755); err != nil {
			t.Fatal(err)
		}
		fd, err := cgroupAt(leaf).open()
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		cmd := exec.Command("/bin/sleep", "300")
		cmd.Env = []string{}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: fd}
		startChild(t, cmd)
		return cmd.Process.Pid, leaf
	}
	deadPid, deadLeaf := inCgroup(deadID)
	livePid, liveLeaf := inCgroup(live.ID)

	log, lb := testkit.NewLogger()
	res, err := Sweep(state, self.ID, testGrace, &Cgroups{Base: root}, log)
	if err != nil {
		t.Fatal(err)
	}
	if res.Instances != 1 || res.Processes != 1 {
		t.Errorf("sweep %+v: want 1 dead instance, 1 process", res)
	}
	waitVanished(t, 5*time.Second, deadPid)
	if _, err := os.Stat(filepath.Dir(deadLeaf)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead instance's cgroup is still there: %v", err)
	}
	if testkit.Gone(livePid) {
		t.Errorf("the live instance's process %d was ended", livePid)
	}
	if !cgroupAt(liveLeaf).populated() {
		t.Errorf("the live instance's cgroup %s is empty or gone", liveLeaf)
	}
	recs := lb.Records("worker closed")
	if len(recs) != 1 || recs[0]["worker_pid"] != float64(deadPid) || recs[0]["reason"] != "startup_sweep" || recs[0]["cgroup"] != deadLeaf {
		t.Errorf("records %v: want one worker closed for %d, reason startup_sweep, cgroup %s", recs, deadPid, deadLeaf)
	}
}

// TestCgroupPidsMax: with --child-pids-max a fork bomb fills its own cgroup
// and no more: another child still starts and runs, and Close ends the
// bomb. It needs the pids controller in the cgroup v2 hierarchy.
func TestCgroupPidsMax(t *testing.T) {
	t.Parallel()
	m, _, cg := newCgroupManager(t, CgroupOptions{PidsMax: 32})
	if slices.Contains(cg.Missing, "pids") {
		t.Skipf("the pids controller is not available in cgroup v2 here (cgroup.controllers of %s: %q; on a hybrid host it is bound to cgroup v1)",
			cg.Base, strings.TrimSpace(readString(filepath.Join(cg.Base, "cgroup.controllers"))))
	}
	bomb, err := m.Start(Spec{Kind: KindChat, SessionID: "s-bomb", Path: "/bin/sh",
		Args: []string{"-c", `b() { b | b & }; b; exec sleep 300`}, Env: []string{"PATH=" + os.Getenv("PATH")}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the bomb at its limit", func() bool {
		return strings.TrimSpace(readString(filepath.Join(bomb.cg.dir, "pids.current"))) == "32"
	})
	other, err := m.Start(Spec{Kind: KindPTY, SessionID: "s-other", Path: "/bin/echo", Args: []string{"still here"}})
	if err != nil {
		t.Fatalf("another child could not start beside the bomb: %v", err)
	}
	defer other.PTY().Close()
	buf := make([]byte, 256)
	if n, _ := other.PTY().Read(buf); !strings.Contains(string(buf[:n]), "still here") {
		t.Errorf("the other child printed %q", buf[:n])
	}
	other.Close(ReasonSessionClosed)
	res := bomb.Close(ReasonSessionClosed)
	if bomb.cg.populated() || res.Escalation == EscalationNone {
		t.Errorf("bomb close %+v: its cgroup is not empty", res)
	}
}
