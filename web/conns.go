package web

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"
)

// connSet is every connection the server accepted, until it closes. HTTP
// connections (not hijacked) are capped; WebSockets (hijacked) are not
// counted here (their own caps are --max-conns-per-ip and the registry's),
// but kept, so that shutdown can end those whose peer never answers the
// close handshake.
//
// A connection is pending from its accept until a handler runs for it
// (StateNew, or StateActive with no handler yet): it has not finished its
// request headers, and costs a descriptor and a goroutine while it says
// nothing. Pending connections are what a silent client holds by the
// hundred, so they give way first:
//
//   - Each peer (connPeer: an IP address, the loopback network, an IPv6
//     /64, a Unix socket's uid) has a budget of pending connections
//     (Config.MaxPendingPerPeer): one more closes that peer's oldest
//     pending connection among those pending for pendingGrace at least
//     (firstToClose), if any.
//   - A newcomer beyond the cap (Config.MaxHTTPConns) closes, in this
//     order: the oldest pending connection of the peer with the most
//     pending ones, whatever its age (firstToClose); else the connection
//     idle the longest (a keep-alive client reconnects when it needs to);
//     else nothing, and its requests are answered 503.
//
// Neither closes a connection whose request headers are all in (read by
// the server, or waiting in the socket's receive queue, which the choice
// peeks at: one non-blocking recv): its handler starts as soon as its
// goroutine runs. A well-behaved client sends its request with its
// connection, so it is the youngest of its peer's pending ones and the
// last to go. Known limit: beyond the cap there is no grace, and a
// client holding far more silent connections than the cap (1000 against
// 256, all re-opened as soon as closed) still gets a fresh connection
// from its own address closed before its request most of the time.
//
// A connSet is made by Run; its methods are safe for concurrent use.
type connSet struct {
	max        int // open HTTP connections; 0 means no cap
	maxPending int // pending connections per peer; 0 means no budget
	log        *slog.Logger

	mu      sync.Mutex
	http    int                   // connections in StateNew, StateActive or StateIdle
	idle    *list.List            // of *trackedConn in StateIdle, the longest idle first
	pending map[string]*list.List // per peer: its pending *trackedConn, the oldest first; no empty list
	seq     uint64                // orders pending connections across peers
	peek    [8 << 10]byte         // headersQueued's buffer: request headers are rarely longer
	hijack  map[*trackedConn]struct{}

	acceptErrs atomic.Int64   // accept errors since the last WARN
	acceptWarn rate.Sometimes // one WARN per interval at most
	refused    atomic.Int64   // requests answered 503 since the last WARN
	overWarn   rate.Sometimes
	evicted    atomic.Int64 // pending connections closed since the last WARN
	evictWarn  rate.Sometimes
}

// evictReason is why the set closed a connection.
type evictReason string

const (
	evictPeerBudget   evictReason = "pending_over_peer_budget" // its peer opened one more than MaxPendingPerPeer
	evictPendingAtCap evictReason = "pending_at_cap"           // a newcomer beyond MaxHTTPConns
	evictIdleAtCap    evictReason = "idle_at_cap"              // a newcomer beyond MaxHTTPConns, none pending
)

// eviction is a connection the set dropped under its lock, to close after.
type eviction struct {
	c      *trackedConn
	reason evictReason
}

// acceptWarnEvery bounds the WARN records of failing accepts (out of file
// descriptors, typically): one per interval, counting the others.
const acceptWarnEvery = 10 * time.Second

// newConnSet makes the set of a server with at most max HTTP connections
// (0: no cap) and maxPending pending ones per peer (0: no budget).
func newConnSet(max, maxPending int, log *slog.Logger) *connSet {
	return &connSet{max: max, maxPending: maxPending, log: log, idle: list.New(),
		pending: map[string]*list.List{}, hijack: map[*trackedConn]struct{}{},
		acceptWarn: rate.Sometimes{Interval: acceptWarnEvery}, overWarn: rate.Sometimes{Interval: acceptWarnEvery},
		evictWarn: rate.Sometimes{Interval: acceptWarnEvery}}
}

