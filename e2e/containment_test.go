package e2e_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/internal/testkit"
)

// Containment (issue 16): every way out of a terminal or a worker a hostile
// user would try ends with its socket, in cgroup mode and in the fallback,
// and nothing survives dashgate's SIGTERM, or its kill -9 and the next
// start's sweep.

// requireCgroups skips the test, saying why, where cgroup v2 cannot be
// written (not root, no cgroup2 mount).
func requireCgroups(t *testing.T) {
	t.Helper()
	if why := cgroupProblem(); why != "" {
		t.Skip("cgroup mode cannot be tested here: " + why)
	}
}

// cgroupProblem says why this process cannot create cgroups under the
// cgroup2 mount, or "" when it can.
func cgroupProblem() string {
	mounts, err := procfs.GetMounts()
	if err != nil {
		return err.Error()
	}
	for _, m := range mounts {
		if m.FSType != "cgroup2" {
			continue
		}
		probe := filepath.Join(m.MountPoint, fmt.Sprintf("dashgate-e2e-probe-%d", os.Getpid()))
		if err := os.Mkdir(probe, 0o755); err != nil && !os.IsExist(err) {
			return fmt.Sprintf("%s is not writable: %v", m.MountPoint, err)
		}
		os.Remove(probe)
		return ""
	}
	return "no cgroup2 mount"
}

// terminalEscapes are typed into a terminal; the sleep's argument tags
// each one (base+i). The last one drops the terminal as well: only a cgroup
// finds it before dashgate's exit.
var terminalEscapes = []string{
	"setsid sleep %d &",
	"(setsid env -i /bin/sleep %d &)", // the repro: no group, session, parent or marker
	"( (sleep %d &) & )",              // double fork
	"nohup sleep %d >/dev/null 2>&1 &",
	"sleep %d & disown",
	`perl -e 'setpgrp(0, 0); exec "sleep", "%d"' &`, // changes its own process group
	`(trap '' HUP TERM; exec sleep %d) &`,           // ignores the polite signals
	`setsid sh -c "trap '' HUP TERM; exec env -i /bin/sleep %d" </dev/null >/dev/null 2>&1 &`,
}

// sleepers waits until a process runs `sleep <tag>` for every tag and
// returns their pids by tag.
func sleepers(t *testing.T, tags []int) map[int]int {
	t.Helper()
	found := map[int]int{}
	testkit.WaitFor(t, 15*time.Second, fmt.Sprintf("sleeps %v running", tags), func() bool {
		procs, _ := testkit.Procs()
		for _, p := range procs {
			cl, _ := testkit.Cmdline(p.PID)
			for _, tag := range tags {
				if cl == fmt.Sprintf("sleep %d", tag) || cl == fmt.Sprintf("/bin/sleep %d", tag) {
					found[tag] = p.PID
				}
			}
		}
		return len(found) == len(tags)
	})
	return found
}

func tagsFrom(base, n int) []int {
	tags := make([]int, n)
	for i := range tags {
		tags[i] = base + i
	}
	return tags
}

