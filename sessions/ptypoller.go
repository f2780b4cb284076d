package sessions

import (
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ptyPoller is the epoll instance every terminal's pty master is in
// (ptyMaster), one-shot: a master is reported once after its reader armed
// it, then not again until it is armed again. Of the readers that wait,
// one (the leader) waits in epoll_wait(2) and hands each report to the
// reader it is for; the others are parked. The leader's own report ends its
// wait at once and nobody is woken to take its place: the lead is left
// vacant, and the next reader to wait (most often the same one, an echo
// later) takes it. A leader woken for others only hands their reports
// over and parks, the lead vacant for the first of them that waits again:
// so the lead goes to the terminal being typed in at its first echo, and
// stays there while the others are idle. While the lead is vacant and
// readers are parked, the instance is armed, one-shot, in a second epoll
// instance (outer), which is in Go's poller, where one goroutine
// (backstop) waits: a report for a parked reader then wakes it, and it
// hands the reports over as a leader would.
//
// Before, a leader's own report handed the lead to a parked reader at
// once: with one idle terminal beside the typed one (the spare terminal is
// one), every echo woke a thread for the idle reader to take the lead, and
// the next echo came through it, a goroutine's hand-over (BENCHMARKS.md,
// issue 43: 4.3 context switches and 132 µs of CPU a keystroke against 2.7
// and 89).
var ptyPoller readPoller

// PTYPollerFunction is the function of ptyPoller's goroutine, started with
// the first terminal and parked in Go's poller for the life of the process,
// for leak checkers to ignore.
const PTYPollerFunction = "github.com/dashgate/dashgate/sessions.(*readPoller).backstop"

// readPoller is an epoll instance whose descriptors are armed one-shot
// (EPOLLIN|EPOLLONESHOT) and reported to a channel each.
type readPoller struct {
	once sync.Once
	epfd int // -1: no epoll; add reports 0
	// outer holds epfd, armed one-shot while the lead is vacant and a reader
	// is parked; it is in Go's poller, where backstop waits for it.
	outer *os.File
	ofd   int // outer's descriptor (its Fd would take it out of the poller)
	// events is the lead's: epoll_wait's reports (whoever holds the lead).
	events []unix.EpollEvent

	mu      sync.Mutex
	leading bool                      // a reader, or backstop, holds the lead
	parked  int                       // readers parked for their report
	armed   bool                      // epfd is armed in outer (or reported, not yet seen by backstop)
	last    int32                     // the last id given
	to      map[int32]chan<- struct{} // by id: where a report goes
}

// add puts fd, disarmed, and wake (an eventfd that turns readable for
// good when fd's user is done with it) in the instance under a new id
// (never 0), to arm and remove fd with; a report of either sends a token
// to readable (a channel of capacity 1, never blocked on). It returns 0
// when epoll is not to be had: the caller waits without it. Closing fd
// and wake takes them out of the instance; remove forgets the id.
func (p *readPoller) add(fd, wake int, readable chan<- struct{}) int32 {
	p.once.Do(p.start)
	if p.epfd < 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last++
	if p.last <= 0 { // wrapped: 2^31 terminals later
		p.last = 1
	}
	id := p.last
	// No EPOLLIN yet: only a hang-up or an error could be reported, once.
	if unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLONESHOT, Fd: id}) != nil {
		return 0
	}
	if unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT, Fd: id}) != nil {
		unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, fd, nil)
		return 0
	}
	p.to[id] = readable
	return id
}

// arm asks for one report of fd (id from add) once it is readable, at once
// if it is already: a reader arms it after a read found it empty.
func (p *readPoller) arm(fd int, id int32) error {
	return unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT, Fd: id})
}

// remove forgets id, once its descriptors are closed: a report of it
// taken from the kernel before goes nowhere.
func (p *readPoller) remove(id int32) {
	p.mu.Lock()
	delete(p.to, id)
	p.mu.Unlock()
}

// start makes the instance and outer, and starts backstop; without either
// (epfd -1) every reader waits in poll(2).
func (p *readPoller) start() {
	p.epfd = -1
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return
	}
	ofd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		unix.Close(fd)
		return
	}
	fail := func() {
		unix.Close(fd)
		unix.Close(ofd)
	}
	if unix.EpollCtl(ofd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLONESHOT}) != nil || unix.SetNonblock(ofd, true) != nil {
		fail()
		return
	}
	outer := os.NewFile(uintptr(ofd), "ptypoller")
	rc, err := outer.SyscallConn()
	if err != nil || outer.SetReadDeadline(time.Time{}) != nil { // not in Go's poller
		outer.Close()
		unix.Close(fd)
		return
	}
	p.epfd, p.outer, p.ofd, p.to = fd, outer, ofd, map[int32]chan<- struct{}{}
	p.events = make([]unix.EpollEvent, 64)
	go p.backstop(rc)
}

