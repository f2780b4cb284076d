package workers

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/accounts"
	"github.com/dashgate/dashgate/internal/testkit"
)

// lookupAccount is the accounts.Account of a test's Unix account, as
// dashgate resolves it.
func lookupAccount(t *testing.T, u testkit.UnixAccount) *accounts.Account {
	t.Helper()
	m, err := accounts.New(accounts.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := m.Lookup(u.Name)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// statusIDs are the numbers of a /proc/<pid>/status line ("Uid:", "Gid:",
// "Groups:").
func statusIDs(t *testing.T, pid int, key string) []string {
	t.Helper()
	for line := range strings.Lines(readString(fmt.Sprintf("/proc/%d/status", pid))) {
		if k, v, ok := strings.Cut(line, ":"); ok && k == key {
			return strings.Fields(v)
		}
	}
	t.Fatalf("/proc/%d/status has no %s line", pid, key)
	return nil
}

// waitFile waits for path (written whole by a rename) and returns it.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	var b []byte
	testkit.WaitFor(t, 10*time.Second, filepath.Base(path)+" written", func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil
	})
	return string(b)
}

// accountScript reports, as the account it runs as, who it is, where, and
// what it may do to another account ($BH: bob's home, $BP: bob's child)
// and to the cgroup tree ($I: the instance's cgroup, $R: the cgroup2
// root), into $O/out (its home, named apart from $HOME); then it stays.
const accountScript = `{
id -u; id -g; id -G
echo "$HOME|$USER|$LOGNAME|$SHELL"
pwd
ls "$BH" >/dev/null 2>&1 && echo ls=ok || echo ls=refused
kill -0 "$BP" 2>/dev/null && echo kill=ok || echo kill=refused
{ echo $$ >"$I/cgroup.procs"; } 2>&1 && echo inst=moved || echo inst=refused
{ echo $$ >"$R/cgroup.procs"; } 2>&1 && echo root=moved || echo root=refused
touch made
} >"$O/out.tmp" 2>&1
mv "$O/out.tmp" "$O/out"
exec sleep 300`