// trackedConn is an accepted connection as the server sees it. Close
// (whoever calls it: the server, a WebSocket, shutdown) forgets it.
type trackedConn struct {
	net.Conn
	set   *connSet
	peer  string      // connPeer, at accept
	cred  *unix.Ucred // a Unix socket's peer credentials, read at accept (sockCred); nil over TCP
	once  sync.Once
	over  atomic.Bool  // beyond the cap with nothing to close: answer 503
	heard atomic.Int32 // heardNone, heardPart or heardHeaders; written by its reader only
	tail  [3]byte      // the last bytes read while heardPart, for a blank line across reads

	// Guarded by set.mu.
	state       http.ConnState
	counted     bool          // in set.http
	gone        bool          // closed by the set: no longer listed, whatever its state says
	handlers    int           // handlers running for it (serving)
	idleElem    *list.Element // in set.idle while StateIdle
	pendingElem *list.Element // in set.pending[peer] while pending
	pendingSeq  uint64        // set.seq when it became pending
	pendingAt   time.Time     // when it became pending
}

// What the server read of a connection so far (trackedConn.heard).
const (
	heardNone    int32 = iota // nothing
	heardPart                 // bytes, but not yet a blank line
	heardHeaders              // a request's headers, to their blank line
)

// Read notes, until it has read a request's headers, whether it has
// (firstToClose).
func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.heard.Load() != heardHeaders {
		var seam [6]byte // the blank line may start in an earlier read
		k := copy(seam[:], c.tail[:])
		k += copy(seam[k:], p[:n])
		st := heardPart
		if headersEnd(seam[:k]) || headersEnd(p[:n]) {
			st = heardHeaders
		}
		if n >= len(c.tail) {
			copy(c.tail[:], p[n-len(c.tail):n])
		} else {
			copy(c.tail[:], c.tail[n:])
			copy(c.tail[len(c.tail)-n:], p[:n])
		}
		c.heard.Store(st)
	}
	return n, err
}

// headersEnd says whether b holds the blank line that ends a request's
// headers.
func headersEnd(b []byte) bool {
	return bytes.Contains(b, []byte("\r\n\r\n")) || bytes.Contains(b, []byte("\n\n"))
}

// headersQueued says whether c's request headers wait, to their blank
// line, in its socket's receive queue: one non-blocking peek into buf.
func headersQueued(c *trackedConn, buf []byte) bool {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	if raw.Control(func(fd uintptr) {
		n, _, _ = unix.Recvfrom(int(fd), buf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
	}) != nil {
		return false
	}
	return n > 0 && headersEnd(buf[:n])
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.hijack, c)
		c.set.mu.Unlock()
	})
	return err
}

// listener wraps the server's listener: each accepted connection is
// tracked, and accept errors are logged at WARN (rate-limited); the
// http.Server retries them.
type listener struct {
	net.Listener
	set *connSet
}

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		if !errors.Is(err, net.ErrClosed) { // closed: the server is shutting down
			l.set.acceptFailed(err)
		}
		return nil, err
	}
	cred := sockCred(c)
	return &trackedConn{Conn: c, set: l.set, cred: cred, peer: connPeer(c, cred)}, nil
}

// connPeer names who a connection's pending budget is counted against:
// over TCP its remote address, except that all of 127.0.0.0/8 is one peer
// (a local account can connect from any of its addresses, not only
// 127.0.0.1) and an IPv6 address counts as its /64 (what one host is
// given); over a Unix socket the peer's uid (cred: SO_PEERCRED, read
// once at accept), or "unix" when the kernel does not say.
func connPeer(c net.Conn, cred *unix.Ucred) string {
	switch a := c.RemoteAddr().(type) {
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			return a.String()
		}
		ip = ip.Unmap()
		switch {
		case ip.Is4() && ip.IsLoopback():
			return "127.0.0.0/8"
		case ip.Is6() && !ip.IsLoopback():
			p, _ := ip.Prefix(64)
			return p.String()
		}
		return ip.String()
	case *net.UnixAddr:
		if cred != nil {
			return "uid:" + strconv.FormatUint(uint64(cred.Uid), 10)
		}
		return "unix"
	}
	return c.RemoteAddr().Network() + ":" + c.RemoteAddr().String()
}