// TestTerminalEscapesEndWithTheTab: every escape typed in a terminal is gone
// within the grace after its socket closes, in both modes (in the fallback,
// all but the one that drops the terminal too: that one is gone at
// dashgate's SIGTERM, which the checking stop asserts); in cgroup mode
// /admin lists them from the terminal's cgroup and the one "worker closed"
// record names the cgroup and counts them.
func TestTerminalEscapesEndWithTheTab(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, mode string) {
		base := map[string]int{"on": 77100, "off": 77200}[mode]
		d := startDashgate(t, "--cgroup", mode)
		wantMode := map[string]string{"on": "cgroup", "off": "fallback"}[mode]
		if rec, ok := d.findLog(func(r logRecord) bool { return r.Msg() == "containment" }); !ok || rec.Str("mode") != wantMode {
			t.Errorf("containment record %v: want mode %s", rec, wantMode)
		}
		pty := openPTY(t, "pty", d.WSURL("ws/pty"), bearer())
		tags := tagsFrom(base, len(terminalEscapes))
		var line strings.Builder
		for i, e := range terminalEscapes {
			fmt.Fprintf(&line, e+"\r", tags[i])
		}
		if err := pty.write(websocket.MessageBinary, []byte(line.String())); err != nil {
			t.Fatal(err)
		}
		pids := sleepers(t, tags)
		starts := map[int]uint64{}
		for tag, pid := range pids {
			starts[tag] = d.remember(pid)
		}
		if mode == "on" {
			w := sessionWorker(t, d, pty.Hello.SessionID)
			if !strings.Contains(w.Cgroup, "/dashgate-"+d.ID+"/pty-") {
				t.Errorf("the terminal's cgroup is %q, want one under dashgate-%s", w.Cgroup, d.ID)
			}
			for tag, pid := range pids {
				if !slices.Contains(w.Children, pid) {
					t.Errorf("/admin does not list sleep %d (pid %d) among the terminal's processes %v", tag, pid, w.Children)
				}
			}
			page := adminPage(t, d)
			for _, want := range []string{`containment <b>cgroup</b>`, `title="` + w.Cgroup + `">cpu `} {
				if !strings.Contains(page, want) {
					t.Errorf("/admin does not show %q", want)
				}
			}
		}
		mark := d.logMark()

		pty.Close() // the tab goes

		claimed := len(pids)
		if mode == "off" {
			// Checked by the stop: it must not outlive dashgate.
			claimed--
			delete(pids, tags[claimed])
		}
		for tag, pid := range pids {
			if !gone(pid, starts[tag], 10*time.Second) {
				t.Errorf("sleep %d (pid %d, %s) outlived its terminal's socket", tag, pid, testkit.Describe(pid))
			}
		}
		rec, ok := d.waitLogSince(mark, 10*time.Second, func(r logRecord) bool {
			return r.Msg() == "worker closed" && r.Str("sid") == pty.Hello.SessionID
		})
		if !ok {
			t.Fatalf("no worker closed record for the terminal:\n%s", d.logText())
		}
		if n, _ := rec["descendants"].(float64); int(n) < claimed {
			t.Errorf("record %v: descendants %v, want at least %d", rec, rec["descendants"], claimed)
		}
		switch cg := rec.Str("cgroup"); {
		case mode == "on" && !strings.Contains(cg, "/dashgate-"+d.ID+"/pty-"):
			t.Errorf("record %v: want the terminal's cgroup", rec)
		case mode == "off" && cg != "":
			t.Errorf("record %v: a cgroup in the fallback", rec)
		}
	})
}

// TestWorkerEscapesEndWithTheSocket: a chat worker whose program starts
// escapes before it serves (their stdio dropped, so only a cgroup knows
// them) loses them with its socket in cgroup mode; in the fallback they are
// adopted and end at dashgate's SIGTERM at the latest (the checking stop).
func TestWorkerEscapesEndWithTheSocket(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, mode string) {
		base := map[string]int{"on": 77300, "off": 77400}[mode]
		tags := tagsFrom(base, 3)
		script := filepath.Join(t.TempDir(), "worker.sh")
		body := fmt.Sprintf(`#!/bin/sh
setsid env -i /bin/sleep %d </dev/null >/dev/null 2>&1 &
( setsid sh -c "trap '' HUP TERM; exec sleep %d" </dev/null >/dev/null 2>&1 & ) &
nohup sleep %d </dev/null >/dev/null 2>&1 &
exec %s worker
`, tags[0], tags[1], tags[2], dashgateBin)
		if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		d := startDashgate(t, "--cgroup", mode, "--worker-cmd", script)
		c := d.chat(t)
		sid := c.createSession("escapes")
		c.mustEcho(sid, "hello")
		pids := sleepers(t, tags)
		starts := map[int]uint64{}
		for tag, pid := range pids {
			starts[tag] = d.remember(pid)
		}
		mark := d.logMark()

		c.Close()

		rec, ok := d.waitLogSince(mark, 10*time.Second, func(r logRecord) bool {
			return r.Msg() == "worker closed" && r.Str("kind") == "chat"
		})
		if !ok {
			t.Fatalf("no worker closed record:\n%s", d.logText())
		}
		if mode == "off" {
			return // the checking stop fails the test if any survives dashgate
		}
		for tag, pid := range pids {
			if !gone(pid, starts[tag], 10*time.Second) {
				t.Errorf("sleep %d (pid %d) outlived its worker's socket", tag, pid)
			}
		}
		if rec.Str("reason") != "detach" || !strings.Contains(rec.Str("cgroup"), "/dashgate-"+d.ID+"/chat-") {
			t.Errorf("record %v: want reason detach and the worker's cgroup", rec)
		}
	})
}

