package sessions

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// openFds counts this process's open descriptors.
func openFds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// waitingInPoller counts the goroutines parked in Go's poller ("IO
// wait") inside a ptyMaster method named fn (Read, WriteWithin).
func waitingInPoller(fn string) int { return inState("IO wait", fn) }

// threadCount is the number of this process's threads.
func threadCount(t *testing.T) int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	return len(tasks)
}

// makeRaw makes the slave tty raw: a canonical line discipline drops
// input that does not fit a line, and writes to the master would never
// wait for a reader.
func makeRaw(t *testing.T, tty *os.File) {
	t.Helper()
	tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	tio.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	if err := unix.IoctlSetTermios(int(tty.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
}

// newTestPTYMaster opens a real pty pair, hands its master to
// newPTYMaster as workers.Proc has it (non-blocking, in Go's poller) and
// returns the ptyMaster and the slave (closed at the end of the test).
func newTestPTYMaster(t *testing.T) (*ptyMaster, *os.File) {
	t.Helper()
	ptm, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	fd, err := unix.FcntlInt(ptm.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	ptm.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	master := os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := master.SetReadDeadline(time.Time{}); err != nil {
		t.Fatalf("the test's master is not in the poller as workers' is: %v", err)
	}
	m := newPTYMaster(master)
	t.Cleanup(func() { m.Close() })
	return m, tty
}

// A Read that waits for output parks in Go's poller and holds no thread:
// 32 of them add far fewer than 32 threads (each terminal's reader once
// held one, in poll(2)).
func TestPTYMasterWaitsHoldNoThread(t *testing.T) {
	const n = 32
	before := threadCount(t)
	done := make(chan error, n)
	var ms []*ptyMaster
	for range n {
		m, _ := newTestPTYMaster(t)
		ms = append(ms, m)
		go func() { _, err := m.Read(make([]byte, 64)); done <- err }()
	}
	for deadline := time.Now().Add(10 * time.Second); waitingInPoller("Read") < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d Reads wait in the poller after 10 s", waitingInPoller("Read"), n)
		}
		runtime.Gosched()
	}
	if grew := threadCount(t) - before; grew >= n/2 {
		t.Errorf("%d Reads waiting: %d more threads, want no thread each", n, grew)
	}
	for _, m := range ms {
		m.Close()
	}
	for range n {
		if err := <-done; !errors.Is(err, os.ErrClosed) {
			t.Errorf("a waiting Read after Close: %v, want os.ErrClosed", err)
		}
	}
}

// Output comes out whole and at once: one byte is one Read.
func TestPTYMasterReadsEcho(t *testing.T) {
	m, tty := newTestPTYMaster(t)
	buf := make([]byte, MaxFrame)
	for _, c := range []byte("abc") {
		if _, err := tty.Write([]byte{c}); err != nil {
			t.Fatal(err)
		}
		n, err := m.Read(buf)
		if err != nil || n != 1 || buf[0] != c {
			t.Fatalf("Read: %q, %v; want %q", buf[:n], err, c)
		}
	}
	tty.Close()
	if _, err := m.Read(buf); !errors.Is(err, unix.EIO) {
		t.Fatalf("Read once the slave is closed: %v, want EIO", err)
	}
}

// Close ends a Read that waits for output, and a Write that waits for room,
// and then closes every descriptor the master had.
func TestPTYMasterCloseEndsWaits(t *testing.T) {
	if r, w, err := os.Pipe(); err == nil { // Go's poller opens its own descriptors once: before counting
		r.Close()
		w.Close()
	}
	before := openFds(t)
	m, tty := newTestPTYMaster(t)
	makeRaw(t, tty) // nobody reads it
	// More than a pty holds (its buffers take some 64 KiB): a write of it
	// waits for a reader that never comes.
	big := make([]byte, 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := m.Write(ctx, big); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Write into a full pty past its deadline: %v, want context.DeadlineExceeded", err)
	}

	readErr, writeErr := make(chan error, 1), make(chan error, 1)
	go func() { _, err := m.Read(make([]byte, 64)); readErr <- err }()
	go func() { writeErr <- m.Write(context.Background(), big) }()
	for deadline := time.Now().Add(10 * time.Second); waitingInPoller("Read") < 1 || waitingInPoller("WriteWithin") < 1; {
		if time.Now().After(deadline) {
			t.Fatal("Read and Write do not wait in the poller after 10 s")
		}
		runtime.Gosched()
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan error{"Read": readErr, "Write": writeErr} {
		select {
		case err := <-ch:
			if err == nil {
				t.Fatalf("%s after Close: no error", name)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still waits 10 s after Close", name)
		}
	}
	tty.Close()
	if after := openFds(t); after != before {
		t.Fatalf("%d descriptors open before, %d after Close", before, after)
	}
}

// Resize sets the size the slave reports.
func TestPTYMasterResize(t *testing.T) {
	m, tty := newTestPTYMaster(t)
	if err := m.Resize(123, 45); err != nil {
		t.Fatal(err)
	}
	ws, err := pty.GetsizeFull(tty)
	if err != nil {
		t.Fatal(err)
	}
	if ws.Cols != 123 || ws.Rows != 45 {
		t.Fatalf("slave size %dx%d, want 123x45", ws.Cols, ws.Rows)
	}
}

// A write that waits for room goes in whole: a keystroke typed meanwhile
// (another socket's WriteWithin) comes after it, not inside it, nor lost.
func TestPTYMasterWritesWhole(t *testing.T) {
	m, tty := newTestPTYMaster(t)
	makeRaw(t, tty)
	big := make([]byte, 1<<20) // zeros, more than the pty holds
	wrote := make(chan error, 1)
	go func() { wrote <- m.Write(context.Background(), big) }()
	for deadline := time.Now().Add(10 * time.Second); waitingInPoller("WriteWithin") < 1; {
		if time.Now().After(deadline) {
			t.Fatal("Write does not wait in the poller after 10 s")
		}
		runtime.Gosched()
	}
	typed := make(chan error, 1)
	go func() { typed <- m.WriteWithin(context.Background(), []byte{'x'}, 20*time.Second) }()

	got := make(chan []byte, 1)
	go func() { // the program: reads everything up to the 'x'
		var all []byte
		buf := make([]byte, 64<<10)
		for !bytes.Contains(all, []byte{'x'}) && len(all) <= len(big) {
			n, err := tty.Read(buf)
			if err != nil {
				break
			}
			all = append(all, buf[:n]...)
		}
		got <- all
	}()
	select {
	case all := <-got:
		if i := bytes.IndexByte(all, 'x'); i != len(big) {
			t.Fatalf("the keystroke came at byte %d of the input, want %d (after the whole write)", i, len(big))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no keystroke after the write 10 s on (WriteWithin gave up while the pty was full)")
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if err := <-typed; err != nil {
		t.Fatalf("the keystroke: %v", err)
	}
}

// inState counts the goroutines in state (as runtime.Stack names it:
// "chan receive", "IO wait") inside the ptyMaster method fn.
func inState(state, fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "["+state) && strings.Contains(g, "(*ptyMaster)."+fn+"(") {
			count++
		}
	}
	return count
}

// A write's context that ends just as the write does (its func runs
// late, after the write let go) does not leave the pty's write deadline
// in the past: the next keystroke goes in.
func TestPTYMasterLateCancelKeepsNextWrite(t *testing.T) {
	m, tty := newTestPTYMaster(t)
	makeRaw(t, tty)
	gate, ran := make(chan struct{}), make(chan struct{})
	m.afterFunc = func(ctx context.Context, f func()) func() bool {
		m.afterFunc = context.AfterFunc // the first write's only (called under wmu)
		return func() bool {            // ctx ended as the write did: f started, and runs late
			go func() { <-gate; f(); close(ran) }()
			return false
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	wrote := make(chan error, 1)
	go func() { wrote <- m.Write(ctx, make([]byte, 1<<20)) }() // more than the pty holds
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
		select {
		case err = <-wrote: // the write let go before its context's func ran
		default:
			if inState("chan receive", "WriteWithin") == 0 { // it waits for the func
				if time.Now().After(deadline) {
					t.Fatal("the write neither returned nor waited for its context's func after 10 s")
				}
				continue
			}
		}
		break
	}
	close(gate)
	<-ran
	if err == nil {
		err = <-wrote
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Write into a full pty past its deadline: %v, want context.DeadlineExceeded", err)
	}

	got := make(chan bool, 1)
	go func() { // the program reads what the pty holds, up to the keystroke
		buf := make([]byte, 64<<10)
		for {
			n, err := tty.Read(buf)
			if err != nil {
				got <- false
				return
			}
			if bytes.IndexByte(buf[:n], 'x') >= 0 {
				got <- true
				return
			}
		}
	}()
	if err := m.WriteWithin(context.Background(), []byte{'x'}, 10*time.Second); err != nil {
		t.Fatalf("a keystroke after a write whose context ended late: %v", err)
	}
	if !<-got {
		t.Fatal("the keystroke never reached the program")
	}
}
