package workers

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// /proc/<pid>/stat and environ are read with raw syscalls into reused
// buffers and parsed here (proc(5)).
// Proc.tree lists every process several times per close, so the scan is
// on the path of every terminal that closes while the next one opens:
// BenchmarkListProcs, 70 processes, 2 cores: 2.27 ms through procfs
// (os.Open with its poller registration, two reads to EOF, fmt.Fscan),
// 0.86 ms with openat+read+close on a /proc directory fd (issue 18).

// procStat is the part of /proc/<pid>/stat dashgate needs (proc(5)).
type procStat struct {
	pid, ppid, pgrp, sid int
	state                byte // R, S, D, Z, T, ...
}

func (s procStat) zombie() bool { return s.state == 'Z' || s.state == 'X' }

// statAt reads and parses <name>/stat relative to the directory fd dir
// (/proc, or AT_FDCWD with an absolute name); false when it is gone.
func statAt(dir int, name string) (procStat, bool) {
	fd, err := unix.Openat(dir, name+"/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return procStat{}, false
	}
	var buf [1024]byte // a stat line is about 300 bytes; comm is at most 64
	n, err := unix.Read(fd, buf[:])
	unix.Close(fd)
	if err != nil || n <= 0 {
		return procStat{}, false
	}
	return parseStat(buf[:n])
}

// parseStat parses "pid (comm) state ppid pgrp session ...": fields are
// counted from the last ')', since comm may hold spaces and parentheses.
func parseStat(b []byte) (procStat, bool) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return procStat{}, false
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return procStat{}, false
	}
	st := procStat{pid: pid}
	rest := b[end+1:]
	for i := range 4 { // state, ppid, pgrp, session
		rest = bytes.TrimLeft(rest, " ")
		f := rest
		if sp := bytes.IndexByte(rest, ' '); sp >= 0 {
			f, rest = rest[:sp], rest[sp:]
		} else {
			rest = nil
		}
		if len(f) == 0 {
			return procStat{}, false
		}
		if i == 0 {
			st.state = f[0]
			continue
		}
		v, err := strconv.Atoi(string(f))
		if err != nil {
			return procStat{}, false
		}
		switch i {
		case 1:
			st.ppid = v
		case 2:
			st.pgrp = v
		case 3:
			st.sid = v
		}
	}
	return st, true
}

// readStat reads /proc/<pid>/stat; false when the process is gone.
func readStat(pid int) (procStat, bool) {
	return statAt(unix.AT_FDCWD, "/proc/"+strconv.Itoa(pid))
}

// scanProcs is listProcs where a close falls back to the whole process
// table (Proc.claimed without a subreaper); a test replaces it to see
// that a close under a subreaper never does.
var scanProcs = listProcs

// ownDescendants lists processes among which are all of dashgate's
// descendants: with dashgate a subreaper, only the subtrees of its
// children (an orphan goes to the nearest subreaper, prctl(2), so no
// descendant is elsewhere; listSubtrees), else every process (scanProcs).
// Either way descendantsOf(…, os.Getpid()) picks them out. With 300
// workers on a shared machine the whole table was every other user's
// processes too, read for each admin listing (issue 43).
func ownDescendants() []procStat {
	if isSubreaper() && taskChildrenFiles() {
		return listSubtrees(childPIDs(nil, "self"))
	}
	return scanProcs()
}

