package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/internal/testkit"
)

// The tests of issue 25: each dashgate user's terminal, chat worker and
// agent tools run as their own Unix account, in a cgroup per user. They make
// real accounts (useradd, as root) and remove them afterwards; dashgate runs
// as root with --unix-users and a users file whose names are the accounts'.
// None runs in parallel: accounts are machine-wide.

// alice's terminal, chat worker and approved tool run as her account: `id`
// shows her uid, gid and both groups; the environment is the account's
// (USER, LOGNAME, HOME, SHELL, cwd = home), none of dashgate's own; a file
// made in the terminal is hers; bob's home (0700) and bob's shell are out
// of her reach; the pty device is hers, group tty, mode 620; the shell is a
// login shell (argv0 -bash).
func TestUnixUsersIdentity(t *testing.T) {
	alice, bob := makeUnixUser(t, "alice"), makeUnixUser(t, "bob")
	m := newModelServer(t)
	u := startUnixUsers(t, []string{alice.Name, bob.Name},
		[]string{"E2E_MODEL_KEY=" + agentKey, "E2E_DASHGATE_OWN=not-for-children"},
		"--llm-url", m.URL+"/v1", "--llm-api-key-env", "E2E_MODEL_KEY", "--agent-tools", "shell")

	_, bobSid, bobPTY := u.terminal(t, bob.Name)
	bw, ok := u.Worker(bobSid, "pty")
	if !ok {
		t.Fatalf("no terminal row of bob's session %s: %+v", bobSid, u.Workers())
	}
	bobShell := bw.PID
	if uid, _, _ := procIDs(t, bobShell); uid != bob.UID {
		t.Fatalf("bob's shell %s runs as uid %d, want bob's %d", testkit.Describe(bobShell), uid, bob.UID)
	}

	aliceChat, aliceSid, pty := u.terminal(t, alice.Name)
	aw, ok := u.Worker(aliceSid, "pty")
	if !ok {
		t.Fatalf("no terminal row of alice's session %s: %+v", aliceSid, u.Workers())
	}
	wantGroups := slices.Sorted(slices.Values(alice.Groups))
	if uid, gid, groups := procIDs(t, aw.PID); uid != alice.UID || gid != alice.GID || !slices.Equal(groups, wantGroups) {
		t.Errorf("alice's shell runs as uid %d gid %d groups %v, want %d %d %v", uid, gid, groups, alice.UID, alice.GID, wantGroups)
	}
	if got := pty.out("ID:", `echo "ID:$(id)"`); got != alice.idLine() {
		t.Errorf("id in alice's terminal: %q, want %q", got, alice.idLine())
	}
	wantEnv := strings.Join([]string{alice.Name, alice.Name, alice.Home, "/bin/bash", alice.Home}, ":")
	if got := pty.out("ENV:", `echo "ENV:$USER:$LOGNAME:$HOME:$SHELL:$PWD"`); got != wantEnv {
		t.Errorf("USER:LOGNAME:HOME:SHELL:cwd in alice's terminal: %q, want %q", got, wantEnv)
	}
	if got := pty.out("OWN:", `echo "OWN:${E2E_DASHGATE_OWN:-unset}"`); got != "unset" {
		t.Errorf("dashgate's own environment reached alice's terminal: E2E_DASHGATE_OWN=%q", got)
	}
	if got := pty.out("ARG0:", `echo "ARG0:$0"`); got != "-bash" {
		t.Errorf("argv0 of alice's shell: %q, want -bash (a login shell)", got)
	}
	if got := pty.out("TTY:", `echo "TTY:$(stat -c '%U %G %a' "$(tty)")"`); got != alice.Name+" tty 620" {
		t.Errorf("alice's pty device: %q, want %q", got, alice.Name+" tty 620")
	}

	// A file made in the terminal is alice's.
	if got := pty.out("TOUCH:", `touch ~/made-in-terminal; echo "TOUCH:$?"`); got != "0" {
		t.Fatalf("touch ~/made-in-terminal: exit %s", got)
	}
	fi, err := os.Stat(filepath.Join(alice.Home, "made-in-terminal"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != alice.UID || st.Gid != alice.GID {
		t.Errorf("the file made in alice's terminal is owned by %d:%d, want %d:%d", st.Uid, st.Gid, alice.UID, alice.GID)
	}

	// bob's home (0700) and bob's shell are out of her reach.
	if got := pty.out("LS:", fmt.Sprintf(`echo "LS:$(ls %s 2>&1)"`, bob.Home)); !strings.Contains(got, "Permission denied") {
		t.Errorf("ls of bob's home in alice's terminal: %q, want Permission denied", got)
	}
	if got := pty.out("KILL:", fmt.Sprintf(`echo "KILL:$(kill -0 %d 2>&1)"`, bobShell)); !strings.Contains(got, "Operation not permitted") {
		t.Errorf("kill -0 of bob's shell %d in alice's terminal: %q, want Operation not permitted", bobShell, got)
	}
	if err := bobPTY.run("echo bob-$((6*7))", exactly("bob-42"), 10*time.Second); err != nil {
		t.Errorf("bob's shell after alice's kill: %v", err)
	}

	// Her chat worker (the agent) and the tool command she approves.
	m.then(toolCall(`echo "TOOLID:$(id)"; echo "TOOLENV:$USER:$HOME"`), reply("done"))
	aliceChat.mustCall("prompt.submit", map[string]any{"session_id": aliceSid, "text": "who am I?"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ev, err := aliceChat.WaitEvent(ctx, "approval.request", aliceSid)
	if err != nil {
		t.Fatal(err)
	}
	aliceChat.mustCall("approval.respond", map[string]any{"session_id": aliceSid, "request_id": ev.Payload()["request_id"], "choice": "once"}, nil)
	if _, err := aliceChat.WaitEvent(ctx, "message.complete", aliceSid); err != nil {
		t.Fatal(err)
	}
	cw, ok := u.Worker(aliceSid, "chat")
	if !ok {
		t.Fatalf("no chat worker row of alice's session: %+v", u.Workers())
	}
	if uid, gid, groups := procIDs(t, cw.PID); uid != alice.UID || gid != alice.GID || !slices.Equal(groups, wantGroups) {
		t.Errorf("alice's chat worker %s runs as uid %d gid %d groups %v, want %d %d %v", testkit.Describe(cw.PID), uid, gid, groups, alice.UID, alice.GID, wantGroups)
	}
	reqs := m.got()
	if len(reqs) != 2 {
		t.Fatalf("the model server got %d requests, want 2 (the prompt, the tool's result)", len(reqs))
	}
	result := fmt.Sprint(reqs[1].Messages)
	for _, want := range []string{"TOOLID:" + alice.idLine(), "TOOLENV:" + alice.Name + ":" + alice.Home} {
		if !strings.Contains(result, want) {
			t.Errorf("the tool's output does not hold %q: %s", want, result)
		}
	}
}

// As alice in her terminal: writing her shell's pid into the cgroup root's
// or the instance's cgroup.procs is refused and leaves her where she was;
// what she starts with setsid env -i or a double fork, or ignoring SIGHUP
// and SIGTERM, runs as her, in her terminal's cgroup, and dies when the
// terminal closes (no process of hers
// left). Meanwhile /admin/api/users shows her CPU time (and pids, with that
// controller) from her cgroup.
func TestUnixUsersEscape(t *testing.T) {
	requireCgroups(t)
	alice := makeUnixUser(t, "alice")
	u := startUnixUsers(t, []string{alice.Name}, nil)
	_, sid, pty := u.terminal(t, alice.Name)
	w := sessionWorker(t, u.dashgate, sid)
	if want := "/dashgate-" + u.ID + "/user-" + alice.Name + "/"; !strings.Contains(w.Cgroup, want) {
		t.Fatalf("alice's terminal cgroup is %q, want one under .../%s", w.Cgroup, want)
	}
	mount := cgroupMount()
	inCgroup := strings.TrimPrefix(w.Cgroup, mount)
	instance := filepath.Dir(filepath.Dir(w.Cgroup))
	for _, procs := range []string{filepath.Join(mount, "cgroup.procs"), filepath.Join(instance, "cgroup.procs")} {
		got := pty.out("MOVE:", fmt.Sprintf(`echo "MOVE:$( (echo $$ > %s) 2>&1 )"`, procs))
		if !strings.Contains(got, "Permission denied") {
			t.Errorf("alice's echo $$ > %s: %q, want Permission denied", procs, got)
		}
		if now := readCgroup(t, w.PID); now != inCgroup {
			t.Errorf("after alice's write to %s her shell is in %s, want %s", procs, now, inCgroup)
		}
	}

	// The last one ignores the polite signals: only cgroup.kill ends it.
	tags := tagsFrom(78100, 3)
	line := fmt.Sprintf("setsid env -i sleep %d &\r( ( sleep %d & ) & )\rsetsid env -i sh -c \"trap '' HUP TERM; exec sleep %d\" &\r", tags[0], tags[1], tags[2])
	if err := pty.write(websocket.MessageBinary, []byte(line)); err != nil {
		t.Fatal(err)
	}
	for tag, pid := range sleepers(t, tags) {
		u.remember(pid)
		if uid, _, _ := procIDs(t, pid); uid != alice.UID {
			t.Errorf("sleep %d runs as uid %d, want alice's %d", tag, uid, alice.UID)
		}
		if cg := readCgroup(t, pid); cg != inCgroup {
			t.Errorf("sleep %d is in cgroup %s, want her terminal's %s", tag, cg, inCgroup)
		}
	}
	// The admin sees her use, from her cgroup.
	var users struct {
		Users []struct {
			User          string  `json:"user"`
			CgroupCPUUsec *uint64 `json:"cgroup_cpu_usec"`
			CgroupPids    *int64  `json:"cgroup_pids"`
		} `json:"users"`
	}
	if err := u.getJSON("admin/api/users", &users); err != nil {
		t.Fatal(err)
	}
	var seen bool
	for _, r := range users.Users {
		if r.User != alice.Name {
			continue
		}
		seen = true
		if r.CgroupCPUUsec == nil || *r.CgroupCPUUsec == 0 {
			t.Errorf("/admin/api/users row of alice: cgroup_cpu_usec %s, want her cgroup's CPU time", deref(r.CgroupCPUUsec))
		}
		if pidsOn := slices.Contains(strings.Fields(readFile(t, filepath.Join(filepath.Dir(w.Cgroup), "cgroup.controllers"))), "pids"); pidsOn && (r.CgroupPids == nil || *r.CgroupPids < 4) {
			t.Errorf("/admin/api/users row of alice: cgroup_pids %s, want at least her shell and three sleeps", deref(r.CgroupPids))
		}
	}
	if !seen {
		t.Errorf("/admin/api/users has no row of alice: %+v", users.Users)
	}

	pty.Close()
	waitNoProcs(t, alice.Name, 15*time.Second)
}

// --user-pids-max 100: a fork bomb in alice's terminal hits her cgroup's
// limit, bob's terminal answers while it runs, and closing her terminal ends
// all of it. Needs the pids controller in the cgroup v2 hierarchy.
func TestUnixUsersForkBomb(t *testing.T) {
	requireController(t, "pids")
	alice, bob := makeUnixUser(t, "alice"), makeUnixUser(t, "bob")
	u := startUnixUsers(t, []string{alice.Name, bob.Name}, nil, "--user-pids-max", "100")
	_, aliceSid, alicePTY := u.terminal(t, alice.Name)
	_, _, bobPTY := u.terminal(t, bob.Name)
	userDir := filepath.Dir(sessionWorker(t, u.dashgate, aliceSid).Cgroup)
	if filepath.Base(userDir) != "user-"+alice.Name {
		t.Fatalf("alice's terminal is not in a cgroup of hers: %s", userDir)
	}
	// Never a fork bomb without its limit in place.
	if b, err := os.ReadFile(filepath.Join(userDir, "pids.max")); err != nil || strings.TrimSpace(string(b)) != "100" {
		t.Fatalf("%s/pids.max is %q (%v), want 100: no fork bomb without it", userDir, b, err)
	}

	if err := alicePTY.write(websocket.MessageBinary, []byte("bomb() { bomb | bomb & }; bomb\r")); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "alice's fork bomb hitting pids.max (pids.events max > 0)", func() bool {
		b, _ := os.ReadFile(filepath.Join(userDir, "pids.events"))
		n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(b)), "max")))
		return n > 0 // "max N": N forks refused
	})
	if err := bobPTY.run("echo bob-$((6*7))", exactly("bob-42"), 30*time.Second); err != nil {
		t.Errorf("bob's terminal during alice's fork bomb: %v", err)
	}
	if n := cgroupInt(t, filepath.Join(userDir, "pids.current")); n > 100 {
		t.Errorf("alice's cgroup holds %d pids, above her limit of 100", n)
	}
	alicePTY.Close()
	waitNoProcs(t, alice.Name, 30*time.Second)
	if err := bobPTY.run("echo bob-$((7*6))-after", exactly("bob-42-after"), 10*time.Second); err != nil {
		t.Errorf("bob's terminal after alice's closed: %v", err)
	}
}

