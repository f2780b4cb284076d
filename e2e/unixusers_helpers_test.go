package e2e_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/dashgate/dashgate/internal/testkit"
)

// The helpers of the Unix account tests (issue 25).

// unixAccount is a real Unix account made for one test (makeUnixUser).
type unixAccount struct {
	testkit.UnixAccount
	Groups   []int  // every group of the account, as `id -G` prints them: the primary one first
	Extra    string // the name of its extra supplementary group
	ExtraGID int
}

// makeUnixUser makes a real account (testkit.UnixUser: bash, a 0700
// home, removed at the end of the test with every process of it) in an
// extra supplementary group of its own (testkit.UnixGroup). Registered
// before the dashgate of the test, the removal runs after its checking
// stop. It skips the test unless it runs as root (fails with
// DASHGATE_E2E=1).
func makeUnixUser(t *testing.T, label string) unixAccount {
	t.Helper()
	a := unixAccount{UnixAccount: testkit.UnixUser(t, label)}
	name, gid := testkit.UnixGroup(t, a.Name)
	a.Extra, a.ExtraGID = name, int(gid)
	a.Groups = []int{int(a.GID), a.ExtraGID}
	return a
}

// idLine is what `id` prints for a.
func (a unixAccount) idLine() string {
	return fmt.Sprintf("uid=%d(%s) gid=%d(%s) groups=%d(%s),%d(%s)", a.UID, a.Name, a.GID, a.Name, a.GID, a.Name, a.ExtraGID, a.Extra)
}

// uniqueName is prefix and 8 random hex digits: a name no other test (nor
// an earlier run) uses.
func uniqueName(prefix string) string {
	var b [4]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// pgrepUser is `pgrep -u name`: the pids of name's processes (none: an
// empty list, pgrep's exit 1).
func pgrepUser(t *testing.T, name string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "pgrep", "-u", name).Output()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		t.Fatalf("pgrep -u %s: %v", name, err)
	}
	return strings.Fields(string(out))
}

// waitNoProcs waits until account name has no process left (pgrep -u)
// and fails the test naming those still there. It reaps the test process's
// zombie children: call it only when no exec.Cmd of the test waits for a
// child it did not Own (the suite's tests that call it are not parallel).
func waitNoProcs(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	var left []string
	if testkit.Until(timeout, func() bool {
		// What a killed dashgate left is reparented to the test process
		// (a subreaper): pgrep lists its zombies until they are reaped.
		testkit.ReapZombieChildren()
		left = pgrepUser(t, name)
		return len(left) == 0
	}) {
		return
	}
	var desc []string
	for _, s := range left {
		pid, _ := strconv.Atoi(s)
		desc = append(desc, testkit.Describe(pid))
	}
	t.Errorf("processes of %s still running %v later: %s", name, timeout, strings.Join(desc, ", "))
}

// procIDs is the real uid, gid and supplementary groups of pid
// (/proc/<pid>/status).
func procIDs(t *testing.T, pid int) (uid, gid uint32, groups []int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		f := strings.Fields(v)
		switch k {
		case "Uid":
			n, _ := strconv.ParseUint(f[0], 10, 32)
			uid = uint32(n)
		case "Gid":
			n, _ := strconv.ParseUint(f[0], 10, 32)
			gid = uint32(n)
		case "Groups":
			for _, g := range f {
				n, _ := strconv.Atoi(g)
				groups = append(groups, n)
			}
		}
	}
	slices.Sort(groups)
	return uid, gid, groups
}

// unixUsers is a dashgate started as root with --unix-users and a users
// file, and the tokens of its users by dashgate user name.
type unixUsers struct {
	*dashgate
	tokens map[string]string
}

