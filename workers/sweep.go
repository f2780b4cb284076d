package workers

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// Instance is this dashgate's claim on its id: a flock held on
// <state-dir>/instances/<id>.lock for as long as it runs (flock(2): the lock
// goes with the last fd, so a crash frees it). Beside it, <id>.adopted
// lists the processes dashgate adopted as a subreaper, each with its start
// time, for the Sweep after a crash (a process that left its child's cgroup
// and marker is found by nothing else).
type Instance struct {
	ID   string
	f    *os.File
	path string

	mu      sync.Mutex
	adopted map[int]uint64 // pid → start time, as <id>.adopted says; guarded by mu
}

// held are the instances this process holds, by id: a Manager whose
// Config.Instance is one of them records its adopted processes there.
var held = struct {
	sync.Mutex
	byID map[string]*Instance
}{byID: map[string]*Instance{}}

func heldInstance(id string) *Instance {
	held.Lock()
	defer held.Unlock()
	return held.byID[id]
}

// AcquireInstance creates the state directory if needed and locks a new
// instance file in it. Release it at exit.
func AcquireInstance(stateDir string) (*Instance, error) {
	dir := filepath.Join(stateDir, "instances")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	id := newMarker()
	path := filepath.Join(dir, id+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create instance lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	fmt.Fprintf(f, "%d\n", os.Getpid())
	in := &Instance{ID: id, f: f, path: path}
	held.Lock()
	held.byID[id] = in
	held.Unlock()
	return in, nil
}

// Release removes the lock file and the list of adopted processes, and
// unlocks. Safe to call twice.
func (in *Instance) Release() {
	if in == nil {
		return
	}
	held.Lock()
	if held.byID[in.ID] == in {
		delete(held.byID, in.ID)
	}
	held.Unlock()
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.f == nil {
		return
	}
	removeAdopted(filepath.Dir(in.path), in.ID)
	os.Remove(in.path)
	in.f.Close()
	in.f = nil
}

// adoptedRecord is one line of <id>.adopted: a pid and its start time in
// clock ticks after boot (proc(5), /proc/<pid>/stat field 22), which tells
// the process apart from a later one that reused the pid.
type adoptedRecord struct {
	pid   int
	start uint64
}

// recordAdopted makes <id>.adopted list pids, the processes adopted by
// dashgate that are alive (and not its own children), when they differ
// from what it lists. The file starts with the boot id: after a reboot
// start times repeat. It is replaced whole (rename), so a crash leaves the
// last complete list.
func (in *Instance) recordAdopted(pids []int) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.f == nil {
		return nil
	}
	same := len(pids) == len(in.adopted)
	for _, pid := range pids {
		_, ok := in.adopted[pid]
		same = same && ok
	}
	if same {
		return nil
	}
	next := make(map[int]uint64, len(pids))
	var b strings.Builder
	fmt.Fprintf(&b, "boot %s\n", bootID())
	for _, pid := range pids {
		start, ok := in.adopted[pid]
		if !ok {
			if start, ok = startTime(pid); !ok {
				continue // gone meanwhile
			}
		}
		next[pid] = start
		fmt.Fprintf(&b, "%d %d\n", pid, start)
	}
	in.adopted = next
	dir := filepath.Dir(in.path)
	if len(next) == 0 {
		return removeAdopted(dir, in.ID)
	}
	path := filepath.Join(dir, in.ID+".adopted")
	if err := os.WriteFile(path+".tmp", []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("record adopted processes: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("record adopted processes: %w", err)
	}
	return nil
}

// readAdopted returns what <id>.adopted lists; nothing when it is missing,
// unreadable, or from another boot.
func readAdopted(dir, id string) []adoptedRecord {
	b, err := os.ReadFile(filepath.Join(dir, id+".adopted"))
	if err != nil {
		return nil
	}
	first, rest, _ := strings.Cut(string(b), "\n")
	if first != "boot "+bootID() {
		return nil
	}
	var out []adoptedRecord
	for line := range strings.Lines(rest) {
		var r adoptedRecord
		if _, err := fmt.Sscanf(line, "%d %d", &r.pid, &r.start); err == nil && r.pid > 0 {
			out = append(out, r)
		}
	}
	return out
}

func removeAdopted(dir, id string) error {
	path := filepath.Join(dir, id+".adopted")
	os.Remove(path + ".tmp")
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove adopted processes: %w", err)
	}
	return nil
}