// A dashgate user without a Unix account, one the map gives uid 0
// (without --allow-root-users) and one the map does not list are refused when their first child would
// start: the chat call fails with the reason and a notice says it in the
// chat, /ws/pty answers 403 with the reason, and no process carries their
// session's id. alice, mapped to her account, works beside them.
func TestUnixUsersRefused(t *testing.T) {
	alice := makeUnixUser(t, "alice")
	ghost := uniqueName("dgtnone")
	if _, err := user.Lookup(ghost); err == nil {
		t.Fatalf("an account %s exists", ghost)
	}
	mapFile := filepath.Join(t.TempDir(), "unix-users.map")
	lines := "# dashgateuser:unixuser\nmallory:root\n" + ghost + ":" + ghost + "\n" + alice.Name + ":" + alice.Name + "\n"
	if err := os.WriteFile(mapFile, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	u := startUnixUsers(t, []string{alice.Name, ghost, "mallory", "stranger"}, nil, "--unix-users-map", mapFile)
	base := strings.TrimSuffix(u.URL(""), "/")

	for _, c := range []struct {
		user string
		want []string // in the refusal
	}{
		{ghost, []string{`no Unix account for dashgate user "` + ghost + `"`}},
		{"mallory", []string{`dashgate user "mallory"`, "uid 0", "--allow-root-users"}},
		{"stranger", []string{`dashgate user "stranger"`, "--unix-users-map"}},
	} {
		t.Run(c.user, func(t *testing.T) {
			has := func(s string) bool {
				for _, w := range c.want {
					if !strings.Contains(s, w) {
						return false
					}
				}
				return true
			}
			chat := openChat(t, c.user+"'s chat", u.WSURL("ws/chat"), u.as(c.user))
			sid := chat.createSession(c.user + "'s session")
			_, err := chat.slash(sid, "/echo hi")
			var rpc *testkit.RPCError
			if !errors.As(err, &rpc) || !has(rpc.Message) {
				t.Errorf("%s's /echo: %v, want an error saying %q", c.user, err, c.want)
			}
			var notice string
			testkit.WaitFor(t, 10*time.Second, c.user+"'s notice in the chat", func() bool {
				for _, e := range resume(t, chat, sid).History {
					if e.Kind == "notice" && has(e.Text) {
						notice = e.Text
						return true
					}
				}
				return false
			})
			t.Logf("%s's notice: %s", c.user, notice)

			header := http.Header{"Authorization": {"Bearer " + u.tokens[c.user]}}
			for _, path := range []string{"/ws/pty?session_id=" + sid, "/ws/pty"} {
				if got := upgradeAnswer(t, base, path, header); !strings.HasPrefix(got, "403 ") || !has(got) {
					t.Errorf("%s's %s: %q, want 403 saying %q", c.user, path, got, c.want)
				}
			}
			if procs, _ := testkit.WithEnv("DASHGATE_SESSION_ID=" + sid); len(procs) > 0 {
				t.Errorf("processes of %s's refused session %s: %v", c.user, sid, procs)
			}
			for _, w := range u.Workers() {
				if w.SessionID == sid {
					t.Errorf("/admin lists a %s child of %s's refused session: %+v", w.Kind, c.user, w)
				}
			}
		})
	}

	// alice, beside them, works.
	chat, sid, pty := u.terminal(t, alice.Name)
	chat.mustEcho(sid, "alice works")
	if got := pty.out("UID:", `echo "UID:$(id -u)"`); got != strconv.Itoa(int(alice.UID)) {
		t.Errorf("alice's terminal runs as uid %s, want %d", got, alice.UID)
	}
}

// kill -9 of dashgate while alice and bob have terminals: what they left
// behind (setsid env -i) outlives it; the next start on the same state dir
// ends every process of theirs and removes their per-user cgroups.
func TestUnixUsersSweep(t *testing.T) {
	requireCgroups(t)
	alice, bob := makeUnixUser(t, "alice"), makeUnixUser(t, "bob")
	state := t.TempDir()
	u := startUnixUsers(t, []string{alice.Name, bob.Name}, nil, "--state-dir", state)
	var dirs []string
	pids := map[int]string{} // sleeper -> its user
	for i, a := range []unixAccount{alice, bob} {
		_, sid, pty := u.terminal(t, a.Name)
		tag := 78200 + i
		if err := pty.write(websocket.MessageBinary, []byte(fmt.Sprintf("(setsid env -i /bin/sleep %d &)\r", tag))); err != nil {
			t.Fatal(err)
		}
		pid := sleepers(t, []int{tag})[tag]
		pids[pid] = a.Name
		dir := filepath.Dir(sessionWorker(t, u.dashgate, sid).Cgroup)
		if filepath.Base(dir) != "user-"+a.Name {
			t.Fatalf("%s's terminal is not in a cgroup of theirs: %s", a.Name, dir)
		}
		dirs = append(dirs, dir)
	}
	u.kill()
	for pid, name := range pids {
		if !alive(pid, u.startTime(pid)) {
			t.Fatalf("%s's sleep died with dashgate; the test needs it to outlive a kill -9", name)
		}
	}

	u2 := startUnixUsers(t, []string{alice.Name, bob.Name}, nil, "--state-dir", state)
	for _, a := range []unixAccount{alice, bob} {
		waitNoProcs(t, a.Name, 15*time.Second)
	}
	for pid, name := range pids {
		if _, ok := u2.findLog(func(r logRecord) bool {
			return r.Msg() == "worker closed" && r.Str("reason") == "startup_sweep" && r["worker_pid"] == float64(pid)
		}); !ok {
			t.Errorf("no startup_sweep record of %s's sleep %d:\n%s", name, pid, u2.logText())
		}
	}
	for _, dir := range dirs {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the dead instance's per-user cgroup %s is still there after the sweep: %v", dir, err)
		}
	}
}

