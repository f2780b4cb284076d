package workers

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// Containment by cgroup v2 (docs/containment.md). Every child starts inside
// a cgroup of its own, <base>/dashgate-<instance>/<kind>-<marker>, created
// before the fork and entered by clone3(CLONE_INTO_CGROUP), so no process of
// its tree ever runs outside it, whatever it does with sessions, process
// groups, parents or its environment. Closing signals the members listed in
// cgroup.procs, ends with cgroup.kill, and takes "populated 0" in
// cgroup.events, waited for with inotify, as the proof that the tree is
// gone.

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
	// Dir is Base/dashgate-<instance>: the parent of every child's cgroup.
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

	memoryMax, pidsMax int64
}

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
	c := &Cgroups{Mount: mount, memoryMax: o.MemoryMax, pidsMax: o.PidsMax}
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

// enableControllers turns on memory and pids for the children's cgroups,
// first in Base (for Dir) then in Dir (for the leaves), as far as each level
// offers them.
func (c *Cgroups) enableControllers(o CgroupOptions) {
	want := []string{"memory", "pids"}
	for _, dir := range []string{c.Base, c.Dir} {
		avail := strings.Fields(readString(filepath.Join(dir, "cgroup.controllers")))
		for _, ctl := range want {
			if slices.Contains(avail, ctl) {
				writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+"+ctl)
			}
		}
	}
	c.Controllers = strings.Fields(readString(filepath.Join(c.Dir, "cgroup.subtree_control")))
	if o.MemoryMax > 0 && !slices.Contains(c.Controllers, "memory") {
		c.Missing = append(c.Missing, "memory")
	}
	if o.PidsMax > 0 && !slices.Contains(c.Controllers, "pids") {
		c.Missing = append(c.Missing, "pids")
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

// Leaf creates the cgroup for one child, named name under Dir, with the
// configured limits, and returns it. The caller removes it.
func (c *Cgroups) leaf(name string) (*cgroup, error) {
	g := cgroupAt(filepath.Join(c.Dir, name))
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	if c.memoryMax > 0 && slices.Contains(c.Controllers, "memory") {
		if err := writeFile(filepath.Join(g.dir, "memory.max"), strconv.FormatInt(c.memoryMax, 10)); err != nil {
			os.Remove(g.dir)
			return nil, fmt.Errorf("cgroup memory.max: %w", err)
		}
	}
	if c.pidsMax > 0 && slices.Contains(c.Controllers, "pids") {
		if err := writeFile(filepath.Join(g.dir, "pids.max"), strconv.FormatInt(c.pidsMax, 10)); err != nil {
			os.Remove(g.dir)
			return nil, fmt.Errorf("cgroup pids.max: %w", err)
		}
	}
	return g, nil
}

// cgroup is one cgroup directory.
type cgroup struct{ dir string }

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
// reports whether it is empty. It sleeps in poll(2) on an inotify watch of
// cgroup.events (the kernel signals each change of that file as a
// modification) and on a pidfd of every member (readable once it exited),
// never on a timer: the kernel holds back a cgroup file's notifications
// for up to 10 ms after the previous one (CGROUP_FILE_NOTIFY_MIN_INTV), and
// the members' pidfds say at once that the last one is gone. Members that
// fork meanwhile are found on the next round.
func (g *cgroup) awaitEmpty(d time.Duration) bool {
	deadline := time.Now().Add(d)
	ino, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err == nil {
		defer unix.Close(ino)
		if _, err := unix.InotifyAddWatch(ino, filepath.Join(g.dir, "cgroup.events"), unix.IN_MODIFY); err != nil {
			return !g.populated() // the cgroup is gone, or unreadable
		}
	}
	buf := make([]byte, 4096)
	for g.populated() { // looked at after the watch is set: no change is missed
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		var fds []unix.PollFd
		if ino >= 0 {
			fds = append(fds, unix.PollFd{Fd: int32(ino), Events: unix.POLLIN})
		} else {
			left = min(left, 10*time.Millisecond) // no inotify: look again now and then
		}
		for _, pid := range g.procs() {
			if fd, err := unix.PidfdOpen(pid, 0); err == nil {
				fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
			}
		}
		unix.Poll(fds, int(left/time.Millisecond)+1)
		for _, f := range fds {
			if int(f.Fd) != ino {
				unix.Close(int(f.Fd))
			}
		}
		if ino >= 0 {
			for {
				if _, err := unix.Read(ino, buf); err != nil {
					break // drained (EAGAIN)
				}
			}
		}
	}
	return true
}

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

func readString(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// writeFile writes s to a cgroup control file (no O_CREAT, no truncation
// needed: the kernel takes each write whole).
func writeFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
