package workers

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/accounts"
)

// Containment by cgroup v2 (docs/containment.md). Every child starts inside
// a cgroup of its own, <base>/dashgate-<instance>/<kind>-<marker>, created
// before the fork and entered by clone3(CLONE_INTO_CGROUP), so no process of
// its tree ever runs outside it, whatever it does with sessions, process
// groups, parents or its environment. Closing signals the members listed in
// cgroup.procs, ends with cgroup.kill, and takes "populated 0" in
// cgroup.events, waited for on the members' pidfds, as the proof that the
// tree is gone.

// CgroupMode is the --cgroup flag.
type CgroupMode string

const (
	CgroupAuto CgroupMode = "auto" // cgroups when a writable v2 hierarchy is found, else the fallback
	CgroupOn   CgroupMode = "on"   // cgroups or refuse to start
	CgroupOff  CgroupMode = "off"  // the fallback: process group, session, parent chain, marker
)

// ParseCgroupMode parses auto, on or off.
func ParseCgroupMode(s string) (CgroupMode, error) {
	switch m := CgroupMode(s); m {
	case CgroupAuto, CgroupOn, CgroupOff:
		return m, nil
	}
	return "", fmt.Errorf("--cgroup %q: want auto, on or off", s)
}

// CgroupOptions configures SetupCgroups.
type CgroupOptions struct {
	Mode     CgroupMode
	Root     string // --cgroup-root: the directory to create dashgate-<instance> in; "" finds one
	Instance string // the instance id (AcquireInstance)
	// MemoryMax and PidsMax limit each child's cgroup (memory.max in bytes,
	// pids.max in processes); 0 means no limit.
	MemoryMax int64
	PidsMax   int64
	// UserMemoryMax, UserPidsMax and UserCPUMax limit each Unix account's
	// cgroup, Dir/user-<name>, which holds the cgroups of every child that
	// runs as that account (Spec.Account): --user-memory-max (memory.max,
	// bytes), --user-pids-max (pids.max, processes) and --user-cpu-max
	// (cpu.max, "quota period" in microseconds, e.g. "200000 100000" for two
	// cores: ParseCPUMax makes it from "200%"). 0 and "" mean no limit.
	UserMemoryMax int64
	UserPidsMax   int64
	UserCPUMax    string
	// CPUWeight is the cpu.weight of Dir, the parent of every child's
	// cgroup (--child-cpu-weight, 1 to 10000; the kernel's default is 100):
	// against the gateway's 100, 20 leaves the children a sixth of a CPU
	// the gateway wants. It needs the cpu controller in Base; without it
	// nothing is written and Cgroups.CPUWeight stays 0. 0: not set.
	CPUWeight int
}

// ParseCPUMax turns --user-cpu-max's PERCENT ("200%", "50%"; 100% is one
// core) into cpu.max's "quota period" with a period of 100 ms
// ("200000 100000"). "" gives "".
func ParseCPUMax(percent string) (string, error) {
	if percent == "" {
		return "", nil
	}
	n, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(percent), "%"), 64)
	if err != nil || !strings.HasSuffix(percent, "%") || n <= 0 || n > 1e6 {
		return "", fmt.Errorf("--user-cpu-max %q: want a percentage of one core, such as 200%%", percent)
	}
	const period = 100000                   // µs
	quota := max(int64(n*period/100), 1000) // the kernel refuses a quota under 1 ms
	return fmt.Sprintf("%d %d", quota, period), nil
}