// The capabilities dashgate holds to start children as accounts never
// reach them: started as a dedicated non-root user holding exactly
// CAP_SETUID, CAP_SETGID, CAP_CHOWN and CAP_KILL, ambient, as
// deploy/systemd/dashgate-unix-users.service's dedicated-user variant gives
// them (setpriv in place of systemd), alice's shell has no capability in
// any set, and cannot become root.
func TestUnixUsersCapabilities(t *testing.T) {
	alice := makeUnixUser(t, "alice")
	svc := makeUnixUser(t, "svc")
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) not found")
	}
	// The service's directory: its own, as a StateDirectory would be.
	top, err := os.MkdirTemp("", "dashgate-e2e-svc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	dir := filepath.Join(top, "dashgate")
	for _, step := range []error{os.Chmod(top, 0o755), os.Mkdir(dir, 0o700), os.Chown(dir, int(svc.UID), int(svc.GID))} {
		if step != nil {
			t.Fatal(step)
		}
	}
	file := filepath.Join(dir, "users")
	_, token := userAdd(t, file, alice.Name, "http://127.0.0.1/")
	if err := os.Chown(file, int(svc.UID), int(svc.GID)); err != nil {
		t.Fatal(err)
	}
	const caps = "+setuid,+setgid,+chown,+kill"
	args := []string{
		"--reuid=" + svc.Name, "--regid=" + svc.Name, "--clear-groups",
		"--inh-caps=" + caps, "--ambient-caps=" + caps, "--bounding-set=-all," + caps, "--",
		testkit.ExecutableByAll(t, dashgateBin), "serve",
		"--addr", "127.0.0.1:0", "--state-dir", filepath.Join(dir, "state"), "--log-format", "json",
		"--log-level", "debug", "--worker-grace", workerGrace.String(),
		"--users-file", file, "--unix-users", "--cgroup", "auto",
	}
	// The token in the environment: --unix-users refuses one in argv.
	d := launchBin(t, testkit.Options{Bin: setpriv, Args: args, Exact: true, Token: testToken, Dir: dir,
		Env: append(testkit.CleanEnv(), "DASHGATE_TOKEN="+testToken)})
	d.secrets = append(d.secrets, token)
	if uid, _, _ := procIDs(t, d.PID()); uid != svc.UID {
		t.Fatalf("dashgate runs as uid %d, want the service account's %d", uid, svc.UID)
	}
	if got := capSets(t, d.PID()); got["CapAmb"] == 0 {
		t.Fatalf("dashgate holds no ambient capability (%v): the test starts it wrong", got)
	}

	c := openChat(t, "alice's chat", d.WSURL("ws/chat"), testkit.DialOptions{Token: token})
	sid := c.createSession("alice")
	pty := openPTY(t, "alice's terminal", d.WSURL("ws/pty?session_id="+sid), testkit.DialOptions{Token: token})
	w, ok := d.Worker(sid, "pty")
	if !ok {
		t.Fatalf("no terminal row of alice's session: %+v", d.Workers())
	}
	if uid, _, _ := procIDs(t, w.PID); uid != alice.UID {
		t.Fatalf("alice's shell runs as uid %d, want %d", uid, alice.UID)
	}
	for set, v := range capSets(t, w.PID) {
		if set != "CapBnd" && v != 0 {
			t.Errorf("alice's shell has %s %016x, want none", set, v)
		}
	}
	if got := pty.out("ROOT:", `echo "ROOT:$(perl -e '$< = $> = 0; print $> == 0 ? "became root" : "refused"')"`); got != "refused" {
		t.Errorf("setuid(0) in alice's shell: %q, want refused", got)
	}
	c.mustEcho(sid, "worker")
	cw, ok := d.Worker(sid, "chat")
	if !ok {
		t.Fatalf("no chat worker row of alice's session: %+v", d.Workers())
	}
	for set, v := range capSets(t, cw.PID) {
		if set != "CapBnd" && v != 0 {
			t.Errorf("alice's chat worker has %s %016x, want none", set, v)
		}
	}
}

