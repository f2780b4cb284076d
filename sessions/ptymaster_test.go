package sessions

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/workers"
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

// threadsInPoll counts this process's threads blocked in poll(2) or ppoll
// (/proc/PID/task/TID/syscall starts with the system call's number).
func threadsInPoll(t *testing.T) int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/syscall")
		nr, _, _ := strings.Cut(string(b), " ")
		if err == nil && (nr == strconv.Itoa(unix.SYS_POLL) || nr == strconv.Itoa(unix.SYS_PPOLL)) {
			n++
		}
	}
	return n
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
// newPTYMaster as workers.Proc has it (non-blocking, outside Go's poller)
// and returns the ptyMaster and the slave (closed at the end of the test).
func newTestPTYMaster(t *testing.T) (*ptyMaster, *os.File) {
	t.Helper()
	master, tty := openTestPTY(t)
	wake, err := newWake()
	if err != nil {
		t.Fatal(err)
	}
	m := newPTYMaster(master, wake)
	t.Cleanup(func() { m.Close() })
	return m, tty
}

// openTestPTY opens a pty: its master non-blocking outside Go's poller,
// as workers hands it over (Spec.PTYUnpolled), and its slave (tty), closed
// when the test ends.
func openTestPTY(t *testing.T) (master, tty *os.File) {
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
	master = os.NewFile(uintptr(fd), "/dev/ptmx") // blocking: left out of the poller
	if err := unix.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	return master, tty
}

// The master the spawner gets from workers is outside Go's poller (a
// deadline cannot be set on it: os.File says so for a descriptor outside
// the poller) and non-blocking, and the terminal works through it.
func TestPTYMasterOutOfPoller(t *testing.T) {
	t.Parallel()
	log, _ := testkit.NewLogger()
	mgr := workers.NewManager(workers.Config{Log: log, Instance: "test"})
	sp := ProcSpawner{Manager: mgr, PTYCmd: []string{"/bin/sh", "-c", "echo out-of-poller; exec cat"}, Env: []string{"PATH=" + os.Getenv("PATH")}}
	p, err := sp.SpawnPTY(SpawnRequest{SessionID: "s-poller"})
	if err != nil {
		t.Fatal(err)
	}
	pp := p.(*procPTY)
	t.Cleanup(func() { pp.Close(workers.ReasonShutdown); pp.Release() })
	m := pp.master
	if err := m.f.SetReadDeadline(time.Now()); !errors.Is(err, os.ErrNoDeadline) {
		t.Fatalf("SetReadDeadline on the master: %v, want os.ErrNoDeadline (outside the poller)", err)
	}
	rc, err := m.f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var flags int
	var ferr error
	rc.Control(func(fd uintptr) { flags, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) })
	if ferr != nil || flags&unix.O_NONBLOCK == 0 {
		t.Fatalf("master flags %#x (%v): want O_NONBLOCK", flags, ferr)
	}
	var got []byte
	buf := make([]byte, 256)
	for !bytes.Contains(got, []byte("out-of-poller")) {
		n, err := m.Read(buf)
		if err != nil {
			t.Fatalf("read %q, then %v", got, err)
		}
		got = append(got, buf[:n]...)
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
	ptyPoller.once.Do(ptyPoller.start) // and so does ptyPoller, its epoll
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
	idle := threadsInPoll(t) // other tests' writers, if any
	go func() { _, err := m.Read(make([]byte, 64)); readErr <- err }()
	go func() { writeErr <- m.Write(context.Background(), big) }()
	for deadline := time.Now().Add(10 * time.Second); readersParked() < 1 || threadsInPoll(t) < idle+1; {
		if time.Now().After(deadline) {
			t.Fatal("Read does not wait for ptyPoller, or Write in poll(2), after 10 s")
		}
		runtime.Gosched()
	}
	closeErr := make(chan error, 1)
	go func() { closeErr <- m.Close() }() // it waits for Read and Write to let go
	select {
	case err := <-closeErr:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waits 10 s on (a waiting Read or Write not woken)")
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

// Reads that wait for output park on a channel, the master armed in
// ptyPoller, and hold no thread: 32 of them add far fewer than 32 threads
// (each terminal's reader once held one, in poll(2)); Close ends them.
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
	for deadline := time.Now().Add(10 * time.Second); readersParked() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d Reads wait for ptyPoller after 10 s", readersParked(), n)
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

// A reader that waits is woken by output, and only once it waits: output
// that comes while nobody waits is read at the next Read without a wait.
func TestPTYMasterReaderWokenByOutput(t *testing.T) {
	m, tty := newTestPTYMaster(t)
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 64)
		n, err := m.Read(buf)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(buf[:n])
	}()
	for deadline := time.Now().Add(10 * time.Second); readersParked() < 1; {
		if time.Now().After(deadline) {
			t.Fatal("Read does not wait for ptyPoller after 10 s")
		}
		runtime.Gosched()
	}
	if _, err := tty.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s != "a" {
			t.Fatalf("Read woken by output: %q, want \"a\"", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting Read not woken 10 s after output")
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
	idle := threadsInPoll(t)
	wrote := make(chan error, 1)
	go func() { wrote <- m.Write(context.Background(), big) }()
	for deadline := time.Now().Add(10 * time.Second); threadsInPoll(t) < idle+1; {
		if time.Now().After(deadline) {
			t.Fatal("Write does not wait in poll(2) after 10 s")
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

// readersParked counts the goroutines waiting in ptyMaster.awaitReadable
// for ptyPoller's report: parked, or one of them in epoll_wait(2).
func readersParked() int {
	count := 0
	for _, g := range goroutineStacks() {
		if (strings.Contains(g, "[select") || strings.Contains(g, "[syscall")) && strings.Contains(g, "(*ptyMaster).awaitReadable(") {
			count++
		}
	}
	return count
}

// goroutineStacks is a stack dump of every goroutine, one string each
// ("goroutine 7 [select]:\n...").
func goroutineStacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// threadCount is the number of this process's threads.
func threadCount(t *testing.T) int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	return len(tasks)
}
