package sessions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ptyMaster is a terminal's pty master kept out of Go's poller. In the
// poller the master wakes the poller's thread on every change of it (each
// chunk of output, and room for input each time the program reads), even
// while nobody waits for it: a program writing in bulk woke it 30,000
// times a second, for a fifth to a third more CPU per MiB than this
// (BENCHMARKS.md, issue 43; issue 28 saw it as two thread wake-ups per
// keystroke).
// Instead, a reader that finds the pty empty arms it, once, in an epoll
// instance all terminals share (ptyPoller): the kernel reports the pty only
// when a reader waits for it. One waiting reader waits in epoll_wait(2)
// for all of them, the others are parked: a waiting reader holds no thread
// (each once held one, in poll(2): 300 streaming terminals made 300
// threads, issue 43), and the echo of a terminal being typed in wakes its
// reader itself, with no hand-over from another goroutine (which made the
// keystroke's round trip a fifth longer), idle terminals beside it or not
// (readPoller.await). A write that waits for room, which only a
// program that does not read its input makes it do, waits in poll(2) on
// its thread.
//
// Read is called by one goroutine at a time; Write, WriteWithin and
// Resize may be called beside it, and one write's bytes go in whole, before
// or after another's. Close ends a Read or Write that waits (they
// return os.ErrClosed) and closes both descriptors once they let go.
type ptyMaster struct {
	f    *os.File // the master, O_NONBLOCK but unknown to the poller
	wake *os.File // an eventfd that Close makes readable for good
	// wmu keeps writes whole: a paste that waits for room is not split by
	// another socket's keystroke (os.File's write lock did that before).
	wmu  sync.Mutex
	once sync.Once
	err  error
	// id is the master's in poller, ptyPoller but in tests (0: not in
	// it; Read waits in poll(2) then); readable gets a token when an armed
	// master turns readable; closed is closed by Close.
	poller   *readPoller
	id       int32
	readable chan struct{}
	closed   chan struct{}
}

// newWake returns the eventfd of a ptyMaster, made before its program
// starts so that nothing can fail once it runs.
func newWake() (*os.File, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("pty master: eventfd: %w", err)
	}
	return os.NewFile(uintptr(efd), "eventfd"), nil
}

// newPTYMaster takes over master, a non-blocking pty master that is not
// in Go's poller (workers.Spec.PTYUnpolled: in the poller, Go would wait
// there for a read that finds it empty), and wake (from newWake).
func newPTYMaster(master, wake *os.File) *ptyMaster {
	return newPTYMasterIn(&ptyPoller, master, wake)
}

// newPTYMasterIn is newPTYMaster with the master in poller.
func newPTYMasterIn(poller *readPoller, master, wake *os.File) *ptyMaster {
	m := &ptyMaster{f: master, wake: wake, poller: poller, readable: make(chan struct{}, 1), closed: make(chan struct{})}
	m.poll()
	return m
}

// poll adds the master to its poller, disarmed; without it (no epoll)
// Read waits in poll(2).
func (m *ptyMaster) poll() {
	rc, err := m.f.SyscallConn()
	if err != nil {
		return
	}
	wrc, err := m.wake.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		wrc.Control(func(wake uintptr) { m.id = m.poller.add(int(fd), int(wake), m.readable) })
	})
}

// with runs do with the master's and the eventfd's descriptors, holding
// both open meanwhile (Close waits for it to let go before closing them).
// It fails with os.ErrClosed after Close.
func (m *ptyMaster) with(do func(fd, wake int)) error {
	rc, err := m.f.SyscallConn()
	if err != nil {
		return err
	}
	wrc, err := m.wake.SyscallConn()
	if err != nil {
		return err
	}
	var inner error
	err = rc.Control(func(fd uintptr) {
		inner = wrc.Control(func(wake uintptr) { do(int(fd), int(wake)) })
	})
	if err != nil {
		return err
	}
	return inner
}

