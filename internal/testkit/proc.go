package testkit

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// Proc is one process as /proc/<pid>/stat shows it (proc(5)).
type Proc struct {
	PID, PPID int
	PGID, SID int    // process group and session
	State     byte   // R, S, D, T, Z (zombie), X (dead), ...
	Start     uint64 // start time in clock ticks after boot: tells a reused pid apart
	Comm      string // command name (at most 15 bytes)
	flags     uint
}

// pfExiting is PF_EXITING of the flags field (include/linux/sched.h).
const pfExiting = 0x4

// Dead reports whether the process has exited: a zombie, or dead.
func (p Proc) Dead() bool { return p.State == 'Z' || p.State == 'X' }

// Exiting reports whether the process is dying: dead, or PF_EXITING set (a
// SIGKILLed process that left its memory but is no zombie yet never runs
// user code again, and its environ reads empty).
func (p Proc) Exiting() bool { return p.Dead() || p.flags&pfExiting != 0 }

// ReadProc reads /proc/<pid>/stat. The error wraps fs.ErrNotExist when
// there is no such process.
func ReadProc(pid int) (Proc, error) {
	pp, err := procfs.NewProc(pid)
	if err != nil {
		return Proc{}, err
	}
	return fromProcfs(pp)
}

func fromProcfs(pp procfs.Proc) (Proc, error) {
	st, err := pp.Stat()
	if err != nil {
		return Proc{}, err
	}
	if st.State == "" {
		return Proc{}, fmt.Errorf("/proc/%d/stat: no state", st.PID)
	}
	return Proc{
		PID: st.PID, PPID: st.PPID, PGID: st.PGRP, SID: st.Session,
		State: st.State[0], Start: st.Starttime, Comm: st.Comm, flags: st.Flags,
	}, nil
}

// Procs lists every process in /proc, zombies included; a process that
// ends while it is read is left out.
func Procs() ([]Proc, error) {
	all, err := procfs.AllProcs()
	if err != nil {
		return nil, err
	}
	out := make([]Proc, 0, len(all))
	for _, pp := range all {
		if p, err := fromProcfs(pp); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// Descendants lists the processes below root by parent pid (children,
// their children, ...), zombies included, in no set order.
func Descendants(root int) ([]Proc, error) {
	all, err := Procs()
	if err != nil {
		return nil, err
	}
	children := make(map[int][]Proc, len(all))
	for _, p := range all {
		children[p.PPID] = append(children[p.PPID], p)
	}
	var out []Proc
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			out = append(out, c)
			queue = append(queue, c.PID)
		}
	}
	return out, nil
}

// WithEnv lists the live (not Dead) processes whose initial environment
// (/proc/<pid>/environ) holds kv exactly, as "KEY=VALUE". Processes whose
// environment cannot be read (another user's) are left out.
func WithEnv(kv string) ([]Proc, error) {
	all, err := procfs.AllProcs()
	if err != nil {
		return nil, err
	}
	var out []Proc
	for _, pp := range all {
		env, err := pp.Environ()
		if err != nil || !slices.Contains(env, kv) {
			continue
		}
		if p, err := fromProcfs(pp); err == nil && !p.Dead() {
			out = append(out, p)
		}
	}
	return out, nil
}

// ZombieChildren lists the zombie children of parent.
func ZombieChildren(parent int) ([]Proc, error) {
	all, err := Procs()
	if err != nil {
		return nil, err
	}
	var out []Proc
	for _, p := range all {
		if p.PPID == parent && p.Dead() {
			out = append(out, p)
		}
	}
	return out, nil
}

// Gone reports whether pid no longer runs: there is no such process, or it
// is a zombie or exiting (see Proc.Exiting). Whether it was reaped is
// Reaped's question.
func Gone(pid int) bool {
	if Reaped(pid) {
		return true
	}
	p, err := ReadProc(pid)
	return err != nil || p.Exiting()
}

// Reaped reports whether pid does not exist at all: kill(pid, 0) fails with
// ESRCH (it exited and its parent waited for it).
func Reaped(pid int) bool { return errors.Is(unix.Kill(pid, 0), unix.ESRCH) }

// Cmdline returns the command line of pid, its arguments joined by spaces.
func Cmdline(pid int) (string, error) {
	pp, err := procfs.NewProc(pid)
	if err != nil {
		return "", err
	}
	args, err := pp.CmdLine()
	return strings.Join(args, " "), err
}

// Describe is "pid (command line)" for messages; the command line is "?"
// when it cannot be read.
func Describe(pid int) string {
	cl, err := Cmdline(pid)
	if err != nil || cl == "" {
		cl = "?"
	}
	return fmt.Sprintf("%d (%s)", pid, cl)
}

// Usage is a process's resource use.
type Usage struct {
	RSSBytes uint64        // resident set size
	CPU      time.Duration // user plus system time since it started
}

// ReadUsage reads the Usage of pid from /proc/<pid>/stat.
func ReadUsage(pid int) (Usage, error) {
	pp, err := procfs.NewProc(pid)
	if err != nil {
		return Usage{}, err
	}
	st, err := pp.Stat()
	if err != nil {
		return Usage{}, err
	}
	return Usage{
		RSSBytes: uint64(st.ResidentMemory()),
		CPU:      time.Duration(st.CPUTime() * float64(time.Second)),
	}, nil
}

// ---------------------------------------------------------------------------
// Reaping zombie children of the calling process.

// owned holds the pids of children an exec.Cmd waits for (Own): the reaping
// below leaves them to their Wait.
var owned sync.Map // pid -> struct{}

// Own marks pid as a child some exec.Cmd waits for, so that
// ReapZombieChildren leaves its zombie to that Wait; Disown it once Wait
// returned. Start does both for its instances.
func Own(pid int) { owned.Store(pid, struct{}{}) }

// Disown undoes Own.
func Disown(pid int) { owned.Delete(pid) }

// Owned reports whether pid is marked with Own.
func Owned(pid int) bool {
	_, ok := owned.Load(pid)
	return ok
}

// ReapChild reaps pid if it is a zombie child of the calling process
// (wait4(pid, WNOHANG)) and reports whether it did. Never call it for a
// child an exec.Cmd waits for: it would steal its exit status.
func ReapChild(pid int) bool {
	var ws unix.WaitStatus
	got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	return err == nil && got == pid
}

// ReapZombieChildren reaps, by pid, every zombie child of the calling
// process except those marked with Own, and returns their pids. Call it
// only when no exec.Cmd of the caller is waiting for a child it did not
// Own.
func ReapZombieChildren() []int {
	zs, _ := ZombieChildren(os.Getpid())
	var out []int
	for _, z := range zs {
		if Owned(z.PID) {
			continue
		}
		if ReapChild(z.PID) {
			out = append(out, z.PID)
		}
	}
	return out
}