// startTime is pid's start time in clock ticks after boot.
func startTime(pid int) (uint64, bool) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, false
	}
	st, err := p.Stat()
	if err != nil {
		return 0, false
	}
	return st.Starttime, true
}

// bootID is the kernel's random id of this boot (proc(5),
// /proc/sys/kernel/random/boot_id), "" when unreadable.
func bootID() string {
	return strings.TrimSpace(readString("/proc/sys/kernel/random/boot_id"))
}

// SweepResult counts what a sweep did.
type SweepResult struct {
	Instances int // dead instances found
	Processes int // processes ended
}

// Sweep ends the processes left by dead instances: for every lock file in
// <state-dir>/instances whose flock is free (its owner is gone), the
// instance's cgroup directory (cg.Base/dashgate-<id>, when cg is not nil) is
// killed with cgroup.kill and removed, then every process whose environment
// carries DASHGATE_INSTANCE=<id>, and every process <id>.adopted lists
// whose start time is still the recorded one (a pid reused by another
// process is left alone), gets SIGTERM, then SIGKILL after grace, and the
// instance's files are removed. Signals go through pidfds, so none reaches
// a process that took a victim's pid meanwhile. Each ended process is
// logged at INFO with reason=startup_sweep (process=orphan, or
// process=adopted for one found in <id>.adopted). Processes and cgroups of
// live instances, whose lock is held, are never touched. It blocks until
// the processes are gone or the grace plus killWait passed.
func Sweep(stateDir, self string, grace time.Duration, cg *Cgroups, log *slog.Logger) (SweepResult, error) {
	var res SweepResult
	dir := filepath.Join(stateDir, "instances")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("read state dir: %w", err)
	}
	dead := map[string]*os.File{}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".lock")
		if !ok || id == self {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, e.Name()), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			f.Close() // held: that instance runs
			continue
		}
		dead[id] = f
	}
	defer func() {
		for id, f := range dead {
			removeAdopted(dir, id)
			os.Remove(filepath.Join(dir, id+".lock"))
			f.Close()
		}
	}()
	res.Instances = len(dead)
	if len(dead) == 0 {
		return res, nil
	}
	if cg != nil {
		for id := range dead {
			res.Processes += sweepCgroup(filepath.Join(cg.Base, InstancePrefix+id), id, log)
		}
	}

	var victims []victim
	defer func() {
		for _, v := range victims {
			v.close()
		}
	}()
	selfPid := os.Getpid()
	found := map[int]bool{}
	for _, st := range listProcs() {
		if st.pid == selfPid || st.zombie() {
			continue
		}
		if _, ok := dead[environValue(st.pid, EnvInstance)]; !ok {
			continue
		}
		v, ok := openVictim(st.pid)
		inst := environValue(st.pid, EnvInstance) // again, now that the pidfd holds the process
		if _, ofDead := dead[inst]; !ok || !ofDead {
			v.close()
			continue
		}
		v.instance, v.session, v.process = inst, environValue(st.pid, EnvSessionID), "orphan"
		victims = append(victims, v)
		found[st.pid] = true
	}
	for id := range dead {
		for _, r := range readAdopted(dir, id) {
			if r.pid == selfPid || found[r.pid] {
				continue
			}
			v, ok := openVictim(r.pid)
			if start, same := startTime(r.pid); !ok || !same || start != r.start || !v.alive() {
				v.close() // gone, or its pid is someone else's now
				continue
			}
			v.instance, v.session, v.process = id, environValue(r.pid, EnvSessionID), "adopted"
			victims = append(victims, v)
			found[r.pid] = true
		}
	}
	started := time.Now()
	killed := map[int]bool{} // still alive when SIGKILL was sent
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		for _, v := range victims {
			if sig == syscall.SIGKILL {
				if !v.alive() {
					continue
				}
				killed[v.pid] = true
			}
			v.signal(sig)
		}
		wait := grace
		if sig == syscall.SIGKILL {
			wait = killWait
		}
		deadline := time.Now().Add(wait)
		for anyAlive(victims) && time.Now().Before(deadline) {
			t := time.NewTimer(5 * time.Millisecond)
			<-t.C
		}
		if !anyAlive(victims) {
			break
		}
	}
	for _, v := range victims {
		escalation := EscalationTerm
		if killed[v.pid] {
			escalation = EscalationKill
		}
		// No kind: a swept process is not known to be a chat worker or a
		// terminal (Kind), only a leftover of a dead instance.
		log.Info("worker closed", "sid", v.session, "worker_pid", v.pid, "process", v.process,
			"reason", string(ReasonStartupSweep), "instance", v.instance,
			"escalation", string(escalation), "duration_ms", time.Since(started).Milliseconds())
	}
	res.Processes += len(victims)
	return res, nil
}