// Cgroups is dashgate's cgroup v2 subtree for one instance. Create it with
// SetupCgroups; the Manager creates and removes one leaf per child in it;
// Close removes what is left at exit.
type Cgroups struct {
	// Mount is the cgroup2 mount point, from /proc/self/mountinfo.
	Mount string
	// Base holds the instances' directories: dashgate's own cgroup when it
	// is delegated, --cgroup-root, or the mount's root (as root).
	Base string
	// Dir is Base/dashgate-<instance>: the parent of every child's cgroup,
	// and of Dir/user-<name>, the parent of the cgroups of the children that
	// run as Unix account <name> (Spec.Account).
	Dir string
	// Delegated is true when Base is dashgate's own, delegated cgroup;
	// dashgate then moved itself into the leaf Base/gateway.
	Delegated bool
	// Controllers are the controllers enabled for the children's cgroups
	// ("memory", "pids", ...). cpu.stat works without any.
	Controllers []string
	// Missing names each controller a limit asked for but the hierarchy does
	// not offer (say, "pids" for --child-pids-max on a hybrid host whose pids
	// controller is bound to cgroup v1); those limits are not applied.
	Missing []string
	// CPUWeight is the cpu.weight written to Dir (CgroupOptions.CPUWeight);
	// 0 when none was asked for or Base offers no cpu controller.
	CPUWeight int
	// Unapplied names each limit Missing left out, with its flag
	// ("--child-memory-max", "--user-cpu-max", ...): one entry per flag,
	// so a caller can log one WARN for each.
	Unapplied []Unapplied

	memoryMax, pidsMax         int64
	userMemoryMax, userPidsMax int64
	userCPUMax                 string
	offered                    []string // Base's cgroup.controllers: what the hierarchy gives dashgate

	userMu sync.Mutex
	users  map[string]int // Unix name → children in Dir/user-<name>; guarded by userMu
}

// Unapplied is a limit whose controller the hierarchy does not offer.
type Unapplied struct {
	Controller string // "memory", "pids" or "cpu"
	Flag       string // the flag that asked for it
}

// UserPrefix starts the name of a Unix account's cgroup directory in Dir.
const UserPrefix = "user-"

// InstancePrefix starts the name of every instance's cgroup directory.
const InstancePrefix = "dashgate-"

// ErrNoCgroups wraps every reason SetupCgroups finds no usable hierarchy.
var ErrNoCgroups = errors.New("no writable cgroup v2 hierarchy")

// SetupCgroups finds a writable cgroup v2 hierarchy and creates this
// instance's directory in it. In order: --cgroup-root; dashgate's own cgroup
// when it is delegated (the trusted.delegate or user.delegate xattr systemd
// sets for Delegate=yes, or a cgroup owned by dashgate's non-root user),
// after moving dashgate into the leaf <own>/gateway (cgroup v2 lets a cgroup
// with processes have no child cgroups with controllers); the cgroup2 mount's
// root when running as root. It enables the memory and pids controllers
// where the hierarchy offers them.
//
// With CgroupOff it returns (nil, nil). Without a usable hierarchy it returns
// an error wrapping ErrNoCgroups that says why; the caller falls back (auto)
// or refuses to start (on).
func SetupCgroups(o CgroupOptions) (*Cgroups, error) {
	if o.Mode == CgroupOff {
		return nil, nil
	}
	mount, err := cgroup2Mount()
	if err != nil {
		return nil, err
	}
	own, err := ownCgroup(mount)
	if err != nil {
		return nil, err
	}
	c := &Cgroups{Mount: mount, memoryMax: o.MemoryMax, pidsMax: o.PidsMax,
		userMemoryMax: o.UserMemoryMax, userPidsMax: o.UserPidsMax, userCPUMax: o.UserCPUMax, users: map[string]int{}}
	switch {
	case o.Root != "":
		root := filepath.Clean(o.Root)
		if root != mount && !strings.HasPrefix(root, mount+"/") {
			return nil, fmt.Errorf("%w: --cgroup-root %s is not under the cgroup2 mount %s", ErrNoCgroups, root, mount)
		}
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, fmt.Errorf("%w: --cgroup-root: %w", ErrNoCgroups, err)
		}
		c.Base = root
	case own != mount && delegated(own):
		c.Base, c.Delegated = own, true
	case os.Geteuid() == 0:
		c.Base = mount
	default:
		return nil, fmt.Errorf("%w: not root, and dashgate's cgroup %s is not delegated to it (run it as a systemd unit with Delegate=yes, or pass --cgroup-root)", ErrNoCgroups, own)
	}
	if c.Base == own && own != mount {
		// A cgroup with processes cannot give controllers to its children:
		// dashgate moves into a leaf of its own.
		leaf := filepath.Join(own, "gateway")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%w: %w", ErrNoCgroups, err)
		}
		if err := writeFile(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
			return nil, fmt.Errorf("%w: move dashgate into %s: %w", ErrNoCgroups, leaf, err)
		}
		c.Delegated = true
	}
	c.Dir = filepath.Join(c.Base, InstancePrefix+o.Instance)
	if err := os.Mkdir(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: create %s: %w", ErrNoCgroups, c.Dir, err)
	}
	if _, err := os.Stat(filepath.Join(c.Dir, "cgroup.kill")); err != nil {
		os.Remove(c.Dir)
		return nil, fmt.Errorf("%w: %s has no cgroup.kill (Linux 5.14 or later is needed)", ErrNoCgroups, c.Dir)
	}
	c.enableControllers(o)
	return c, nil
}

