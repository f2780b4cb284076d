package workers

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Instance is this dashgate's claim on its id: a flock held on
// <state-dir>/instances/<id>.lock for as long as it runs (flock(2): the lock
// goes with the last fd, so a crash frees it).
type Instance struct {
	ID   string
	f    *os.File
	path string
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
	return &Instance{ID: id, f: f, path: path}, nil
}

// Release removes the lock file and unlocks it. Safe to call twice.
func (in *Instance) Release() {
	if in == nil || in.f == nil {
		return
	}
	os.Remove(in.path)
	in.f.Close()
	in.f = nil
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
// carries DASHGATE_INSTANCE=<id> gets SIGTERM, then SIGKILL after grace, and
// the lock file is removed. Each ended process is logged at INFO with
// reason=startup_sweep. Processes and cgroups of live instances, whose lock
// is held, are never touched. It blocks until the processes are gone or the
// grace plus killWait passed.
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

	type victim struct {
		pid      int
		instance string
		session  string
	}
	var victims []victim
	selfPid := os.Getpid()
	for _, st := range listProcs() {
		if st.pid == selfPid || st.zombie() {
			continue
		}
		inst := environValue(st.pid, EnvInstance)
		if _, ok := dead[inst]; ok {
			victims = append(victims, victim{st.pid, inst, environValue(st.pid, EnvSessionID)})
		}
	}
	started := time.Now()
	killed := map[int]bool{} // still alive when SIGKILL was sent
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		for _, v := range victims {
			if sig == syscall.SIGKILL {
				if !alive(v.pid) {
					continue
				}
				killed[v.pid] = true
			}
			unix.Kill(v.pid, sig)
		}
		wait := grace
		if sig == syscall.SIGKILL {
			wait = killWait
		}
		deadline := time.Now().Add(wait)
		for anyAlive(victims, func(v victim) int { return v.pid }) && time.Now().Before(deadline) {
			t := time.NewTimer(5 * time.Millisecond)
			<-t.C
		}
		if !anyAlive(victims, func(v victim) int { return v.pid }) {
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
		log.Info("worker closed", "sid", v.session, "worker_pid", v.pid, "process", "orphan",
			"reason", string(ReasonStartupSweep), "instance", v.instance,
			"escalation", string(escalation), "duration_ms", time.Since(started).Milliseconds())
	}
	res.Processes += len(victims)
	return res, nil
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
	leaves, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	for _, e := range leaves {
		if !e.IsDir() {
			continue
		}
		g := cgroupAt(filepath.Join(dir, e.Name()))
		for _, pid := range g.procs() {
			victims = append(victims, victim{pid, environValue(pid, EnvSessionID), g.dir})
		}
	}
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

func anyAlive[T any](xs []T, pid func(T) int) bool {
	for _, x := range xs {
		if alive(pid(x)) {
			return true
		}
	}
	return false
}