// victim is a process Sweep ends, held by a pidfd (fd, -1 when the kernel
// gives none: then by its pid).
type victim struct {
	pid, fd                    int
	instance, session, process string
}

// openVictim opens a pidfd of pid; false when there is no such process.
// Check the process's identity after it: the pidfd holds that process
// whatever happens to the pid.
func openVictim(pid int) (victim, bool) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return victim{pid: pid, fd: -1}, false
	}
	if err != nil {
		fd = -1 // no pidfds (Linux before 5.3): signals go by pid
	}
	return victim{pid: pid, fd: fd}, true
}

func (v victim) signal(sig syscall.Signal) {
	if v.fd >= 0 {
		unix.PidfdSendSignal(v.fd, sig, nil, 0)
		return
	}
	unix.Kill(v.pid, sig)
}

// alive reports whether the process has not exited: a pidfd is readable
// once it has (a zombie too).
func (v victim) alive() bool {
	if v.fd < 0 {
		return alive(v.pid)
	}
	fds := []unix.PollFd{{Fd: int32(v.fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 0
}

func (v victim) close() {
	if v.fd >= 0 {
		unix.Close(v.fd)
	}
}

// sweepCgroup kills a dead instance's cgroup directory with cgroup.kill,
// logs one record per process it held, removes it, and returns how many
// processes it ended.
func sweepCgroup(dir, instance string, log *slog.Logger) int {
	type victim struct {
		pid             int
		session, cgroup string
	}
	var victims []victim
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return 0
	}
	// Every cgroup below dir: the leaves, and the leaves in the Unix
	// accounts' directories (user-<name>/<leaf>).
	filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.IsDir() || path == dir {
			return nil
		}
		g := cgroupAt(path)
		for _, pid := range g.procs() {
			victims = append(victims, victim{pid, environValue(pid, EnvSessionID), g.dir})
		}
		return nil
	})
	started := time.Now()
	if err := removeTree(dir, killWait); err != nil {
		log.Warn("startup sweep: cgroup not removed", "instance", instance, "cgroup", dir, "err", err)
	}
	for _, v := range victims {
		log.Info("worker closed", "sid", v.session, "worker_pid", v.pid, "process", "orphan",
			"reason", string(ReasonStartupSweep), "instance", instance, "escalation", string(EscalationKill),
			"cgroup", v.cgroup, "duration_ms", time.Since(started).Milliseconds())
	}
	return len(victims)
}

func anyAlive(victims []victim) bool {
	for _, v := range victims {
		if v.alive() {
			return true
		}
	}
	return false
}