func (s *connSet) acceptFailed(err error) {
	s.acceptErrs.Add(1)
	s.acceptWarn.Do(func() {
		s.log.Warn("cannot accept connections", "err", err, "errors", s.acceptErrs.Swap(0),
			"note", "clients wait or fail until descriptors free up; see --max-http-conns and --http-idle-timeout")
	})
}

// connState is the http.Server's ConnState hook. StateNew runs in the
// accept loop, in the order of the accepts.
func (s *connSet) connState(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*trackedConn)
	if !ok {
		return
	}
	var evict []eviction // two at most: one for the cap, one for the peer's budget
	s.mu.Lock()
	if st == http.StateActive && c.pendingElem != nil {
		// Still pending, at its place: a byte sent is no request made.
		s.unlistIdleLocked(c)
	} else {
		s.unlistLocked(c)
	}
	c.state = st
	switch st {
	case http.StateNew:
		c.counted = true
		s.http++
		if s.max > 0 && s.http > s.max {
			// Decided before c is listed: a newcomer never makes room for itself.
			if v, why := s.victimLocked(); v != nil {
				s.dropLocked(v)
				evict = append(evict, eviction{v, why})
			} else {
				c.over.Store(true)
			}
		}
		evict = s.pendLocked(c, evict)
	case http.StateActive:
		if c.pendingElem == nil && c.handlers == 0 && !c.gone {
			evict = s.pendLocked(c, evict) // a keep-alive connection's next request
		}
	case http.StateIdle:
		if !c.gone {
			c.idleElem = s.idle.PushBack(c)
		}
	case http.StateHijacked, http.StateClosed:
		if c.counted {
			c.counted = false
			s.http--
		}
		if st == http.StateHijacked {
			s.hijack[c] = struct{}{}
		}
	}
	s.mu.Unlock()
	for _, e := range evict {
		s.closeEvicted(e)
	}
}

// closeEvicted closes a connection the set dropped, and logs it: a pending one
// at WARN (one record per interval, counting the others: a silent client
// makes thousands), an idle one at DEBUG.
func (s *connSet) closeEvicted(e eviction) {
	e.c.Close()
	if e.reason == evictIdleAtCap {
		s.log.Debug("idle connection closed for a new one", "remote_addr", e.c.RemoteAddr().String(), "max_http_conns", s.max)
		return
	}
	s.evicted.Add(1)
	s.evictWarn.Do(func() {
		s.log.Warn("connections that sent no request closed", "reason", string(e.reason), "peer", e.c.peer,
			"closed", s.evicted.Swap(0), "max_pending_per_peer", s.maxPending, "max_http_conns", s.max)
	})
}

// pendLocked lists c as pending, last of its peer's, and keeps the peer
// to its budget.
func (s *connSet) pendLocked(c *trackedConn, evict []eviction) []eviction {
	l := s.pending[c.peer]
	if l == nil {
		l = list.New()
		s.pending[c.peer] = l
	}
	s.seq++
	c.pendingSeq, c.pendingAt = s.seq, time.Now()
	c.pendingElem = l.PushBack(c)
	return s.budgetLocked(c, evict)
}

// budgetLocked drops one of c's peer's pending connections that has been
// pending for pendingGrace at least (firstToClose) when the peer holds
// more than its budget.
func (s *connSet) budgetLocked(c *trackedConn, evict []eviction) []eviction {
	l := s.pending[c.peer]
	if s.maxPending <= 0 || l == nil || l.Len() <= s.maxPending {
		return evict
	}
	if v := s.firstToClose(l, c.pendingAt.Add(-pendingGrace)); v != nil {
		s.dropLocked(v)
		evict = append(evict, eviction{v, evictPeerBudget})
	}
	return evict
}

// victimLocked is the connection to close for a newcomer beyond the cap:
// a pending one of the peer with the most pending (firstToClose; of two
// peers with as many, the one whose oldest is older), else the longest
// idle one, else nil.
func (s *connSet) victimLocked() (*trackedConn, evictReason) {
	var most *list.List
	for _, l := range s.pending {
		if most == nil || l.Len() > most.Len() ||
			l.Len() == most.Len() && l.Front().Value.(*trackedConn).pendingSeq < most.Front().Value.(*trackedConn).pendingSeq {
			most = l
		}
	}
	if most != nil {
		if v := s.firstToClose(most, time.Time{}); v != nil {
			return v, evictPendingAtCap
		}
	}
	if front := s.idle.Front(); front != nil {
		return front.Value.(*trackedConn), evictIdleAtCap
	}
	return nil, ""
}

