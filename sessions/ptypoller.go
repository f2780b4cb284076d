package sessions

import (
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// ptyPoller is the epoll instance every terminal's pty master is in
// (ptyMaster), one-shot: a master is reported once after its reader armed
// it, then not again until it is armed again. There is no goroutine of its
// own: of the readers that wait, one (the leader) waits in epoll_wait(2)
// and hands each report to the reader it is for; its own ends its wait at
// once, and it hands the lead to a reader still waiting (await).
var ptyPoller readPoller

// readPoller is an epoll instance whose descriptors are armed one-shot
// (EPOLLIN|EPOLLONESHOT) and reported to a channel each.
type readPoller struct {
	once sync.Once
	epfd int           // -1: no epoll; add reports 0
	lead chan struct{} // holds the lead while no reader has it
	// events is the leader's: epoll_wait's reports (whoever holds the lead).
	events []unix.EpollEvent
	mu     sync.Mutex
	last   int32                     // the last id given
	to     map[int32]chan<- struct{} // by id: where a report goes
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

func (p *readPoller) start() {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		p.epfd = -1
		return
	}
	p.epfd, p.to, p.lead = fd, map[int32]chan<- struct{}{}, make(chan struct{}, 1)
	p.events = make([]unix.EpollEvent, 64)
	p.lead <- struct{}{}
}

// await waits until id (armed) is reported (nil) or closed is closed
// (os.ErrClosed): parked, or, when it takes the lead, in epoll_wait(2)
// for every reader until its own report comes.
func (p *readPoller) await(id int32, readable <-chan struct{}, closed <-chan struct{}) error {
	select {
	case <-readable:
		return nil
	case <-closed:
		return os.ErrClosed
	case <-p.lead:
	}
	defer func() { p.lead <- struct{}{} }() // to a reader parked above, or the next
	events := p.events
	for {
		select {
		case <-readable: // reported before this reader took the lead
			return nil
		case <-closed:
			return os.ErrClosed
		default:
		}
		n, err := unix.EpollWait(p.epfd, events, -1)
		if err != nil { // EINTR; nothing else can fail on a valid instance
			continue
		}
		mine, others := false, false
		p.mu.Lock()
		for _, ev := range events[:n] {
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
		p.mu.Unlock()
		if mine {
			return nil // the caller reads, or finds closed at its next wait
		}
		if others {
			// The readers woken are queued on this goroutine's P, which
			// its next wait in the kernel would hold until Go's sysmon
			// takes it back: let them run first.
			runtime.Gosched()
		}
	}
}
