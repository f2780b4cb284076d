package web

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// forwarded is what a trusted proxy told about a request.
type forwarded struct {
	scheme string
	prefix string
}

type forwardedKey struct{}

func forwardedFrom(ctx context.Context) *forwarded {
	f, _ := ctx.Value(forwardedKey{}).(*forwarded)
	return f
}

// ParseTrustedPeers parses --trusted-proxies: a comma-separated list of
// CIDRs or addresses, and the word "unix" (connections over a Unix socket
// are from a trusted proxy: Config.TrustUnix).
func ParseTrustedPeers(list string) (prefixes []netip.Prefix, unix bool, err error) {
	var rest []string
	for _, item := range strings.Split(list, ",") {
		if strings.EqualFold(strings.TrimSpace(item), "unix") {
			unix = true
			continue
		}
		rest = append(rest, item)
	}
	prefixes, err = ParseTrustedProxies(strings.Join(rest, ","))
	return prefixes, unix, err
}

// ParseTrustedProxies parses a comma-separated list of CIDRs or addresses.
func ParseTrustedProxies(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if !strings.Contains(item, "/") {
			a, err := netip.ParseAddr(item)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %q: %w", item, err)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(item)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: %w", item, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func (s *Server) isTrusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range s.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func peerAddr(remote string) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	return a, err == nil
}

// proxy applies X-Forwarded-For, -Proto, -Host and -Prefix when, and only
// when, the peer is a trusted proxy (docs/failure-classes.md #17); from anyone else they
// are ignored. The client address becomes r.RemoteAddr, the forwarded host
// r.Host (so origin checks compare against what the browser used). The
// peer is the connection's own, proven (peer.go): over TCP an address in
// TrustedProxies that sends ProxySecret when there is one; over a Unix
// socket a process ProxyPeer matches, or with TrustUnix alone any one
// (that sends ProxySecret when there is one). Whether it was trusted stays in
// the request's context (peerTrusted: the user header's gate), whatever
// X-Forwarded-For says. A Unix-socket peer's RemoteAddr ("@" or "") becomes
// "unix": every such peer is one local address.
func (s *Server) proxy(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var trusted bool
		if isUnixConn(r) {
			if r.RemoteAddr == "" || r.RemoteAddr == "@" {
				r.RemoteAddr = "unix"
			}
			switch {
			case s.cfg.ProxyPeer != nil:
				r.Header.Del(ProxySecretHeader)
				trusted = s.cfg.ProxyPeer.Match(peerCred(r))
			default:
				trusted = s.proxySecretOK(r) && s.cfg.TrustUnix
			}
		} else {
			peer, ok := peerAddr(r.RemoteAddr)
			trusted = s.proxySecretOK(r) && ok && s.isTrusted(peer)
		}
		r = r.WithContext(context.WithValue(r.Context(), peerKey{}, trusted))
		if !trusted {
			next.ServeHTTP(w, r)
			return
		}
		fi := &forwarded{scheme: "http"}
		if r.TLS != nil {
			fi.scheme = "https"
		}
		if xff := r.Header.Get("X-Forwarded-For"); xff != "" {
			// The rightmost address that is not a trusted proxy is the client.
			hops := strings.Split(xff, ",")
			for i := len(hops) - 1; i >= 0; i-- {
				a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
				if err != nil {
					break
				}
				r.RemoteAddr = net.JoinHostPort(a.String(), "0")
				if !s.isTrusted(a) {
					break
				}
			}
		}
		if p := strings.ToLower(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto"))); p == "http" || p == "https" {
			fi.scheme = p
		}
		if h := strings.TrimSpace(r.Header.Get("X-Forwarded-Host")); h != "" && validHost(h) {
			r.Host = h
		}
		if p := r.Header.Get("X-Forwarded-Prefix"); p != "" {
			norm, err := NormalizePrefix(p)
			if err != nil {
				http.Error(w, "bad X-Forwarded-Prefix: "+err.Error(), http.StatusBadRequest)
				return
			}
			fi.prefix = norm
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), forwardedKey{}, fi)))
	})
}

func validHost(h string) bool {
	if len(h) > 255 || strings.ContainsAny(h, " /\\\"'<>@") {
		return false
	}
	return true
}

func (s *Server) scheme(r *http.Request) string {
	if fi := forwardedFrom(r.Context()); fi != nil {
		return fi.scheme
	}
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// NormalizeBasePath turns --base-path into "/" or "/a/b/" form. It refuses
// what NormalizePrefix refuses.
func NormalizeBasePath(p string) (string, error) {
	if p == "" || p == "/" {
		return "/", nil
	}
	n, err := NormalizePrefix(p)
	if err != nil {
		return "", err
	}
	if n == "" {
		return "/", nil
	}
	return n + "/", nil
}

// NormalizePrefix checks a path prefix (X-Forwarded-Prefix or a base path)
// and returns it as "/a/b" without a trailing slash ("" for the root). It
// refuses "..", "//", quotes, spaces, control characters, anything but a
// plain path, and more than 256 characters.
func NormalizePrefix(p string) (string, error) {
	if len(p) > 256 {
		return "", errors.New("longer than 256 characters")
	}
	if !strings.HasPrefix(p, "/") {
		return "", errors.New("must start with /")
	}
	if strings.Contains(p, "//") || strings.Contains(p, "..") {
		return "", errors.New(`must not hold ".." or "//"`)
	}
	for _, c := range p {
		if c <= ' ' || c == 0x7f || strings.ContainsRune("\"'`<>\\?#%;", c) {
			return "", fmt.Errorf("must not hold %q", c)
		}
	}
	return strings.TrimSuffix(p, "/"), nil
}