// listProcs returns a snapshot of every process visible in /proc.
func listProcs() []procStat {
	dir, err := unix.Open("/proc", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(dir)
	buf := direntBufs.Get().(*[]byte)
	defer direntBufs.Put(buf)
	out := make([]procStat, 0, 128)
	var names []string
	for {
		n, err := unix.Getdents(dir, *buf)
		if err != nil || n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent((*buf)[:n], -1, names[:0])
		for _, name := range names {
			if name[0] < '0' || name[0] > '9' {
				continue
			}
			if st, ok := statAt(dir, name); ok {
				out = append(out, st)
			}
		}
	}
	return out
}

var direntBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// environValue returns the value of key in the initial environment of pid
// (/proc/<pid>/environ), or "" when it is absent or unreadable.
func environValue(pid int, key string) string {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/environ", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	bp := environBufs.Get().(*[]byte)
	defer environBufs.Put(bp)
	b := (*bp)[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err != nil {
			return ""
		}
		if n == 0 {
			break
		}
		b = b[:len(b)+n]
	}
	*bp = b
	prefix := key + "="
	for len(b) > 0 {
		kv := b
		if i := bytes.IndexByte(b, 0); i >= 0 {
			kv, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if v, ok := bytes.CutPrefix(kv, []byte(prefix)); ok {
			return string(v)
		}
	}
	return ""
}

var environBufs = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

// holdsAny reports whether pid has a descriptor open on one of the files
// named in targets (readlink of /proc/<pid>/fd/*: "/dev/pts/3",
// "pipe:[4711]"). A fork of this process that has not exec'd yet holds
// them all, and is not counted as holding any: see forkMark.
func holdsAny(pid int, targets map[string]bool) bool {
	if len(targets) == 0 {
		return false
	}
	p, err := procfs.NewProc(pid)
	if err != nil {
		return false
	}
	fds, err := p.FileDescriptorTargets()
	if err != nil {
		return false
	}
	if forkMark.name != "" && slices.Contains(fds, forkMark.name) {
		return false
	}
	for _, t := range fds {
		if targets[t] {
			return true
		}
	}
	return false
}

// forkMark is a descriptor no other process holds, made when the program
// starts: the read end of a pipe, close-on-exec, its write end closed;
// name is its /proc/<pid>/fd link ("pipe:[4711]"), "" if it could not be
// made. Between its fork and its exec a child of this process holds a copy
// of every descriptor, the workers' pipes and terminals among them, and so
// would pass for a worker's escapee that kept them (holdsAny) and be killed
// with that worker: a plain exec.Command's child (a test's useradd, a
// library's helper) that did not go through Start. Holding forkMark tells
// it apart: its exec drops the mark, and nothing else ever gets it (it is
// never passed on). It is never closed.
var forkMark = newForkMark()

type forkMarkFD struct {
	f    *os.File
	name string
}

func newForkMark() forkMarkFD {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return forkMarkFD{}
	}
	unix.Close(p[1])
	f := os.NewFile(uintptr(p[0]), "fork mark")
	ino, ok := inode(f)
	if !ok {
		f.Close()
		return forkMarkFD{}
	}
	return forkMarkFD{f: f, name: "pipe:[" + strconv.FormatUint(ino, 10) + "]"}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	st, ok := readStat(pid)
	return ok && !st.zombie()
}

// descendantsOf returns the pids in procs whose parent chain reaches root.
func descendantsOf(procs []procStat, root int) map[int]bool {
	return newChildIndex(procs).descendants(root)
}

// childIndex maps a pid to its children's pids in procs.
type childIndex map[int][]int

func newChildIndex(procs []procStat) childIndex {
	children := make(childIndex, len(procs))
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	return children
}

// descendants returns the pids whose parent chain reaches root.
func (children childIndex) descendants(root int) map[int]bool {
	out := map[int]bool{}
	children.addDescendants(out, root)
	return out
}

// addDescendants sets out[pid] for every pid whose parent chain reaches
// root. A pid out has already is not walked again: out may collect the
// descendants of several roots, each subtree walked once.
func (children childIndex) addDescendants(out map[int]bool, root int) {
	stack := []int{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range children[n] {
			if !out[c] {
				out[c] = true
				stack = append(stack, c)
			}
		}
	}
}

// isSubreaper reports whether dashgate is a child subreaper (prctl(2),
// PR_GET_CHILD_SUBREAPER; see EnableSubreaper): then every process that
// descends from it stays below it when its parent exits.
func isSubreaper() bool {
	var v int32
	err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&v)), 0, 0, 0)
	return err == nil && v != 0
}

// childPIDs appends to dst the children of pid ("self" for dashgate),
// read from the children file of each of its threads
// (/proc/<pid>/task/<tid>/children, proc(5): a child is listed under the
// thread that forked it, an adopted orphan under the thread group leader).
func childPIDs(dst []int, pid string) []int {
	dir, err := unix.Open("/proc/"+pid+"/task", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return dst
	}
	defer unix.Close(dir)
	buf := direntBufs.Get().(*[]byte)
	defer direntBufs.Put(buf)
	var names []string
	for {
		n, err := unix.Getdents(dir, *buf)
		if err != nil || n <= 0 {
			return dst
		}
		_, _, names = unix.ParseDirent((*buf)[:n], -1, names[:0])
		for _, tid := range names {
			dst, _ = readChildren(dst, dir, tid)
		}
	}
}