// TestAccountChild: a chat child and a pty child started with alice's
// account run with her uid, gid and groups (a supplementary one
// included), her HOME/USER/LOGNAME/SHELL whatever the given environment
// said, in her home; they make files as her; they cannot read bob's 0700
// home, signal bob's child, or move themselves out of their cgroup (into
// the instance's or the root's); their leaf is under user-<alice>, which
// goes once her last child closed; a pty's slave is hers, group tty,
// mode 0620; the process table names her account.
func TestAccountChild(t *testing.T) {
	alice, bob := testkit.UnixUser(t, "alice"), testkit.UnixUser(t, "bob")
	_, sup := testkit.UnixGroup(t, alice.Name)
	aliceAcct, bobAcct := lookupAccount(t, alice), lookupAccount(t, bob)
	for _, kind := range []Kind{KindChat, KindPTY} {
		t.Run(string(kind), func(t *testing.T) {
			m, _, cg := newCgroupManager(t, CgroupOptions{})
			bp, err := m.Start(Spec{Kind: KindChat, SessionID: "s-bob", Path: "/bin/sleep", Args: []string{"300"}, Account: bobAcct})
			if err != nil {
				t.Fatal(err)
			}
			os.Remove(filepath.Join(alice.Home, "out"))
			p, err := m.Start(Spec{Kind: kind, SessionID: "s-alice", Path: "/bin/sh", Args: []string{"-c", accountScript}, Account: aliceAcct,
				Env: []string{"PATH=" + os.Getenv("PATH"), "HOME=/root", "USER=root", "LOGNAME=root", "SHELL=/bin/zsh",
					"O=" + alice.Home, "BH=" + bob.Home, "BP=" + strconv.Itoa(bp.PID()), "I=" + cg.Dir, "R=" + cg.Mount}})
			if err != nil {
				t.Fatal(err)
			}
			if p.PTY() != nil {
				defer p.PTY().Close()
			}
			out := strings.Split(strings.TrimSpace(waitFile(t, filepath.Join(alice.Home, "out"))), "\n")
			t.Logf("as alice:\n%s", strings.Join(out, "\n"))
			if len(out) < 9 {
				t.Fatalf("the script printed %q", out)
			}
			groups := strings.Fields(out[2])
			slices.Sort(groups)
			wantGroups := []string{strconv.Itoa(int(alice.GID)), strconv.Itoa(int(sup))}
			slices.Sort(wantGroups)
			for i, c := range []struct{ what, got, want string }{
				{"id -u", out[0], strconv.Itoa(int(alice.UID))},
				{"id -g", out[1], strconv.Itoa(int(alice.GID))},
				{"id -G", strings.Join(groups, " "), strings.Join(wantGroups, " ")},
				{"HOME|USER|LOGNAME|SHELL", out[3], alice.Home + "|" + alice.Name + "|" + alice.Name + "|/bin/bash"},
				{"cwd", out[4], alice.Home},
			} {
				if c.got != c.want {
					t.Errorf("%d. %s = %q, want %q", i, c.what, c.got, c.want)
				}
			}
			rest := strings.Join(out[5:], "\n")
			for _, want := range []string{"ls=refused", "kill=refused", "inst=refused", "root=refused"} {
				if !strings.Contains(rest, want) {
					t.Errorf("as alice: want %s in %q", want, rest)
				}
			}
			if strings.Count(rest, "Permission denied")+strings.Count(rest, "Operation not permitted") < 2 {
				t.Errorf("the cgroup moves failed, but not with EACCES or EPERM: %q", rest)
			}
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(alice.Home, "made"), &st); err != nil || st.Uid != alice.UID || st.Gid != alice.GID {
				t.Errorf("a file made as alice: %+v %v, want uid %d gid %d", st, err, alice.UID, alice.GID)
			}
			if testkit.Gone(bp.PID()) {
				t.Errorf("bob's child %d is gone", bp.PID())
			}
			aliceDir := filepath.Join(cg.Dir, UserPrefix+alice.Name)
			leaf := filepath.Join(aliceDir, string(kind)+"-"+p.marker)
			if own := readString(fmt.Sprintf("/proc/%d/cgroup", p.PID())); !strings.Contains(own, "0::"+strings.TrimPrefix(leaf, cg.Mount)+"\n") {
				t.Errorf("alice's child is in %q, want %s", own, leaf)
			}
			if kind == KindPTY {
				if err := unix.Stat(fmt.Sprintf("/proc/%d/fd/0", p.PID()), &st); err != nil {
					t.Fatal(err)
				}
				if st.Uid != alice.UID || int(st.Gid) != ttyGroup() || st.Mode&0o7777 != 0o620 || st.Mode&unix.S_IFMT != unix.S_IFCHR {
					t.Errorf("the pty slave is uid %d gid %d mode %o, want uid %d gid %d (tty) mode 0620", st.Uid, st.Gid, st.Mode, alice.UID, ttyGroup())
				}
			}
			rows := m.Table(t.Context())
			users := map[int]string{}
			for _, r := range rows {
				users[r.PID] = r.UnixUser
			}
			if users[p.PID()] != alice.Name || users[bp.PID()] != bob.Name {
				t.Errorf("table users %v: want %d=%s, %d=%s", users, p.PID(), alice.Name, bp.PID(), bob.Name)
			}

			p.Close(ReasonSessionClosed)
			if _, err := os.Stat(aliceDir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("alice's cgroup %s is still there after her last child closed: %v", aliceDir, err)
			}
			bobDir := filepath.Join(cg.Dir, UserPrefix+bob.Name)
			if _, err := os.Stat(bobDir); err != nil {
				t.Errorf("bob's cgroup went with alice's child: %v", err)
			}
			bp.Close(ReasonSessionClosed)
			if _, err := os.Stat(bobDir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("bob's cgroup %s is still there after his child closed: %v", bobDir, err)
			}
		})
	}
}

