package e2e_test

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// procInfo is what /proc/<pid>/stat says of a process.
type procInfo struct {
	PID   int
	PPID  int
	State byte   // R, S, Z, ...
	Start uint64 // start time in clock ticks since boot: tells a reused pid apart
}

// readProc parses /proc/<pid>/stat; ok is false when the process is gone.
func readProc(pid int) (procInfo, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	// The command name is in parentheses and may hold spaces or ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procInfo{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return procInfo{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	start, _ := strconv.ParseUint(f[19], 10, 64)
	return procInfo{PID: pid, PPID: ppid, State: f[0][0], Start: start}, true
}

func listProcs() []procInfo {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []procInfo
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			out = append(out, p)
		}
	}
	return out
}

// descendants returns every process below root, by parent pid.
func descendants(root int) []procInfo {
	procs := listProcs()
	children := map[int][]procInfo{}
	for _, p := range procs {
		children[p.PPID] = append(children[p.PPID], p)
	}
	var out []procInfo
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			out = append(out, c)
			queue = append(queue, c.PID)
		}
	}
	return out
}

// alive reports whether the process identified by (pid, start) still exists
// and has not exited: a zombie is dead, a reused pid is someone else.
func alive(pid int, start uint64) bool {
	p, ok := readProc(pid)
	return ok && p.Start == start && p.State != 'Z'
}

// present reports whether (pid, start) still has a /proc entry (alive or an
// unreaped zombie).
func present(pid int, start uint64) bool {
	p, ok := readProc(pid)
	return ok && p.Start == start
}

func cmdline(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// withEnv lists the live processes whose environment holds kv exactly (every
// child of a dashgate instance carries DASHGATE_INSTANCE=<id>, and so do the
// processes its children start).
func withEnv(kv string) []procInfo {
	var out []procInfo
	for _, p := range listProcs() {
		if p.State == 'Z' {
			continue
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/environ")
		if err != nil {
			continue
		}
		for _, e := range bytes.Split(b, []byte{0}) {
			if string(e) == kv {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// owned holds the pids of the children a test started with exec.Cmd and
// waits for itself (a dashgate, nginx) while they run: the reaping below
// leaves them to their Wait, so that a test may run several of them and
// stop one while the others still run.
var owned sync.Map // pid -> struct{}

// own marks pid as waited for by its exec.Cmd; disown once Wait returned.
func own(pid int)    { owned.Store(pid, struct{}{}) }
func disown(pid int) { owned.Delete(pid) }

func isOwned(pid int) bool {
	_, ok := owned.Load(pid)
	return ok
}

// reapZombieChildren reaps, by pid, the zombies whose parent is the test
// process. Only call it when no exec.Cmd of the test is still running (its
// Wait owns its pid) other than those marked with own: tests run one at a
// time and call it after their dashgate and browser have been waited for.
func reapZombieChildren() []int {
	self := os.Getpid()
	var reaped []int
	for _, p := range listProcs() {
		if p.PPID != self || p.State != 'Z' || isOwned(p.PID) {
			continue
		}
		var ws unix.WaitStatus
		if got, err := unix.Wait4(p.PID, &ws, unix.WNOHANG, nil); err == nil && got == p.PID {
			reaped = append(reaped, p.PID)
		}
	}
	return reaped
}

// reapOrphans waits up to d for the processes reparented to the test process
// (it is a subreaper) to exit, reaping them, and returns a description of
// those still running after d, which it then kills: they can only be
// leftovers of a browser or a dashgate this process started.
func reapOrphans(d time.Duration) []string {
	self := os.Getpid()
	live := func() []procInfo {
		reapZombieChildren()
		var out []procInfo
		for _, p := range listProcs() {
			if p.PPID == self && p.State != 'Z' && !isOwned(p.PID) {
				out = append(out, p)
			}
		}
		return out
	}
	var left []procInfo
	waitUntil(d, func() bool { left = live(); return len(left) == 0 })
	var desc []string
	for _, p := range left {
		desc = append(desc, fmt.Sprintf("%d (%s)", p.PID, cmdline(p.PID)))
		unix.Kill(p.PID, unix.SIGKILL)
	}
	if len(left) > 0 {
		waitUntil(2*time.Second, func() bool { return len(live()) == 0 })
	}
	return desc
}

// waitUntil polls cond every 20 ms until it holds or d has passed, and
// reports whether it held.
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
}

// killPID sends SIGKILL to one process this test started (directly or not).
func killPID(pid int) { unix.Kill(pid, unix.SIGKILL) }