// enableControllers turns on memory and pids (and cpu, for --user-cpu-max)
// for the children's cgroups, first in Base (for Dir) then in Dir (for the
// leaves and the accounts' directories), as far as each level offers them;
// an account's directory passes them on to its leaves (userDir).
func (c *Cgroups) enableControllers(o CgroupOptions) {
	want := []string{"memory", "pids"}
	if o.UserCPUMax != "" {
		want = append(want, "cpu")
	}
	for i, dir := range []string{c.Base, c.Dir} {
		avail := strings.Fields(readString(filepath.Join(dir, "cgroup.controllers")))
		if i == 0 {
			c.offered = avail
		}
		for _, ctl := range want {
			if slices.Contains(avail, ctl) {
				writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+"+ctl)
			}
		}
		if i == 0 && o.CPUWeight > 0 && slices.Contains(avail, "cpu") {
			// Dir's own weight: the cpu controller of Base, not of Dir.
			if writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+cpu") == nil &&
				writeFile(filepath.Join(c.Dir, "cpu.weight"), strconv.Itoa(o.CPUWeight)) == nil {
				c.CPUWeight = o.CPUWeight
			}
		}
	}
	c.Controllers = strings.Fields(readString(filepath.Join(c.Dir, "cgroup.subtree_control")))
	for _, l := range []struct {
		asked     bool
		ctl, flag string
	}{
		{o.MemoryMax > 0, "memory", "--child-memory-max"},
		{o.PidsMax > 0, "pids", "--child-pids-max"},
		{o.UserMemoryMax > 0, "memory", "--user-memory-max"},
		{o.UserPidsMax > 0, "pids", "--user-pids-max"},
		{o.UserCPUMax != "", "cpu", "--user-cpu-max"},
	} {
		if !l.asked || slices.Contains(c.Controllers, l.ctl) {
			continue
		}
		if !slices.Contains(c.Missing, l.ctl) {
			c.Missing = append(c.Missing, l.ctl)
		}
		c.Unapplied = append(c.Unapplied, Unapplied{Controller: l.ctl, Flag: l.flag})
	}
}

// cgroup2Mount is the first cgroup2 mount point in /proc/self/mountinfo
// (on hybrid hosts /sys/fs/cgroup/unified).
func cgroup2Mount() (string, error) {
	mounts, err := procfs.GetMounts()
	if err != nil {
		return "", fmt.Errorf("%w: read mountinfo: %w", ErrNoCgroups, err)
	}
	for _, m := range mounts {
		if m.FSType == "cgroup2" {
			return m.MountPoint, nil
		}
	}
	return "", fmt.Errorf("%w: no cgroup2 mount in /proc/self/mountinfo", ErrNoCgroups)
}

// ownCgroup is the directory of dashgate's own cgroup v2 (the "0::" line of
// /proc/self/cgroup) under mount.
func ownCgroup(mount string) (string, error) {
	self, err := procfs.Self()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoCgroups, err)
	}
	cgs, err := self.Cgroups()
	if err != nil {
		return "", fmt.Errorf("%w: read /proc/self/cgroup: %w", ErrNoCgroups, err)
	}
	for _, cg := range cgs {
		if cg.HierarchyID == 0 {
			return filepath.Join(mount, cg.Path), nil
		}
	}
	return "", fmt.Errorf("%w: /proc/self/cgroup has no cgroup v2 line", ErrNoCgroups)
}

// delegated reports whether dir was delegated to dashgate: systemd marks a
// Delegate=yes cgroup with the trusted.delegate (and, since v252,
// user.delegate) xattr; an unprivileged user's delegated cgroup is owned by
// that user. Either way dashgate must be able to write its cgroup.procs and
// cgroup.subtree_control.
func delegated(dir string) bool {
	marked := false
	for _, attr := range []string{"trusted.delegate", "user.delegate"} {
		var b [8]byte
		if n, err := unix.Getxattr(dir, attr, b[:]); err == nil && string(b[:n]) == "1" {
			marked = true
		}
	}
	if !marked {
		var st unix.Stat_t
		if unix.Stat(dir, &st) != nil || st.Uid == 0 || int(st.Uid) != os.Geteuid() {
			return false
		}
	}
	return unix.Access(filepath.Join(dir, "cgroup.procs"), unix.W_OK) == nil &&
		unix.Access(filepath.Join(dir, "cgroup.subtree_control"), unix.W_OK) == nil
}