// readChildren appends to dst the pids in the children file of thread tid
// of the task directory dir; the error is openat's (ENOENT: no such
// thread now).
func readChildren(dst []int, dir int, tid string) ([]int, error) {
	fd, err := unix.Openat(dir, tid+"/children", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return dst, err
	}
	childrenFilesRead.Add(1)
	// Most threads have no child, the others a few: a small buffer on the
	// stack (a 4 KiB one made the closing goroutine's stack grow, copied, at
	// every close), larger on the heap when the list is long.
	var small [256]byte
	got := readAll(fd, small[:])
	unix.Close(fd)
	return appendPIDs(dst, got), nil
}

// appendPIDs appends to dst the decimal numbers in text, which separates
// them by spaces (a children file: "12 345 "), without allocating for them.
func appendPIDs(dst []int, text []byte) []int {
	pid := -1
	for _, c := range text {
		switch {
		case '0' <= c && c <= '9':
			pid = max(pid, 0)*10 + int(c-'0')
		case pid >= 0:
			dst = append(dst, pid)
			pid = -1
		}
	}
	if pid >= 0 {
		dst = append(dst, pid)
	}
	return dst
}

// readAll reads fd to its end into buf, or, when buf fills, into a copy on
// the heap that grows (so that a buffer on the caller's stack stays there).
func readAll(fd int, buf []byte) []byte {
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || m <= 0 {
			return buf[:n]
		}
		n += m
	}
	got := slices.Clone(buf)
	for {
		got = slices.Grow(got, len(got))
		m, err := unix.Read(fd, got[len(got):cap(got)])
		if err == unix.EINTR {
			continue
		}
		if err != nil || m <= 0 {
			return got
		}
		got = got[:len(got)+m]
	}
}

// childrenFilesRead counts the children files read, for a test to see
// that listing dashgate's children does not read one per thread.
var childrenFilesRead atomic.Int64

// forkThreads are the threads (ids) that dashgate forked a child on: the
// spawning threads (spawnLoop) and those Start ran on. A child is listed
// under the thread that forked it, and when that thread ends, under the
// thread group leader, as an orphan adopted by dashgate is (the kernel's
// find_new_reaper takes the first live thread of the group, the leader).
var forkThreads struct {
	sync.Mutex
	tids []string
}

// noteForkThread records the calling thread as one that forks: the
// caller must hold it (runtime.LockOSThread) until its fork is done.
func noteForkThread() {
	tid := strconv.Itoa(unix.Gettid())
	forkThreads.Lock()
	if !slices.Contains(forkThreads.tids, tid) {
		forkThreads.tids = append(forkThreads.tids, tid)
	}
	forkThreads.Unlock()
}

// selfChildPIDs appends to dst dashgate's children, from the children
// files of the threads that can have any: the leader's and forkThreads'
// (a thread gone is dropped from them), not from every thread's, for the
// reaper's pass after each burst of SIGCHLDs (orphans are the leader's).
// It misses a child forked outside Start and the spawning threads (a
// plain exec), which a close and the admin's listings must see: they
// read every thread's (childPIDs). With a thread per terminal's reader,
// as dashgate had, every thread's file at every pass was a quarter of
// its CPU under 20 terminals a second (BENCHMARKS.md, issue 43).
func selfChildPIDs(dst []int) []int {
	dir, err := unix.Open("/proc/self/task", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return dst
	}
	defer unix.Close(dir)
	leader := strconv.Itoa(unix.Getpid())
	dst, _ = readChildren(dst, dir, leader)
	forkThreads.Lock()
	defer forkThreads.Unlock()
	forkThreads.tids = slices.DeleteFunc(forkThreads.tids, func(tid string) bool {
		if tid == leader {
			return false // read above (a spawning thread can be the main thread)
		}
		var err error
		dst, err = readChildren(dst, dir, tid)
		return err == unix.ENOENT // the thread ended: its children went to the leader
	})
	return dst
}

// listSubtrees returns roots and every process below them, read through
// the children files (childPIDs) rather than all of /proc: the part of
// the process table under a few of dashgate's children costs a few reads,
// where listProcs reads the stat of every process on the machine. A root
// that is gone is left out; a zombie has no children of its own.
func listSubtrees(roots []int) []procStat {
	out := make([]procStat, 0, 2*len(roots))
	seen := make(map[int]bool, 2*len(roots))
	stack := slices.Clone(roots)
	for len(stack) > 0 {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		st, ok := readStat(pid)
		if !ok {
			continue
		}
		out = append(out, st)
		if !st.zombie() {
			stack = childPIDs(stack, strconv.Itoa(pid))
		}
	}
	return out
}
