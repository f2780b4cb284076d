package sessions

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ptyMaster is a terminal's pty master, non-blocking in Go's poller: a
// Read or a Write that waits parks its goroutine there and holds no
// thread. (Until issue 43 each terminal's reader waited in poll(2) on a
// thread of its own, for one thread wake-up a keystroke's echo instead
// of two; with 300 streaming terminals that was 300 threads, every one
// holding its P in a system call until Go's sysmon took it back, which
// kept sysmon waking 6,300 times a second, and no batching of ready
// terminals: a fifth more CPU than this under that load, and a quiet
// keystroke's p99 twice as long. On a quiet machine the echo is as fast
// either way: BENCHMARKS.md.)
//
// Read is called by one goroutine at a time; Write, WriteWithin and
// Resize may be called beside it, and one write's bytes go in whole,
// before or after another's. Close ends a Read or Write that waits (they
// fail with os.ErrClosed) and closes the descriptor once they let go.
type ptyMaster struct {
	f *os.File // the master, O_NONBLOCK, in the poller
	// wmu keeps writes whole: a paste that waits for room is not split by
	// another socket's keystroke (os.File's write lock did that before).
	wmu  sync.Mutex
	once sync.Once
	err  error
	// afterFunc is context.AfterFunc; a test delays the func it runs.
	afterFunc func(ctx context.Context, f func()) (stop func() bool)
}

// newPTYMaster takes over master, a non-blocking pty master in Go's
// poller (workers.Proc.PTY).
func newPTYMaster(master *os.File) *ptyMaster {
	return &ptyMaster{f: master, afterFunc: context.AfterFunc}
}

// coalesceMin is the least a first read must bring for Read to look for
// more: a smaller one (an echo, a prompt) is what there is.
const coalesceMin = 1 << 10

// Read waits for output, then, when that was at least coalesceMin bytes,
// takes what else the pty holds already without waiting, so one wakeup of
// the sender carries up to len(b) (a pty hands out about 4 KiB a read). A
// keystroke's echo is never delayed: it returns at once. It fails with
// EIO (in an *os.PathError) once every holder of the terminal is gone and
// its output was read (pty(7)), and with os.ErrClosed after Close.
func (m *ptyMaster) Read(b []byte) (int, error) {
	n, err := m.f.Read(b)
	if err != nil || n < coalesceMin || n == len(b) {
		return n, err
	}
	rc, rerr := m.f.SyscallConn()
	if rerr != nil {
		return n, nil
	}
	rc.Read(func(fd uintptr) bool {
		for n < len(b) {
			k, err := unix.Read(int(fd), b[n:])
			if err == unix.EINTR {
				continue
			}
			if err != nil || k <= 0 {
				break // EAGAIN: what there was; another error: at the next Read
			}
			n += k
		}
		return true // never wait here
	})
	return n, nil
}

func writeNow(fd int, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := unix.Write(fd, b[n:])
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return n, nil
		case err != nil:
			return n, err
		case k <= 0:
			return n, nil
		}
		n += k
	}
	return n, nil
}

// Write writes all of b, waiting for the program to read when the pty is
// full, until ctx's deadline (context.DeadlineExceeded; ctx's error when it
// ended otherwise). It fails with os.ErrClosed after Close.
func (m *ptyMaster) Write(ctx context.Context, b []byte) error {
	return m.WriteWithin(ctx, b, -1)
}

// WriteWithin is Write waiting for room at most d from when it first has
// to (d < 0: no bound but ctx's). What the pty takes at once is written
// without reading the clock. The write lock is held once for the whole
// of b, so another write (a keystroke of another socket) comes before or
// after it, never inside it; the hold ends with the deadline.
func (m *ptyMaster) WriteWithin(ctx context.Context, b []byte, d time.Duration) error {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	rc, err := m.f.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		var k int
		k, werr = writeNow(int(fd), b)
		b = b[k:]
		return true // no wait yet
	}); err != nil {
		return err
	}
	if werr != nil {
		return &os.PathError{Op: "write", Path: m.f.Name(), Err: werr}
	}
	if len(b) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	deadline, _ := ctx.Deadline()
	if d >= 0 {
		if own := time.Now().Add(d); deadline.IsZero() || own.Before(deadline) {
			deadline = own
		}
	}
	// The rest waits in the poller; the deadline is the file's, which
	// only writes use, one at a time (wmu). When ctx ends as the write
	// does, its func may already run: the deadline is cleared only once
	// it has, or the next write (a keystroke) would find it past.
	m.f.SetWriteDeadline(deadline)
	ended := make(chan struct{})
	stop := m.afterFunc(ctx, func() {
		m.f.SetWriteDeadline(time.Unix(1, 0))
		close(ended)
	})
	_, err = m.f.Write(b)
	if !stop() {
		<-ended
	}
	m.f.SetWriteDeadline(time.Time{})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, os.ErrDeadlineExceeded):
		return context.DeadlineExceeded
	}
	return err
}

// Resize sets the window size (TIOCSWINSZ, tty_ioctl(4)); the kernel sends
// SIGWINCH to the terminal's foreground process group.
func (m *ptyMaster) Resize(cols, rows uint16) error {
	rc, err := m.f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); err != nil {
		return err
	}
	return ierr
}

// Close ends a Read or Write that waits and closes the master once they
// have let go of it; later calls return the first one's result.
func (m *ptyMaster) Close() error {
	m.once.Do(func() { m.err = m.f.Close() })
	return m.err
}