// TestKillNineThenRestartSweepsCgroups: after kill -9, what escaped a
// terminal outlives dashgate (Pdeathsig ends only its children); the next
// start on the same state dir kills the dead instance's cgroup, logs each
// process, and removes the cgroup.
func TestKillNineThenRestartSweepsCgroups(t *testing.T) {
	t.Parallel()
	requireCgroups(t)
	state := t.TempDir()
	d := startOn(t, state, "--cgroup", "on")
	pty := openPTY(t, "pty", d.WSURL("ws/pty"), bearer())
	tags := tagsFrom(77500, 2)
	line := fmt.Sprintf("(setsid env -i /bin/sleep %d &)\r( (sleep %d &) & )\r", tags[0], tags[1])
	if err := pty.write(websocket.MessageBinary, []byte(line)); err != nil {
		t.Fatal(err)
	}
	pids := sleepers(t, tags)
	cgroup := sessionWorker(t, d, pty.Hello.SessionID).Cgroup
	d.kill()
	for tag, pid := range pids {
		if !alive(pid, d.startTime(pid)) {
			t.Fatalf("sleep %d died with dashgate; the test needs it to outlive a kill -9", tag)
		}
	}

	d2 := startOn(t, state, "--cgroup", "on")
	for tag, pid := range pids {
		// Since the kill -9 the sleeps are the test process's (the
		// subreaper's): their zombies are its to reap, here, not only by
		// another test's stop (run alone, this test waited for one).
		start := d.startTime(pid)
		if !testkit.Until(10*time.Second, func() bool { testkit.ReapChild(pid); return !present(pid, start) }) {
			t.Errorf("sleep %d (pid %d) survived the next start's sweep", tag, pid)
		}
		if _, ok := d2.findLog(func(r logRecord) bool {
			return r.Msg() == "worker closed" && r.Str("reason") == "startup_sweep" &&
				r["worker_pid"] == float64(pid) && r.Str("cgroup") == cgroup
		}); !ok {
			t.Errorf("no startup_sweep record for sleep %d in %s:\n%s", tag, cgroup, d2.logText())
		}
	}
	if _, err := os.Stat(filepath.Dir(cgroup)); !os.IsNotExist(err) {
		t.Errorf("the dead instance's cgroup %s is still there: %v", filepath.Dir(cgroup), err)
	}
}

// TestCgroupOnRefusesWithoutHierarchy: --cgroup on with a --cgroup-root
// outside any cgroup2 mount refuses to start, saying why.
func TestCgroupOnRefusesWithoutHierarchy(t *testing.T) {
	t.Parallel()
	refuse(t, "--cgroup on", "--state-dir", t.TempDir(), "--cgroup", "on", "--cgroup-root", t.TempDir())
}