// wait blocks in poll(2) until fd has events (POLLIN or POLLOUT), the
// eventfd wake is signalled (os.ErrClosed) or timeout passes (-1: none;
// os.ErrDeadlineExceeded).
func wait(fd, wake int, events int16, timeout time.Duration) error {
	fds := []unix.PollFd{{Fd: int32(fd), Events: events}, {Fd: int32(wake), Events: unix.POLLIN}}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	n, err := unix.Poll(fds, ms)
	switch {
	case err == unix.EINTR:
		return nil // the caller tries again
	case err != nil:
		return os.NewSyscallError("poll", err)
	case fds[1].Revents != 0:
		return os.ErrClosed
	case n == 0:
		return os.ErrDeadlineExceeded
	}
	return nil // ready, or POLLHUP/POLLERR, which the next read or write reports
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
func (m *ptyMaster) Read(b []byte) (n int, err error) {
	werr := m.with(func(fd, wake int) {
		for {
			k, rerr := unix.Read(fd, b[n:])
			switch {
			case rerr == unix.EINTR:
				continue
			case rerr == unix.EAGAIN && n > 0:
				return // what there was
			case rerr == unix.EAGAIN:
				if err = m.awaitReadable(fd, wake); err != nil {
					return
				}
				continue
			case rerr != nil && n > 0:
				return // the error again at the next Read
			case rerr != nil:
				err = &os.PathError{Op: "read", Path: m.f.Name(), Err: rerr}
				return
			case k == 0 && n == 0:
				err = io.EOF
				return
			}
			n += k
			if k == 0 || n == len(b) || n < coalesceMin {
				return
			}
		}
	})
	if werr != nil {
		return 0, werr
	}
	return n, err
}

// awaitReadable waits until the master fd has output (or a hang-up, which
// the next read reports) or Close is called (os.ErrClosed), the master
// armed in its poller (readPoller.await); without one in poll(2).
func (m *ptyMaster) awaitReadable(fd, wake int) error {
	if m.id == 0 {
		return wait(fd, wake, unix.POLLIN, -1)
	}
	if err := m.poller.arm(fd, m.id); err != nil {
		return wait(fd, wake, unix.POLLIN, -1)
	}
	return m.poller.await(m.id, m.readable, m.closed)
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
	var err error
	werr := m.with(func(fd, wake int) {
		var deadline time.Time // set when the first wait comes
		for {
			var k int
			k, err = writeNow(fd, b)
			b = b[k:]
			if err != nil {
				err = &os.PathError{Op: "write", Path: m.f.Name(), Err: err}
				return
			}
			if len(b) == 0 {
				return
			}
			if err = ctx.Err(); err != nil {
				return
			}
			if deadline.IsZero() {
				if dl, ok := ctx.Deadline(); ok {
					deadline = dl
				}
				if d >= 0 {
					if own := time.Now().Add(d); deadline.IsZero() || own.Before(deadline) {
						deadline = own
					}
				}
			}
			timeout := time.Duration(-1)
			if !deadline.IsZero() {
				timeout = max(time.Until(deadline), 0)
			}
			if err = wait(fd, wake, unix.POLLOUT, timeout); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					err = context.DeadlineExceeded
				}
				return
			}
		}
	})
	if werr != nil {
		return werr
	}
	return err
}

// Resize sets the window size (TIOCSWINSZ, tty_ioctl(4)); the kernel sends
// SIGWINCH to the terminal's foreground process group.
func (m *ptyMaster) Resize(cols, rows uint16) error {
	var err error
	if werr := m.with(func(fd, _ int) {
		err = unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); werr != nil {
		return werr
	}
	return err
}

// Close ends a Read or Write that waits (the eventfd wakes one waiting
// in poll(2), or in its poller's epoll_wait for everyone), closes the
// master once they have let go of it and forgets it in its poller; later calls
// return the first one's result.
func (m *ptyMaster) Close() error {
	m.once.Do(func() {
		close(m.closed)
		if rc, err := m.wake.SyscallConn(); err == nil {
			rc.Control(func(wake uintptr) {
				one := [8]byte{1}
				unix.Write(int(wake), one[:]) // a counter: readable from now on
			})
		}
		// Files outside the poller close their descriptor when the last
		// call holding it returns: a waiting Read or Write is woken above.
		m.err = m.f.Close()
		m.wake.Close() // the last of its descriptors: both leave the poller's epoll
		if m.id != 0 {
			m.poller.remove(m.id)
		}
	})
	return m.err
}