// deploy/systemd/dashgate-unix-users.service: the unit of --unix-users
// runs dashgate as root, or as a user holding exactly the four
// capabilities, delegates its cgroup, stops as dashgate.service does, and
// its ExecStart line, run as it is (the binary, the state directory, the
// port and the users file substituted), starts a user's terminal as their
// account.
func TestSystemdUnixUsersUnit(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "systemd", "dashgate-unix-users.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := parseUnit(t, raw)
	for key, want := range map[string]string{"Delegate": "yes", "KillMode": "mixed", "StateDirectory": "dashgate"} {
		if got := unit.get("Service", key); got != want {
			t.Errorf("%s=%q, want %s", key, got, want)
		}
	}
	four := []string{"CAP_CHOWN", "CAP_KILL", "CAP_SETGID", "CAP_SETUID"}
	if u := unit.get("Service", "User"); u != "" && u != "root" {
		for _, key := range []string{"AmbientCapabilities", "CapabilityBoundingSet"} {
			if got := slices.Sorted(slices.Values(strings.Fields(unit.get("Service", key)))); !slices.Equal(got, four) {
				t.Errorf("User=%s with %s=%v, want exactly %v", u, key, got, four)
			}
		}
	}
	if unit.get("Service", "ProtectHome") != "" {
		t.Errorf("ProtectHome=%s: the users' programs need their homes", unit.get("Service", "ProtectHome"))
	}
	args := args0(t, unit)
	if args[0] != unitBinary {
		t.Fatalf("ExecStart runs %q, want %s", args[0], unitBinary)
	}
	if !slices.Contains(args, "--unix-users") {
		t.Errorf("ExecStart %v without --unix-users", args)
	}
	if v, _ := flagValue(args, "cgroup"); v != "on" {
		t.Errorf("ExecStart --cgroup %q, want on: containment holds against a user only in cgroup mode", v)
	}
	if _, ok := flagValue(args, "pty-cmd"); ok {
		t.Errorf("ExecStart has --pty-cmd: the terminal is the account's login shell without it")
	}
	// Every user has a shell here: only nginx's workers may reach dashgate.
	if v, _ := flagValue(args, "addr"); !strings.HasPrefix(v, "unix:/run/dashgate/") {
		t.Errorf("ExecStart --addr %q, want a Unix socket in /run/dashgate (RuntimeDirectory=dashgate)", v)
	}
	if v, _ := flagValue(args, "proxy-user"); v != "www-data" {
		t.Errorf("ExecStart --proxy-user %q, want www-data (Debian's nginx workers)", v)
	}
	if _, ok := flagValue(args, "trusted-proxies"); ok {
		t.Errorf("ExecStart trusts an address range: every local account connects from 127.0.0.1")
	}
	if got := unit.get("Service", "RuntimeDirectory"); got != "dashgate" {
		t.Errorf("RuntimeDirectory=%q, want dashgate (the socket's directory)", got)
	}
	stopSpan, err := parseTimeSpan(unit.get("Service", "TimeoutStopSec"))
	if err != nil {
		t.Fatalf("TimeoutStopSec: %v", err)
	}
	if stopSpan <= 10*time.Second+2*2*time.Second {
		t.Errorf("TimeoutStopSec=%v is not above --shutdown-timeout plus two --worker-grace", stopSpan)
	}

	t.Run("systemd-analyze verify", func(t *testing.T) {
		sa, err := exec.LookPath("systemd-analyze")
		if err != nil {
			t.Skip("systemd-analyze not found")
		}
		dir := t.TempDir()
		envFile := filepath.Join(dir, "env")
		if err := os.WriteFile(envFile, []byte("DASHGATE_TOKEN="+testToken+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		fixed := strings.ReplaceAll(string(raw), unitBinary, dashgateBin)
		fixed = regexp.MustCompile(`(?m)^EnvironmentFile=-?/.*$`).ReplaceAllString(fixed, "EnvironmentFile="+envFile)
		copyPath := filepath.Join(dir, "dashgate-unix-users.service")
		if err := os.WriteFile(copyPath, []byte(fixed), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(sa, "verify", copyPath)
		cmd.Env = append(testkit.CleanEnv(), "SYSTEMD_LOG_LEVEL=notice")
		out, err := cmd.CombinedOutput()
		var ours []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if strings.Contains(l, "dashgate-unix-users.service") {
				ours = append(ours, l)
			}
		}
		if err != nil || len(ours) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", copyPath, err, out)
		}
	})

	t.Run("ExecStart", func(t *testing.T) {
		alice := makeUnixUser(t, "alice")
		dir := t.TempDir()
		stateDir := filepath.Join(dir, "state")
		if err := os.Mkdir(stateDir, 0o700); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, "users")
		_, token := userAdd(t, file, alice.Name, "http://127.0.0.1/")
		run := append([]string(nil), args[1:]...)
		for i, a := range run {
			run[i] = strings.NewReplacer("${STATE_DIRECTORY}", stateDir, "$STATE_DIRECTORY", stateDir).Replace(a)
		}
		// Over TCP here, so that the test's clients reach it: without the
		// socket, --proxy-user has nothing to prove.
		run = setFlag(t, run, "addr", "127.0.0.1:0")
		if i := slices.Index(run, "--proxy-user"); i >= 0 {
			run = slices.Delete(run, i, i+2)
		}
		run = setFlag(t, run, "users-file", file)
		if why := cgroupProblem(); why != "" {
			t.Logf("--cgroup auto instead of on: %s", why)
			run = setFlag(t, run, "cgroup", "auto")
		}
		d := launchBin(t, testkit.Options{
			Bin: testkit.ExecutableByAll(t, dashgateBin), Dir: dir, Args: run, Exact: true, WorkDir: "/", Token: testToken,
			Env: []string{
				"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"STATE_DIRECTORY=" + stateDir, "DASHGATE_TOKEN=" + testToken, "LANG=C.UTF-8",
			},
		})
		d.secrets = append(d.secrets, token)
		base := "ws://" + d.Addr + "/dashgate/"
		c := openChat(t, "alice's chat", base+"ws/chat", testkit.DialOptions{Token: token})
		sid := c.createSession("unit")
		c.mustEcho(sid, "hi")
		pty := openPTY(t, "alice's terminal", base+"ws/pty?session_id="+sid, testkit.DialOptions{Token: token})
		if got := pty.out("WHO:", `echo "WHO:$(id -un):$0"`); got != alice.Name+":-bash" {
			t.Errorf("the unit's terminal: %q, want %s:-bash", got, alice.Name)
		}
	})
}

