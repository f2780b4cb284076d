package web

import (
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Wrong tokens. With --users-file every token that names a real user and
// is not in the cache of good ones costs a bcrypt comparison (~80 ms of
// one core), so a client guessing tokens could keep both cores of a small
// box busy. throttle lets one client address (after the trusted proxy's
// X-Forwarded-For) get loginBurst tokens wrong, then one per
// loginRefill; beyond that its requests carrying a token get 429 without
// a comparison. A cookie or the user header is never throttled: they cost
// an HMAC at most.
const (
	loginBurst   = 10
	loginRefill  = time.Second
	maxThrottled = 4096 // client addresses remembered; beyond it the oldest go
)

type throttle struct {
	refill  time.Duration // loginRefill; tests make it longer
	mu      sync.Mutex
	clients map[netip.Addr]*rate.Limiter
	order   []netip.Addr // insertion order, to drop the oldest
	refused atomic.Int64 // requests refused since the last WARN
	warn    rate.Sometimes
}

func newThrottle() *throttle {
	return &throttle{refill: loginRefill, clients: map[netip.Addr]*rate.Limiter{}, warn: rate.Sometimes{Interval: headerWarnEvery}}
}

// blocked reports whether a has no wrong tries left.
func (t *throttle) blocked(a netip.Addr) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.clients[a]
	return l != nil && l.Tokens() < 1
}

// failed counts a wrong token of a.
func (t *throttle) failed(a netip.Addr) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.clients[a]
	if l == nil {
		if len(t.order) >= maxThrottled {
			delete(t.clients, t.order[0])
			t.order = t.order[1:]
		}
		l = rate.NewLimiter(rate.Every(t.refill), loginBurst)
		t.clients[a] = l
		t.order = append(t.order, a)
	}
	l.Allow()
}

// carriesToken reports whether r offers a token (bearer or ?token=).
func carriesToken(r *http.Request) bool {
	a := r.Header.Get("Authorization")
	return (len(a) > 7 && strings.EqualFold(a[:7], "Bearer ")) || r.URL.Query().Get("token") != ""
}

// clientAddr is r's client address (the proxy middleware has written a
// trusted proxy's X-Forwarded-For client into RemoteAddr); a Unix-socket
// peer without one is one local address.
func clientAddr(r *http.Request) netip.Addr {
	a, ok := peerAddr(r.RemoteAddr)
	if !ok {
		return netip.IPv6Unspecified()
	}
	return a.Unmap()
}
