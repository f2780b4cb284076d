package workers

import (
	"bytes"
	"os/exec"
	"runtime"
)

// Output runs cmd and returns its standard output, as exec.Cmd.Output
// does (stderr kept in an *exec.ExitError), with cmd's child registered
// as one dashgate waits for itself: the orphan reaper (RunReaper) leaves
// its zombie to this Wait. Any short helper dashgate runs while the reaper
// may run (id(1) and getent(1) for a Unix account) goes through it; plain
// exec would race the reaper, whose wait4 could take the exit status first
// (Wait then fails with ECHILD). cmd must not have been started and its
// Stdout must be nil; the caller owns nothing afterwards.
func Output(cmd *exec.Cmd) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	if cmd.Stderr == nil {
		cmd.Stderr = &stderr
	}
	err := Run(cmd)
	if ee, ok := err.(*exec.ExitError); ok && stderr.Len() > 0 {
		ee.Stderr = stderr.Bytes()
	}
	return stdout.Bytes(), err
}

// Run starts cmd and waits for it, as exec.Cmd.Run does, with its child
// registered as one dashgate waits for itself (see Output): for a short
// helper whose standard streams the caller wires (a file copied in or
// out as a Unix account, workers/files). cmd must not have been started;
// the caller owns its streams.
func Run(cmd *exec.Cmd) error {
	wait, err := Start(cmd)
	if err != nil {
		return err
	}
	if outputStarted != nil {
		outputStarted(cmd.Process.Pid)
	}
	return wait()
}

// Start starts cmd, as exec.Cmd.Start does, as a child of dashgate's own
// that no worker claims: its fork is counted and its pid registered
// before a worker's close lists dashgate's children, so the child, which
// holds a copy of every descriptor of dashgate (other workers' pipes
// among them) between its fork and its exec, is never taken for a
// worker's escapee and killed (a plain fork is told apart in that moment
// too, by the fork mark it holds: forkMark); and the orphan reaper leaves
// its zombie to wait, where a plain fork's exit status may be taken before
// its Wait (ECHILD). Every other fork of a process that runs a Manager
// must go through Start, Run or Output. cmd must not have been started. The caller must
// call wait exactly once (it returns cmd.Wait's error); until then the
// pid stays registered.
func Start(cmd *exec.Cmd) (wait func() error, err error) {
	spawnMu.Lock()
	beginFork()
	// On a thread known to fork (forkThreads), so that a listing of
	// dashgate's children finds this one.
	runtime.LockOSThread()
	noteForkThread()
	err = cmd.Start()
	runtime.UnlockOSThread()
	if err != nil {
		endFork(nil)
		spawnMu.Unlock()
		return nil, err
	}
	pid := cmd.Process.Pid
	endFork(func() { unreaped[pid]++ })
	spawnMu.Unlock()
	return func() error {
		awaitExit(pid)
		err := cmd.Wait()
		regMu.Lock()
		if unreaped[pid]--; unreaped[pid] <= 0 {
			delete(unreaped, pid)
		}
		regMu.Unlock()
		return err
	}, nil
}

// outputStarted, when set (by a test), runs between Output's Start and its
// Wait.
var outputStarted func(pid int)
