package testkit

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// A dashgate the kit started ends with the test binary that started it:
// Start forks it with Pdeathsig SIGTERM (prctl(2), PR_SET_PDEATHSIG), so a
// test binary killed mid-run (a CI timeout, ^C twice, SIGKILL) does not
// leave a dashgate running with its children, reparented to init. SIGTERM
// is dashgate's orderly stop: its sessions close, its children end, its
// cgroups go. Pdeathsig fires when the thread that forked the child ends,
// not the process, and Go ends a thread whose goroutine exits while locked
// to it: so every such child is forked from one goroutine locked to its
// own thread for the life of the process (forkThreadLoop), as workers'
// children are.

// ForkThreadFunction is the function of the kit's forking goroutine
// (forkThreadLoop): VerifyNoLeaks ignores it.
const ForkThreadFunction = "github.com/dashgate/dashgate/internal/testkit.forkThreadLoop"

var forkThread struct {
	once sync.Once
	reqs chan func()
}

// forkThreadLoop runs the kit's forks, locked to its thread, never
// unlocking: the thread lives as long as the process.
func forkThreadLoop(reqs <-chan func()) {
	runtime.LockOSThread()
	for f := range reqs {
		f()
	}
}

// startTied starts cmd from the kit's forking thread with Pdeathsig sig
// (when cmd's SysProcAttr does not set one: a copy is given it; nil: only
// Pdeathsig): cmd's process gets sig when the test binary ends. The caller
// waits for cmd as after cmd.Start.
func startTied(cmd *exec.Cmd, sig syscall.Signal) error {
	attr := syscall.SysProcAttr{}
	if cmd.SysProcAttr != nil {
		attr = *cmd.SysProcAttr
	}
	if attr.Pdeathsig == 0 {
		attr.Pdeathsig = sig
	}
	cmd.SysProcAttr = &attr
	forkThread.once.Do(func() {
		forkThread.reqs = make(chan func())
		go forkThreadLoop(forkThread.reqs)
	})
	done := make(chan error)
	forkThread.reqs <- func() { done <- cmd.Start() }
	return <-done
}