// TestDelegatedCgroup: started in a cgroup delegated to it (systemd's
// Delegate=yes marks it with the trusted.delegate xattr), dashgate moves
// itself into the leaf <own>/gateway, as cgroup v2's rule for a cgroup with
// children wants, and puts its children under <own>/dashgate-<instance>.
func TestDelegatedCgroup(t *testing.T) {
	t.Parallel()
	requireCgroups(t)
	mounts, _ := procfs.GetMounts()
	var own string
	for _, m := range mounts {
		if m.FSType == "cgroup2" {
			own = filepath.Join(m.MountPoint, fmt.Sprintf("dashgate-e2e-delegated-%d", os.Getpid()))
			break
		}
	}
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, dir := range []string{filepath.Join(own, "gateway"), own} {
			if err := os.Remove(dir); err != nil && !os.IsNotExist(err) {
				t.Errorf("remove %s: %v", dir, err)
			}
		}
	})
	if err := unix.Setxattr(own, "trusted.delegate", []byte("1"), 0); err != nil {
		t.Skipf("cannot mark %s delegated as systemd does: %v", own, err)
	}
	fd, err := unix.Open(own, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	d := launch(t, testkit.Options{Sub: "serve", Args: []string{"--cgroup", "on", "--log-level", "debug", "--pty-cmd", "/bin/bash --noprofile --norc"},
		SysProcAttr: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}})

	rec, ok := d.findLog(func(r logRecord) bool { return r.Msg() == "containment" })
	want := filepath.Join(own, "dashgate-"+d.ID)
	if !ok || rec.Str("mode") != "cgroup" || rec["delegated"] != true || rec.Str("cgroup") != want {
		t.Fatalf("containment record %v: want mode cgroup, delegated, cgroup %s", rec, want)
	}
	if self := readCgroup(t, d.PID()); self != "/"+filepath.Base(own)+"/gateway" {
		t.Errorf("dashgate runs in %s, want %s/gateway", self, own)
	}
	pty := openPTY(t, "pty", d.WSURL("ws/pty"), bearer())
	w := sessionWorker(t, d, pty.Hello.SessionID)
	if !strings.HasPrefix(w.Cgroup, want+"/pty-") {
		t.Errorf("the terminal's cgroup is %s, want one under %s", w.Cgroup, want)
	}
	d.stop()
	if _, err := os.Stat(want); !os.IsNotExist(err) {
		t.Errorf("the instance's cgroup %s outlived dashgate: %v", want, err)
	}
}

// readCgroup is pid's cgroup v2 path (the "0::" line of /proc/<pid>/cgroup).
func readCgroup(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			return p
		}
	}
	t.Fatalf("no cgroup v2 line in %q", b)
	return ""
}

// removeInstanceCgroups removes the (empty) cgroups a killed dashgate left
// under the cgroup2 mount, leaves first; it fails the test if one still
// holds a process.
func removeInstanceCgroups(t *testing.T, instance string) {
	t.Helper()
	mounts, _ := procfs.GetMounts()
	for _, m := range mounts {
		if m.FSType != "cgroup2" {
			continue
		}
		dir := filepath.Join(m.MountPoint, "dashgate-"+instance)
		leaves, _ := filepath.Glob(filepath.Join(dir, "*-*"))
		for _, leaf := range append(leaves, dir) {
			if fi, err := os.Stat(leaf); err != nil || !fi.IsDir() {
				continue
			}
			// Busy while a killed process's last threads still exit: its
			// leader shows as a zombie before they are gone (CI saw EBUSY
			// just after every process of the killed dashgate was dead).
			var err error
			testkit.Until(5*time.Second, func() bool {
				err = os.Remove(leaf)
				return !errors.Is(err, syscall.EBUSY)
			})
			if err != nil {
				t.Errorf("the killed dashgate's cgroup %s: %v", leaf, err)
			}
		}
	}
}

// adminPage is the HTML of GET /admin.
func adminPage(t *testing.T, d *dashgate) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, d.URL("admin/"), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.Token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /admin: %d %v", res.StatusCode, err)
	}
	return string(b)
}

// bothModes runs f as a parallel subtest with --cgroup on (skipped where
// cgroup v2 cannot be written) and off.
func bothModes(t *testing.T, f func(t *testing.T, mode string)) {
	for _, mode := range []string{"on", "off"} {
		t.Run("cgroup "+mode, func(t *testing.T) {
			t.Parallel()
			if mode == "on" {
				requireCgroups(t)
			}
			f(t, mode)
		})
	}
}

// sessionWorker waits until /admin/api/workers lists a child of session sid
// and returns it (spare terminals of no session yet may be listed too).
func sessionWorker(t *testing.T, d *dashgate, sid string) apiWorker {
	t.Helper()
	var w apiWorker
	testkit.WaitFor(t, 10*time.Second, "the row of session "+sid, func() bool {
		for _, x := range d.Workers() {
			if x.SessionID == sid {
				w = x
				return true
			}
		}
		return false
	})
	return w
}