// A user whose Unix account is missing sees why in the terminal pane, not
// "could not start; retrying…" for ever (issue 42): the page asks
// terminal/refusal after the refused upgrade. Asked for another user's
// session, terminal/refusal answers as for an unknown one.
func TestUnixUsersRefusalInTerminalPane(t *testing.T) {
	alice := makeUnixUser(t, "alice")
	ghost := uniqueName("dgtnone")
	mapFile := filepath.Join(t.TempDir(), "unix-users.map")
	if err := os.WriteFile(mapFile, []byte(ghost+":"+ghost+"\n"+alice.Name+":"+alice.Name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u := startUnixUsers(t, []string{alice.Name, ghost}, nil, "--unix-users-map", mapFile)
	b := newBrowser(t)
	tb := b.newTab(t, ghost)
	tb.Do("open "+ghost+"'s dashboard", chromedp.Navigate(u.URL("/?token="+url.QueryEscape(u.tokens[ghost]))))
	tb.mustWaitJS(15*time.Second, "no session open", noSessionShown, dashboardState)
	startSession(tb)
	want := `no Unix account for dashgate user "` + ghost + `"`
	tb.mustWaitJS(20*time.Second, "the terminal pane says why it cannot start",
		visible(byTestID("terminal-status"))+` && document.querySelector('[data-testid="terminal-status-text"]').textContent.startsWith('The terminal cannot start: ') && document.querySelector('[data-testid="terminal-status-text"]').textContent.includes(`+js(want)+`)`,
		dashboardState)
	sid := currentSession(t, tb)

	// alice asks about ghost's session: 404, as for a session that does not exist.
	for _, id := range []string{sid, missingID()} {
		req, err := http.NewRequest(http.MethodGet, u.URL("/terminal/refusal?session_id="+id), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+u.tokens[alice.Name])
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound || strings.Contains(string(body), "Unix account") {
			t.Errorf("alice's terminal/refusal of %s: %s %q, want 404 saying nothing of it", id, res.Status, body)
		}
	}
}