// await waits until id (armed) is reported (nil) or closed is closed
// (os.ErrClosed). When the lead is vacant it takes it and waits in
// epoll_wait(2) for every reader: its own report ends the wait with the
// lead left vacant for its next wait; reports for others only are handed
// over, and it then parks like them, the lead vacant for the first of them
// to wait again (a reader that types takes it from an idle one at its first
// echo). While another holds the lead it parks until its report is handed
// to it.
func (p *readPoller) await(id int32, readable <-chan struct{}, closed <-chan struct{}) error {
	select {
	case <-readable:
		return nil
	case <-closed:
		return os.ErrClosed
	default:
	}
	p.mu.Lock()
	if !p.leading {
		p.takeLeadLocked()
		p.mu.Unlock()
		mine := p.lead(id, readable, closed)
		p.mu.Lock()
		p.leading = false
		if mine {
			p.armLocked()
			p.mu.Unlock()
			return nil // the caller reads, or finds closed at its next wait
		}
	}
	p.parked++
	p.armLocked()
	p.mu.Unlock()
	var err error
	select {
	case <-readable:
	case <-closed:
		err = os.ErrClosed
	}
	p.mu.Lock()
	p.parked--
	p.mu.Unlock()
	return err
}

// lead waits in epoll_wait(2), holding the lead, until a report for id
// (true), or reports for others, handed over (false). A token for id, or
// closed, found before it waits is id's report too.
func (p *readPoller) lead(id int32, readable <-chan struct{}, closed <-chan struct{}) bool {
	for {
		select {
		case <-readable:
			return true
		case <-closed:
			return true
		default:
		}
		n, err := unix.EpollWait(p.epfd, p.events, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil { // the instance is gone: the caller's arm fails next, and it waits without
			return true
		}
		if mine, others := p.dispatch(p.events[:n], id); mine || others {
			return mine
		}
	}
}

// takeLeadLocked takes the vacant lead, disarming outer: the holder sees
// every report itself. p.mu is held.
func (p *readPoller) takeLeadLocked() {
	p.leading = true
	if p.armed {
		p.armed = false
		unix.EpollCtl(p.ofd, unix.EPOLL_CTL_MOD, p.epfd, &unix.EpollEvent{Events: unix.EPOLLONESHOT})
	}
}

// armLocked arms outer when the lead is vacant and a reader is parked: a
// report for it then wakes backstop. p.mu is held.
func (p *readPoller) armLocked() {
	if !p.leading && p.parked > 0 && !p.armed {
		p.armed = true
		unix.EpollCtl(p.ofd, unix.EPOLL_CTL_MOD, p.epfd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT})
	}
}

// dispatch sends a token for each report to its reader, but for id's
// (mine), and says whether there were others.
func (p *readPoller) dispatch(events []unix.EpollEvent, id int32) (mine, others bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ev := range events {
		if ev.Fd == id {
			mine = true
			continue
		}
		if ch := p.to[ev.Fd]; ch != nil {
			select {
			case ch <- struct{}{}:
			default: // a token waits already
			}
			others = true
		}
	}
	return mine, others
}

// backstop waits in Go's poller for outer's report (reports for parked
// readers while the lead was vacant) and, when the lead is still vacant,
// takes it for as long as it takes to hand them over. It runs for the life
// of the process (PTYPollerFunction).
func (p *readPoller) backstop(rc syscall.RawConn) {
	var one [1]unix.EpollEvent
	reported := func(fd uintptr) bool {
		n, _ := unix.EpollWait(int(fd), one[:], 0)
		return n > 0
	}
	for {
		if rc.Read(reported) != nil {
			return
		}
		p.mu.Lock()
		p.armed = false // it was reported: disarmed
		if p.leading {  // a reader took the lead meanwhile: it sees the reports
			p.mu.Unlock()
			continue
		}
		p.leading = true
		p.mu.Unlock()
		for {
			n, err := unix.EpollWait(p.epfd, p.events, 0)
			if err == unix.EINTR {
				continue
			}
			if err != nil { // the instance is gone (a test's, closed)
				break
			}
			p.dispatch(p.events[:n], 0)
			if n < len(p.events) {
				break
			}
		}
		p.mu.Lock()
		p.leading = false
		p.armLocked()
		p.mu.Unlock()
	}
}