// TestAccountLoginShell: a LoginShell terminal runs the account's shell as
// a login shell (argv0 "-bash", the Spec's Args ignored) as the account,
// and what is typed into it runs as the account too.
func TestAccountLoginShell(t *testing.T) {
	t.Parallel()
	alice := testkit.UnixUser(t, "alice")
	_, sup := testkit.UnixGroup(t, alice.Name)
	m, _ := newTestManager(t, Config{})
	p, err := m.Start(Spec{Kind: KindPTY, SessionID: "s-login", Path: "/bin/sh", Args: []string{"-c", "exit 3"},
		Account: lookupAccount(t, alice), LoginShell: true, Env: []string{"PATH=/usr/bin:/bin", "TERM=dumb"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ReasonSessionClosed)
	defer p.PTY().Close()
	go func() { // drain the terminal's output
		buf := make([]byte, 4096)
		for {
			if _, err := p.PTY().Read(buf); err != nil {
				return
			}
		}
	}()
	// The exec is done when Start returns (os/exec's pipe closed on exec),
	// but the kernel writes the new program's arguments a moment after:
	// until then its cmdline reads empty.
	var cl string
	testkit.WaitFor(t, 5*time.Second, "the login shell's cmdline", func() bool {
		cl = readString(fmt.Sprintf("/proc/%d/cmdline", p.PID()))
		return cl != ""
	})
	if cl != "-bash\x00" {
		t.Errorf("cmdline %q, want \"-bash\\x00\"", cl)
	}
	uid := strconv.Itoa(int(alice.UID))
	if ids := statusIDs(t, p.PID(), "Uid"); !slices.Equal(ids, []string{uid, uid, uid, uid}) {
		t.Errorf("Uid: %v, want %s four times", ids, uid)
	}
	if gs := statusIDs(t, p.PID(), "Groups"); !slices.Contains(gs, strconv.Itoa(int(sup))) || !slices.Contains(gs, strconv.Itoa(int(alice.GID))) {
		t.Errorf("Groups: %v, want %d and %d", gs, alice.GID, sup)
	}
	if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", p.PID())); err != nil || cwd != alice.Home {
		t.Errorf("cwd %q %v, want %s", cwd, err, alice.Home)
	}
	if _, err := p.PTY().Write([]byte("id -un >~/who.tmp; mv ~/who.tmp ~/who\n")); err != nil {
		t.Fatal(err)
	}
	if who := strings.TrimSpace(waitFile(t, filepath.Join(alice.Home, "who"))); who != alice.Name {
		t.Errorf("id -un typed into the terminal says %q, want %s", who, alice.Name)
	}
}

// TestAccountWorkDir: a child of an account starts in the Spec's Dir when
// the account may enter it, else in its home when it may, else in "/",
// by the owner, group and other search bits of every directory on the
// way; and it starts there (the chdir runs after setuid: a directory it
// cannot enter would fail the start).
func TestAccountWorkDir(t *testing.T) {
	t.Parallel()
	alice, bob := testkit.UnixUser(t, "alice"), testkit.UnixUser(t, "bob")
	grp, sup := testkit.UnixGroup(t, alice.Name)
	a := lookupAccount(t, alice)
	base, err := os.MkdirTemp("", "dashgate-workdir-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	mk := func(name string, mode os.FileMode, gid int) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, 0, gid); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, mode)
		return d
	}
	open := mk("open", 0o711, 0)
	byGroup := mk("group-"+grp, 0o710, int(sup))
	closed := mk("closed", 0o700, 0)
	under := filepath.Join(closed, "inner")
	os.Mkdir(under, 0o777)
	os.Chmod(under, 0o777)
	noHome := *a
	noHome.Home = filepath.Join(closed, "home")
	for _, tc := range []struct {
		name, dir string
		acct      *accounts.Account
		want      string
	}{
		{"no dir: home", "", a, alice.Home},
		{"an open dir", open, a, open},
		{"a dir open to a supplementary group", byGroup, a, byGroup},
		{"bob's home: hers", bob.Home, a, alice.Home},
		{"an open dir under a closed one: home", under, a, alice.Home},
		{"a missing dir: home", filepath.Join(base, "missing"), a, alice.Home},
		{"no way into the home: /", "", &noHome, "/"},
		{"closed dir, no way home: /", closed, &noHome, "/"},
	} {
		if got := workDir(tc.dir, tc.acct); got != tc.want {
			t.Errorf("%s: workDir(%q) = %q, want %q", tc.name, tc.dir, got, tc.want)
		}
	}
	m, _ := newTestManager(t, Config{})
	for _, tc := range []struct {
		dir  string
		acct *accounts.Account
		want string
	}{{byGroup, a, byGroup}, {"", &noHome, "/"}} {
		p, err := m.Start(Spec{Kind: KindChat, SessionID: "s-dir", Path: "/bin/sleep", Args: []string{"300"}, Dir: tc.dir, Account: tc.acct})
		if err != nil {
			t.Fatalf("start in %q: %v", tc.dir, err)
		}
		if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", p.PID())); err != nil || cwd != tc.want {
			t.Errorf("cwd %q %v, want %s", cwd, err, tc.want)
		}
		p.Close(ReasonSessionClosed)
	}
}

