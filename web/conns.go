package web

import (
	"container/list"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// connSet is every connection the server accepted, until it closes. HTTP
// connections (not hijacked) are capped: a newcomer beyond the cap closes
// the connection idle the longest (a keep-alive client reconnects when it
// needs to), and with none idle its requests are answered 503. WebSockets
// (hijacked) are not counted here (their own caps are --max-conns-per-ip
// and the registry's), but kept, so that shutdown can end those whose peer
// never answers the close handshake.
//
// A connSet is made by Run; its methods are safe for concurrent use.
type connSet struct {
	max int // open HTTP connections; 0 means no cap
	log *slog.Logger

	mu     sync.Mutex
	http   int        // connections in StateNew, StateActive or StateIdle
	idle   *list.List // of *trackedConn in StateIdle, the longest idle first
	hijack map[*trackedConn]struct{}

	acceptErrs atomic.Int64   // accept errors since the last WARN
	acceptWarn rate.Sometimes // one WARN per interval at most
	refused    atomic.Int64   // requests answered 503 since the last WARN
	overWarn   rate.Sometimes
}

// acceptWarnEvery bounds the WARN records of failing accepts (out of file
// descriptors, typically): one per interval, counting the others.
const acceptWarnEvery = 10 * time.Second

func newConnSet(max int, log *slog.Logger) *connSet {
	return &connSet{max: max, log: log, idle: list.New(), hijack: map[*trackedConn]struct{}{},
		acceptWarn: rate.Sometimes{Interval: acceptWarnEvery}, overWarn: rate.Sometimes{Interval: acceptWarnEvery}}
}

// trackedConn is an accepted connection as the server sees it. Close
// (whoever calls it: the server, a WebSocket, shutdown) forgets it.
type trackedConn struct {
	net.Conn
	set  *connSet
	once sync.Once
	over atomic.Bool // beyond the cap with nothing idle to close: answer 503

	// Guarded by set.mu.
	state    http.ConnState
	counted  bool          // in set.http
	idleElem *list.Element // in set.idle while StateIdle
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
	return &trackedConn{Conn: c, set: l.set}, nil
}

func (s *connSet) acceptFailed(err error) {
	s.acceptErrs.Add(1)
	s.acceptWarn.Do(func() {
		s.log.Warn("cannot accept connections", "err", err, "errors", s.acceptErrs.Swap(0),
			"note", "clients wait or fail until descriptors free up; see --max-http-conns and --http-idle-timeout")
	})
}

// connState is the http.Server's ConnState hook.
func (s *connSet) connState(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*trackedConn)
	if !ok {
		return
	}
	var evict *trackedConn
	s.mu.Lock()
	if c.idleElem != nil {
		s.idle.Remove(c.idleElem)
		c.idleElem = nil
	}
	c.state = st
	switch st {
	case http.StateNew:
		c.counted = true
		s.http++
		if s.max > 0 && s.http > s.max {
			if front := s.idle.Front(); front != nil {
				evict = s.idle.Remove(front).(*trackedConn)
				evict.idleElem = nil
				evict.counted = false // gone from the count now, not when its goroutine notices
				s.http--
			} else {
				c.over.Store(true)
			}
		}
	case http.StateIdle:
		c.idleElem = s.idle.PushBack(c)
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
	if evict != nil {
		s.log.Debug("idle connection closed for a new one", "remote_addr", evict.RemoteAddr().String(), "max_http_conns", s.max)
		evict.Close()
	}
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
// connection accepted beyond --max-http-conns when no idle one could make
// room, with one WARN per interval.
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
