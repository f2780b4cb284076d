package workers

import (
	"os"

	"golang.org/x/sys/unix"
)

// awaitExit returns once the child pid has exited (it is a zombie, or was
// reaped), waiting on a pidfd (pidfd_open(2)) through Go's network poller
// rather than in a blocking wait, so that a waiting child holds no OS
// thread: os/exec's Wait blocks one thread per child in waitid, and 300
// streaming workers made dashgate a process of 330 threads, whose
// children files every reaper scan read (BENCHMARKS.md, issue 43). The
// caller then reaps the child (cmd.Wait), which no longer blocks. pid must
// be an unreaped child of dashgate (registered, so no one else reaps it and
// its pid is not reused). Where a pidfd cannot be opened or polled (Linux
// before 5.3) it returns at once and the caller's Wait blocks as before.
func awaitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd") // owns fd; nonblocking, so the poller watches it
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// A pidfd is readable once its process has exited (pidfd_open(2)).
	// Read calls the function again after each readiness the poller
	// reports, until it returns true.
	rc.Read(func(fd uintptr) bool {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(pfd, 0)
			if err != unix.EINTR {
				return err != nil || n > 0 // on an error the caller's Wait blocks
			}
		}
	})
}