// startUnixUsers starts dashgate as root (from a path every account can
// run: it starts its workers, `dashgate worker` and `dashgate agent`, from
// its own path as the account)
// with --users-file holding names (each added with `dashgate user add`),
// --unix-users, --cgroup on (where cgroup v2 can be written; else auto),
// and extra flags last. No --pty-cmd: the terminal is the account's login
// shell. env is added to the environment.
func startUnixUsers(t *testing.T, names []string, env []string, extra ...string) *unixUsers {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "users")
	u := &unixUsers{tokens: map[string]string{}}
	for _, n := range names {
		_, u.tokens[n] = userAdd(t, file, n, "http://127.0.0.1/")
	}
	cgroup := "on"
	if why := cgroupProblem(); why != "" {
		t.Logf("--cgroup auto instead of on: %s", why)
		cgroup = "auto"
	}
	o := testkit.Options{Sub: "serve", Bin: testkit.ExecutableByAll(t, dashgateBin), Token: testToken, Dir: t.TempDir(),
		Env: append(testkit.CleanEnv(), env...),
		Args: append([]string{
			"--worker-grace", workerGrace.String(), "--log-level", "debug",
			"--users-file", file, "--unix-users", "--cgroup", cgroup,
		}, extra...)}
	d := launchBin(t, o)
	for _, tok := range u.tokens {
		d.secrets = append(d.secrets, tok)
	}
	u.dashgate = d
	return u
}

// launchBin is launch for o.Bin (launch always runs the suite's own
// binary, which other accounts cannot run) with o.Token and o.Dir given.
func launchBin(t *testing.T, o testkit.Options) *dashgate {
	t.Helper()
	clearArtifacts(t)
	d := &dashgate{t: t, seen: map[int]uint64{}, secrets: secretsOf(o)}
	d.Instance = testkit.StartT(t, o)
	t.Cleanup(d.stop)
	return d
}

// as is how user's client authenticates (their users-file token).
func (u *unixUsers) as(user string) testkit.DialOptions {
	return testkit.DialOptions{Token: u.tokens[user]}
}

// terminal opens a chat session of user and its terminal (no keepalive:
// it ends with its socket).
func (u *unixUsers) terminal(t *testing.T, user string) (*chatConn, string, *ptyConn) {
	t.Helper()
	c := openChat(t, user+"'s chat", u.WSURL("ws/chat"), u.as(user))
	sid := c.createSession(user + "'s session")
	p := openPTY(t, user+"'s terminal", u.WSURL("ws/pty?session_id="+sid), u.as(user))
	return c, sid, p
}

// out runs line in the terminal and returns the first output line that
// starts with tag (the line must print tag first: the shell's echo of the
// command starts with the prompt, so it never matches).
func (c *ptyConn) out(tag, line string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), 20*time.Second)
	defer cancel()
	got, err := c.Run(ctx, line, regexp.MustCompile(`^`+regexp.QuoteMeta(tag)))
	if err != nil {
		c.t.Fatalf("%s: %v", c.name, err)
	}
	return strings.TrimPrefix(got, tag)
}

// cgroupMount is the cgroup2 mount point (/proc/self/mountinfo), "" when
// there is none.
func cgroupMount() string {
	mounts, err := procfs.GetMounts()
	if err != nil {
		return ""
	}
	for _, m := range mounts {
		if m.FSType == "cgroup2" {
			return m.MountPoint
		}
	}
	return ""
}

// requireController skips the test, naming the controller, when the
// cgroup2 hierarchy cannot limit with it (it is not in the mount's
// cgroup.controllers: on a hybrid host it is bound to cgroup v1).
func requireController(t *testing.T, name string) {
	t.Helper()
	requireCgroups(t)
	mnt := cgroupMount()
	b, err := os.ReadFile(filepath.Join(mnt, "cgroup.controllers"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Fields(string(b)), name) {
		t.Skipf("the %s controller is not in the cgroup v2 hierarchy at %s (cgroup.controllers: %q; bound to cgroup v1 on this host): the per-user %s limit cannot be tested",
			name, mnt, strings.TrimSpace(string(b)), name)
	}
}

// cgroupInt reads a cgroup file holding one number (pids.current).
func cgroupInt(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}

// capSets is the capability sets of pid (/proc/<pid>/status: CapInh,
// CapPrm, CapEff, CapBnd, CapAmb) as bit masks.
func capSets(t *testing.T, pid int) map[string]uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(line, ":")
		if strings.HasPrefix(k, "Cap") {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("/proc/%d/status %s: %v", pid, k, err)
			}
			out[k] = n
		}
	}
	return out
}

// readFile is the content of path ("" when it cannot be read).
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, _ := os.ReadFile(path)
	return string(b)
}

// deref is *p for messages, "absent" for nil.
func deref[T any](p *T) string {
	if p == nil {
		return "absent"
	}
	return fmt.Sprint(*p)
}