// firstToClose is the connection of a peer's pending list l to close
// first: the oldest whose request headers are neither read (heard) nor
// queued (headersQueued), pending since before (zero: any), or nil.
// Called with s.mu held: the peeks do not block, and under a flood the
// first one peeked is the one closed.
func (s *connSet) firstToClose(l *list.List, before time.Time) *trackedConn {
	for e := l.Front(); e != nil; e = e.Next() {
		c := e.Value.(*trackedConn)
		if !before.IsZero() && !c.pendingAt.Before(before) {
			return nil // the list is in the order they became pending
		}
		if c.heard.Load() != heardHeaders && !headersQueued(c, s.peek[:]) {
			return c
		}
	}
	return nil
}

// pendingGrace is how long a pending connection is safe from its peer's
// budget: a client sends its request with its connection, so its headers
// are in (or closed is the connection) well within it. Without it, a
// client that re-opens each silent connection the server closes makes
// one new connection per one closed, as fast as the accept loop goes: a
// well-behaved client of the same address (127.0.0.1 is every local
// account's) was closed whenever the budget's worth of them came before
// its request did (TestSilentConnectionsFlood failed a third of its
// requests with a budget of 32 and 300 silent connections). With it, such
// a client's connections are closed no faster than they age: each one
// lives pendingGrace at least. What a peer holds beyond its budget is
// then bounded by what it opens in pendingGrace, and by the cap.
const pendingGrace = 250 * time.Millisecond

// dropLocked forgets c as the set closes it: gone from the count now, not
// when its goroutine notices.
func (s *connSet) dropLocked(c *trackedConn) {
	s.unlistLocked(c)
	c.gone = true
	if c.counted {
		c.counted = false
		s.http--
	}
}

// unlistLocked takes c off the idle and pending lists.
func (s *connSet) unlistLocked(c *trackedConn) {
	s.unlistIdleLocked(c)
	s.unpendLocked(c)
}

func (s *connSet) unlistIdleLocked(c *trackedConn) {
	if c.idleElem != nil {
		s.idle.Remove(c.idleElem)
		c.idleElem = nil
	}
}

func (s *connSet) unpendLocked(c *trackedConn) {
	if c.pendingElem == nil {
		return
	}
	l := s.pending[c.peer]
	l.Remove(c.pendingElem)
	c.pendingElem = nil
	if l.Len() == 0 {
		delete(s.pending, c.peer)
	}
}

// serving counts the handlers running for a request's connection: from
// the first one's start it is no longer pending (its request headers are
// in). StateActive alone does not say so: it may fire at the request's
// first byte.
func (s *connSet) serving(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := r.Context().Value(connKey{}).(*trackedConn)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		s.mu.Lock()
		c.handlers++
		s.unpendLocked(c)
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			c.handlers--
			s.mu.Unlock()
		}()
		next.ServeHTTP(w, r)
	})
}

// closeHijacked closes every WebSocket's connection at once, without a
// close handshake: at shutdown, once their close frames had time to go.
// It returns how many it closed.
func (s *connSet) closeHijacked() int {
	s.mu.Lock()
	conns := make([]*trackedConn, 0, len(s.hijack))
	for c := range s.hijack {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	return len(conns)
}

type connKey struct{}

// connContext is the http.Server's ConnContext hook: requests find their
// connection (refuseOverCap).
func connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// refuseOverCap answers 503 (and closes the connection) to requests on a
// connection accepted beyond --max-http-conns when no pending or idle one
// could make room, with one WARN per interval.
func (s *connSet) refuseOverCap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(*trackedConn); ok && c.over.Load() {
			s.refused.Add(1)
			s.overWarn.Do(func() {
				s.log.Warn("too many open connections: requests refused with 503", "max_http_conns", s.max,
					"refused", s.refused.Swap(0), "remote_addr", r.RemoteAddr)
			})
			w.Header().Set("Connection", "close")
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many open connections", http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r)
	})
}