// Environment of the as-account helper.
const (
	accountUIDEnv = "DASHGATE_TEST_UID"
	accountGIDEnv = "DASHGATE_TEST_GID"
)

// accountHelper is a dashgate in small that starts one child as the
// account of DASHGATE_TEST_UID/GID, writes its pid to the pid file and
// waits to be killed.
func accountHelper() int {
	uid, err1 := strconv.ParseUint(os.Getenv(accountUIDEnv), 10, 32)
	gid, err2 := strconv.ParseUint(os.Getenv(accountGIDEnv), 10, 32)
	if err1 != nil || err2 != nil {
		return 30
	}
	m := NewManager(Config{Grace: testGrace})
	p, err := m.Start(Spec{Kind: KindChat, SessionID: "s-pdeathsig", Path: "/bin/sleep", Args: []string{"300"},
		Account: &accounts.Account{Name: "x", UID: uint32(uid), GID: uint32(gid), Groups: []uint32{uint32(gid)}, Home: "/", Shell: "/bin/sh"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 31
	}
	if err := writeFileAtomic(os.Getenv(pidFileEnv), strconv.Itoa(p.PID())); err != nil {
		return 32
	}
	blockForever()
	return 0
}

// TestAccountPdeathsig: a child started as another account still gets
// Pdeathsig (the kernel clears it on a credential change; Go arms it
// after setuid): when the dashgate that started it is killed with
// SIGKILL, the child dies too.
func TestAccountPdeathsig(t *testing.T) {
	t.Parallel()
	alice := testkit.UnixUser(t, "alice")
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := exec.Command(helperPath(t))
	cmd.Env = append(helperEnviron(), helperEnv+"=as-account", pidFileEnv+"="+pidFile,
		accountUIDEnv+"="+strconv.Itoa(int(alice.UID)), accountGIDEnv+"="+strconv.Itoa(int(alice.GID)))
	cmd.Stderr = os.Stderr
	reaped := startChild(t, cmd)
	child := readPidFile(t, pidFile)
	killOnCleanup(t, child)
	uid := strconv.Itoa(int(alice.UID))
	if ids := statusIDs(t, child, "Uid"); !slices.Equal(ids, []string{uid, uid, uid, uid}) {
		t.Fatalf("the child's Uid: %v, want %s", ids, uid)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-reaped
	testkit.WaitFor(t, 10*time.Second, "alice's child to die with its dashgate", func() bool { return testkit.Gone(child) })
}

// TestUserCgroupSweep: the startup sweep finds a crashed instance's
// children in its accounts' cgroups (dashgate-<id>/user-<name>/<leaf>),
// ends them, logs each, and removes the tree bottom up.
func TestUserCgroupSweep(t *testing.T) {
	t.Parallel()
	alice := testkit.UnixUser(t, "alice")
	root := testCgroupRoot(t)
	state := t.TempDir()
	self, err := AcquireInstance(state)
	if err != nil {
		t.Fatal(err)
	}
	defer self.Release()
	dead, err := AcquireInstance(state)
	if err != nil {
		t.Fatal(err)
	}
	dead.f.Close() // crashed: its lock is free, its file stays
	leaf := filepath.Join(root, InstancePrefix+dead.ID, UserPrefix+alice.Name, "pty-"+newMarker())
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := cgroupAt(leaf).open()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sleep", "300")
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: fd,
		Credential: &syscall.Credential{Uid: alice.UID, Gid: alice.GID}}
	startChild(t, cmd)
	unix.Close(fd)

	log, lb := testkit.NewLogger()
	res, err := Sweep(state, self.ID, testGrace, &Cgroups{Base: root}, log)
	if err != nil {
		t.Fatal(err)
	}
	if res.Instances != 1 || res.Processes != 1 {
		t.Errorf("sweep %+v: want 1 dead instance, 1 process", res)
	}
	waitVanished(t, 5*time.Second, cmd.Process.Pid)
	if _, err := os.Stat(filepath.Join(root, InstancePrefix+dead.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead instance's cgroup is still there: %v", err)
	}
	recs := lb.Records("worker closed")
	if len(recs) != 1 || recs[0]["worker_pid"] != float64(cmd.Process.Pid) || recs[0]["reason"] != "startup_sweep" || recs[0]["cgroup"] != leaf {
		t.Errorf("records %v: want one worker closed for %d, reason startup_sweep, cgroup %s", recs, cmd.Process.Pid, leaf)
	}
}

// TestUserCgroupLimits: --user-memory-max, --user-pids-max and
// --user-cpu-max are written to the account's cgroup when the hierarchy
// has the controller; without it the limit is listed as unapplied, with
// its flag, and the test skips naming the controller.
func TestUserCgroupLimits(t *testing.T) {
	alice := testkit.UnixUser(t, "alice")
	a := lookupAccount(t, alice)
	for _, tc := range []struct {
		ctl, flag, file, want string
		opts                  CgroupOptions
	}{
		{"memory", "--user-memory-max", "memory.max", "67108864", CgroupOptions{UserMemoryMax: 64 << 20}},
		{"pids", "--user-pids-max", "pids.max", "50", CgroupOptions{UserPidsMax: 50}},
		{"cpu", "--user-cpu-max", "cpu.max", "150000 100000", CgroupOptions{UserCPUMax: "150000 100000"}},
	} {
		t.Run(tc.ctl, func(t *testing.T) {
			m, _, cg := newCgroupManager(t, tc.opts)
			if !slices.Contains(cg.Controllers, tc.ctl) {
				if !slices.Contains(cg.Missing, tc.ctl) || !slices.Contains(cg.Unapplied, Unapplied{Controller: tc.ctl, Flag: tc.flag}) {
					t.Fatalf("no %s controller, but Missing %v and Unapplied %v do not say so for %s", tc.ctl, cg.Missing, cg.Unapplied, tc.flag)
				}
				t.Skipf("the %s controller is not available in cgroup v2 here (cgroup.controllers of %s: %q; on a hybrid host it is bound to cgroup v1): %s not tested",
					tc.ctl, cg.Base, strings.TrimSpace(readString(filepath.Join(cg.Base, "cgroup.controllers"))), tc.flag)
			}
			p, err := m.Start(Spec{Kind: KindChat, SessionID: "s-limit", Path: "/bin/sleep", Args: []string{"300"}, Account: a})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(ReasonSessionClosed)
			got := strings.TrimSpace(readString(filepath.Join(cg.Dir, UserPrefix+alice.Name, tc.file)))
			if got != tc.want {
				t.Errorf("%s of alice's cgroup = %q, want %q", tc.file, got, tc.want)
			}
		})
	}
}

// TestParseCPUMax: --user-cpu-max's percentage of one core as cpu.max.
func TestParseCPUMax(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"200%", "200000 100000"}, {"50%", "50000 100000"}, {"12.5%", "12500 100000"}, {"0.1%", "1000 100000"}, {"", ""},
		{"200", "error"}, {"-5%", "error"}, {"x%", "error"}, {"0%", "error"},
	} {
		got, err := ParseCPUMax(tc.in)
		if err != nil {
			got = "error"
		}
		if got != tc.want {
			t.Errorf("ParseCPUMax(%q) = %q (%v), want %q", tc.in, got, err, tc.want)
		}
	}
}

// TestUserCgroupStats: UserStats reads the account's cgroup, the sum of
// its children (CPU time once it used some; memory and pids -1 without
// their controllers, with the reason, not a 0 that reads as measured),
// and says false once the last child closed.
func TestUserCgroupStats(t *testing.T) {
	t.Parallel()
	alice := testkit.UnixUser(t, "alice")
	m, _, cg := newCgroupManager(t, CgroupOptions{})
	if _, ok := cg.UserStats(alice.Name); ok {
		t.Fatal("UserStats of an account without children says ok")
	}
	p, err := m.Start(Spec{Kind: KindChat, SessionID: "s-stats", Path: "/bin/sh", Account: lookupAccount(t, alice),
		Args: []string{"-c", `i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; exec sleep 300`}})
	if err != nil {
		t.Fatal(err)
	}
	var s UserCgroupStats
	testkit.WaitFor(t, 10*time.Second, "alice's cgroup to show CPU time", func() bool {
		var ok bool
		s, ok = cg.UserStats(alice.Name)
		return ok && s.CPUUsec > 0
	})
	for _, f := range []struct {
		ctl      string
		v, least int64
		why      string
	}{
		{"pids", s.Pids, 1, s.PidsUnmeasured},
		{"memory", s.MemoryBytes, 1, s.MemoryUnmeasured},
	} {
		if slices.Contains(cg.Controllers, f.ctl) {
			if f.v < f.least || f.why != "" {
				t.Errorf("%s %d (unmeasured: %q) with controllers %v", f.ctl, f.v, f.why, cg.Controllers)
			}
		} else if f.v != -1 || !strings.Contains(f.why, "no "+f.ctl+" controller") && !strings.Contains(f.why, "the "+f.ctl+" controller") {
			t.Errorf("%s %d (unmeasured: %q) without its controller (controllers %v): want -1 and why", f.ctl, f.v, f.why, cg.Controllers)
		}
	}
	p.Close(ReasonSessionClosed)
	if _, ok := cg.UserStats(alice.Name); ok {
		t.Error("UserStats says ok after the account's last child closed")
	}
}

// TestUserCgroupConcurrent: children of one account starting and closing
// at once never find their account's cgroup removed under them (Start
// never fails), and the last close removes it.
func TestUserCgroupConcurrent(t *testing.T) {
	t.Parallel()
	alice := testkit.UnixUser(t, "alice")
	a := lookupAccount(t, alice)
	m, _, cg := newCgroupManager(t, CgroupOptions{})
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for range 4 {
				p, err := m.Start(Spec{Kind: KindChat, SessionID: "s-churn", Path: "/bin/true", Account: a})
				if err != nil {
					t.Errorf("start: %v", err)
					return
				}
				p.Close(ReasonSessionClosed)
			}
		})
	}
	wg.Wait()
	if _, err := os.Stat(filepath.Join(cg.Dir, UserPrefix+alice.Name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("alice's cgroup is still there after her children closed: %v", err)
	}
}

// TestUserCgroupClose: Cgroups.Close at exit ends what still runs in an
// account's cgroup (user-<name>/<leaf>) and removes the tree bottom up.
// The process is none of a Manager's, so only Close can end it.
func TestUserCgroupClose(t *testing.T) {
	t.Parallel()
	alice := testkit.UnixUser(t, "alice")
	_, _, cg := newCgroupManager(t, CgroupOptions{})
	leaf := filepath.Join(cg.Dir, UserPrefix+alice.Name, "chat-"+newMarker())
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := cgroupAt(leaf).open()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: fd,
		Credential: &syscall.Credential{Uid: alice.UID, Gid: alice.GID}}
	startChild(t, cmd)
	unix.Close(fd)
	if err := cg.Close(); err != nil {
		t.Fatalf("Cgroups.Close: %v", err)
	}
	testkit.WaitFor(t, 5*time.Second, "alice's process ended by Close", func() bool { return testkit.Gone(cmd.Process.Pid) })
	if _, err := os.Stat(cg.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the instance's cgroup %s is still there: %v", cg.Dir, err)
	}
}