// Close removes the instance's directory and whatever leaves are left in it
// (their processes are killed first). Call it at exit after every child was
// closed. Safe on nil.
func (c *Cgroups) Close() error {
	if c == nil {
		return nil
	}
	return removeTree(c.Dir, killWait)
}

// removeTree kills what runs in dir and below, waits until it is empty, and
// removes the directories bottom up.
func removeTree(dir string, wait time.Duration) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() {
			errs = append(errs, removeTree(filepath.Join(dir, e.Name()), wait))
		}
	}
	g := cgroupAt(dir)
	if g.populated() {
		g.kill()
		if !g.awaitEmpty(wait) {
			errs = append(errs, fmt.Errorf("%s: processes survived cgroup.kill", dir))
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// leaf creates the cgroup for one child, named name, with the configured
// limits, and returns it: under Dir, or with a Unix account (user, its
// name) under Dir/user-<user>, made on first need (userDir). The caller
// gives it back with release.
func (c *Cgroups) leaf(user, name string) (*cgroup, error) {
	parent := c.Dir
	if user != "" {
		var err error
		if parent, err = c.userDir(user); err != nil {
			return nil, err
		}
	}
	g := &cgroup{dir: filepath.Join(parent, name), user: user}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		c.releaseUser(user)
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	for _, l := range []struct {
		ctl, file string
		v         int64
	}{{"memory", "memory.max", c.memoryMax}, {"pids", "pids.max", c.pidsMax}} {
		if l.v > 0 && slices.Contains(c.Controllers, l.ctl) {
			if err := writeFile(filepath.Join(g.dir, l.file), strconv.FormatInt(l.v, 10)); err != nil {
				c.release(g)
				return nil, fmt.Errorf("cgroup %s: %w", l.file, err)
			}
		}
	}
	return g, nil
}

// userDir makes sure Dir/user-<user> exists, with the per-account limits
// and the controllers passed on to its leaves, counts one more child in
// it, and returns it. It is made root's (dashgate's) and 0755, as the
// leaves are: no account can write a cgroup.procs of the tree, so none can
// move a process out of it (moving needs write access to the target's
// cgroup.procs and to that of the common ancestor, cgroups(7)).
func (c *Cgroups) userDir(user string) (string, error) {
	if !accounts.ValidName(user) {
		return "", fmt.Errorf("cgroup for Unix account %q: not a valid account name", user)
	}
	dir := filepath.Join(c.Dir, UserPrefix+user)
	c.userMu.Lock()
	defer c.userMu.Unlock()
	if c.users[user] > 0 {
		c.users[user]++
		return dir, nil
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	for _, l := range []struct{ ctl, file, v string }{
		{"memory", "memory.max", positive(c.userMemoryMax)},
		{"pids", "pids.max", positive(c.userPidsMax)},
		{"cpu", "cpu.max", c.userCPUMax},
	} {
		if l.v != "" && slices.Contains(c.Controllers, l.ctl) {
			if err := writeFile(filepath.Join(dir, l.file), l.v); err != nil {
				os.Remove(dir)
				return "", fmt.Errorf("cgroup %s/%s: %w", dir, l.file, err)
			}
		}
	}
	for _, ctl := range c.Controllers {
		if ctl == "memory" || ctl == "pids" {
			writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+"+ctl)
		}
	}
	c.users[user] = 1
	return dir, nil
}

func positive(v int64) string {
	if v <= 0 {
		return ""
	}
	return strconv.FormatInt(v, 10)
}

// release removes a leaf made by leaf and, when it was its account's last,
// the account's directory.
func (c *Cgroups) release(g *cgroup) error {
	err := os.Remove(g.dir)
	if uerr := c.releaseUser(g.user); err == nil {
		err = uerr
	}
	return err
}

// releaseUser counts one child less in Dir/user-<user> and removes the
// directory once none is left; the count and the removal are under the
// lock userDir takes, so a child starting meanwhile never finds its
// account's directory gone.
func (c *Cgroups) releaseUser(user string) error {
	if user == "" {
		return nil
	}
	c.userMu.Lock()
	defer c.userMu.Unlock()
	if c.users[user]--; c.users[user] > 0 {
		return nil
	}
	delete(c.users, user)
	if err := os.Remove(filepath.Join(c.Dir, UserPrefix+user)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// UserCgroupStats are a Unix account's figures, from its cgroup
// Dir/user-<name>: the sum over every child running as the account.
type UserCgroupStats struct {
	CPUUsec     uint64 // cpu.stat usage_usec, µs
	MemoryBytes int64  // memory.current, bytes; -1: not measured
	Pids        int64  // pids.current; -1: not measured
	// MemoryUnmeasured and PidsUnmeasured say why MemoryBytes or Pids is
	// -1 (the hierarchy has no such controller, ...); "" when measured.
	MemoryUnmeasured, PidsUnmeasured string
}

// UserStats reads the figures of Unix account name's cgroup; false when
// it has none (no child of the account runs, or cgroups are off). Safe on
// nil.
func (c *Cgroups) UserStats(name string) (UserCgroupStats, bool) {
	if c == nil || !accounts.ValidName(name) {
		return UserCgroupStats{}, false
	}
	dir := filepath.Join(c.Dir, UserPrefix+name)
	cpu := readString(filepath.Join(dir, "cpu.stat")) // never empty while the cgroup is
	if cpu == "" {
		return UserCgroupStats{}, false
	}
	s := UserCgroupStats{MemoryBytes: -1, Pids: -1}
	s.CPUUsec, _ = strconv.ParseUint(eventValue(cpu, "usage_usec"), 10, 64)
	for _, f := range []struct {
		ctl, file string
		v         *int64
		why       *string
	}{
		{"memory", "memory.current", &s.MemoryBytes, &s.MemoryUnmeasured},
		{"pids", "pids.current", &s.Pids, &s.PidsUnmeasured},
	} {
		if v, err := strconv.ParseInt(strings.TrimSpace(readString(filepath.Join(dir, f.file))), 10, 64); err == nil {
			*f.v = v
		} else {
			*f.why = c.unmeasured(f.ctl, f.file)
		}
	}
	return s, true
}

// unmeasured says why a user's cgroup has no figure of controller ctl
// (read from file): the cgroup v2 hierarchy does not give dashgate that
// controller (a hybrid host keeps it on cgroup v1), it could not be
// enabled, or its file could not be read.
func (c *Cgroups) unmeasured(ctl, file string) string {
	switch {
	case slices.Contains(c.Controllers, ctl):
		return file + " could not be read"
	case slices.Contains(c.offered, ctl):
		return fmt.Sprintf("the %s controller could not be enabled for dashgate's cgroups", ctl)
	}
	offers := strings.Join(c.offered, " ")
	if offers == "" {
		offers = "none"
	}
	return fmt.Sprintf("no %s controller in the cgroup v2 hierarchy at %s (it offers: %s; a hybrid host keeps %s on cgroup v1)", ctl, c.Base, offers, ctl)
}

// cgroup is one cgroup directory; user is the Unix account whose
// directory holds it ("" when it is right under Dir).
type cgroup struct{ dir, user string }

func cgroupAt(dir string) *cgroup { return &cgroup{dir: dir} }

// open returns a descriptor of the directory for clone3(CLONE_INTO_CGROUP);
// the caller closes it once the child started.
func (g *cgroup) open() (int, error) {
	return unix.Open(g.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// procs lists the processes in the cgroup (cgroup.procs; exited ones are
// not listed, even before they are reaped).
func (g *cgroup) procs() []int {
	var out []int
	for _, f := range strings.Fields(readString(filepath.Join(g.dir, "cgroup.procs"))) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// populated reports cgroup.events' populated: whether any process is in the
// cgroup or below. A cgroup that cannot be read counts as empty.
func (g *cgroup) populated() bool {
	return eventValue(readString(filepath.Join(g.dir, "cgroup.events")), "populated") == "1"
}

// kill ends every process in the cgroup and below with SIGKILL at once
// (cgroup.kill); forks racing with it cannot escape.
func (g *cgroup) kill() error {
	return writeFile(filepath.Join(g.dir, "cgroup.kill"), "1")
}

// awaitEmpty waits until cgroup.events says populated 0 or d passed, and
// reports whether it is empty. It sleeps in poll(2) on a pidfd of every
// member (readable once it exited) and looks again when one fires: a
// member that forked after the list was read keeps its parent listed
// until the next round, or, its parent gone, is in the next list. A round
// with no member to wait for (the list raced with the last exit) looks
// again after awaitEmptyRecheck.
//
// It takes no inotify watch of cgroup.events: the kernel holds back a
// cgroup file's notifications for up to 10 ms after the previous one
// (CGROUP_FILE_NOTIFY_MIN_INTV), and closing an inotify instance waits for
// an SRCU grace period (fsnotify_destroy_group): 12 ms a close, up to 37,
// in a trace of terminals opened and closed back to back (BENCHMARKS.md,
// issue 43).
func (g *cgroup) awaitEmpty(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for g.populated() {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		var fds []unix.PollFd
		for _, pid := range g.procs() {
			if fd, err := unix.PidfdOpen(pid, 0); err == nil {
				fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
			}
		}
		if len(fds) == 0 {
			left = min(left, awaitEmptyRecheck)
		}
		unix.Poll(fds, int(left/time.Millisecond)+1)
		for _, f := range fds {
			unix.Close(int(f.Fd))
		}
	}
	return true
}

// awaitEmptyRecheck is how soon awaitEmpty looks again at a cgroup still
// populated with no member listed (between a member's exit and the
// kernel's update of populated).
const awaitEmptyRecheck = 2 * time.Millisecond

// CgroupStats are a child cgroup's figures. A figure whose controller is
// not enabled is -1.
type CgroupStats struct {
	CPUUsec     int64 // cpu.stat usage_usec: CPU time of every process that ran in it
	MemoryBytes int64 // memory.current
	Pids        int64 // pids.current
}

func (g *cgroup) stats() CgroupStats {
	s := CgroupStats{CPUUsec: -1, MemoryBytes: -1, Pids: -1}
	if v, err := strconv.ParseInt(eventValue(readString(filepath.Join(g.dir, "cpu.stat")), "usage_usec"), 10, 64); err == nil {
		s.CPUUsec = v
	}
	if v, err := strconv.ParseInt(strings.TrimSpace(readString(filepath.Join(g.dir, "memory.current"))), 10, 64); err == nil {
		s.MemoryBytes = v
	}
	if v, err := strconv.ParseInt(strings.TrimSpace(readString(filepath.Join(g.dir, "pids.current"))), 10, 64); err == nil {
		s.Pids = v
	}
	return s
}

// eventValue is the value of key in a flat-keyed cgroup file ("key value"
// lines), or "".
func eventValue(text, key string) string {
	for line := range strings.Lines(text) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && k == key {
			return v
		}
	}
	return ""
}

// readString is the text of a small kernel file (a cgroup's, /proc's), ""
// when it cannot be read. It reads with open, read and close alone:
// os.ReadFile adds an fstat and, a cgroup file being pollable, puts it in
// Go's poller and takes it out again, nine system calls against four, and
// a terminal's close reads three to five of them (BENCHMARKS.md, issue
// 43).
func readString(path string) string {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	var small [512]byte
	return string(readAll(fd, small[:]))
}

// writeFile writes s to a cgroup control file in one write(2) (the kernel
// takes each write whole; no O_CREAT, no truncation needed), with open,
// write and close alone, as readString reads.
func writeFile(path, s string) error {
	fd, err := openRetry(path, unix.O_WRONLY|unix.O_CLOEXEC)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	n, err := ignoringEINTR(func() (int, error) { return unix.Write(fd, []byte(s)) })
	if err == nil && n < len(s) {
		err = io.ErrShortWrite
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// openRetry is open(2) again while it is interrupted by a signal.
func openRetry(path string, flags int) (int, error) {
	return ignoringEINTR(func() (int, error) { return unix.Open(path, flags, 0) })
}

// ignoringEINTR calls call again while it fails with EINTR (a signal came
// before the call did anything) and returns its first other result.
func ignoringEINTR(call func() (int, error)) (int, error) {
	for {
		n, err := call()
		if err != unix.EINTR {
			return n, err
		}
	}
}
