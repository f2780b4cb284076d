package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/user"
	"strconv"

	"golang.org/x/sys/unix"
)

// This file proves that a request comes from the proxy before its user
// header (and X-Forwarded-*) is believed: on a Unix socket by the peer's
// credentials (SO_PEERCRED), over TCP by a secret the proxy sends. An
// address alone proves nothing on a shared box: every local account
// connects from 127.0.0.1 (docs/failure-classes.md #23).

// ProxySecretHeader is the request header a proxy sends --proxy-secret-file's
// secret in (nginx: proxy_set_header, which overwrites a client's copy). It
// is removed from every request before the handlers see it.
const ProxySecretHeader = "X-Dashgate-Proxy-Secret"

// ProxyPeer is who may speak as the proxy over a Unix socket
// (--proxy-user): a process whose peer credentials name UID (a user's
// proxy: its uid) or GID (a group's: its gid), or dashgate's own account
// (SelfUID: a process of that account can read dashgate's memory anyway).
// UID and GID are -1 when not used.
type ProxyPeer struct {
	Name    string // as the flag gave it, for messages
	UID     int
	GID     int
	SelfUID int
	// SocketGID is the group a socket made for this proxy belongs to (mode
	// 0660): the user's primary group, or the group itself.
	SocketGID int
}

// LookupProxyPeer resolves --proxy-user: a user name (or uid) first, then
// a group name (or gid). It fails when neither exists.
func LookupProxyPeer(name string, selfUID int) (ProxyPeer, error) {
	p := ProxyPeer{Name: name, UID: -1, GID: -1, SelfUID: selfUID}
	if name == "" {
		return p, errors.New("empty name")
	}
	u, err := user.Lookup(name)
	if err != nil {
		if _, num := strconv.Atoi(name); num == nil {
			u, err = user.LookupId(name)
		}
	}
	if err == nil {
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 != nil || err2 != nil {
			return p, fmt.Errorf("user %q: uid %q, gid %q", name, u.Uid, u.Gid)
		}
		p.UID, p.SocketGID = uid, gid
		return p, nil
	}
	g, gerr := user.LookupGroup(name)
	if gerr != nil {
		if _, num := strconv.Atoi(name); num == nil {
			g, gerr = user.LookupGroupId(name)
		}
	}
	if gerr != nil {
		return p, fmt.Errorf("no user or group %q", name)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return p, fmt.Errorf("group %q: gid %q", name, g.Gid)
	}
	p.GID, p.SocketGID = gid, gid
	return p, nil
}

// Match says whether a peer with these credentials is the proxy.
func (p ProxyPeer) Match(c *unix.Ucred) bool {
	switch {
	case c == nil:
		return false
	case int(c.Uid) == p.SelfUID:
		return true
	case p.UID >= 0 && int(c.Uid) == p.UID:
		return true
	case p.GID >= 0 && int(c.Gid) == p.GID:
		return true
	}
	return false
}

// peerCred is the credentials of the process at the other end of r's
// connection, when it came over a Unix socket served by Run (read once at
// accept); nil otherwise, or when the kernel did not say.
func peerCred(r *http.Request) *unix.Ucred {
	if tc, ok := r.Context().Value(connKey{}).(*trackedConn); ok {
		return tc.cred
	}
	return nil
}

// sockCred reads a Unix-socket connection's peer credentials
// (SO_PEERCRED: the connecting process's pid, uid and gid as of its
// connect); nil for any other connection or when the kernel does not say.
func sockCred(c net.Conn) *unix.Ucred {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return nil
	}
	return cred
}

// proxySecretOK says whether r carries the proxy's secret (always true
// without one), and removes the header from r in every case, so that no
// handler, log or worker ever sees it. Constant time in the secret.
func (s *Server) proxySecretOK(r *http.Request) bool {
	vals := r.Header.Values(ProxySecretHeader)
	r.Header.Del(ProxySecretHeader)
	if s.secretH == nil {
		return true
	}
	if len(vals) == 1 {
		h := sha256.Sum256([]byte(vals[0]))
		if subtle.ConstantTimeCompare(h[:], s.secretH[:]) == 1 {
			return true
		}
	}
	if len(vals) > 0 { // a wrong one: a proxy misconfigured, or someone guessing
		s.badSecrets.Add(1)
		s.secretWarn.Do(func() {
			s.log.Warn("proxy secret refused: request not trusted", "header", ProxySecretHeader,
				"remote_addr", r.RemoteAddr, "refused", s.badSecrets.Swap(0))
		})
	}
	return false
}
