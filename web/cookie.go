package web

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strconv"
	"strings"
	"time"
)

// The login cookies (PROTOCOL.md §1). Each instance names its own, so two
// instances on one host (different ports, one cookie jar) keep both
// logins: LoginCookiePrefix+Instance on the base path, AdminCookiePrefix+
// Instance on <base>admin for a login with a separate admin token. That
// login also sets AdminLinkCookiePrefix+Instance on the base path, signed
// as the admin cookie is: it grants nothing, and tells the dashboard, whose
// requests never carry the admin cookie, to show its admin link.
//
// Deprecated: TokenCookie and AdminTokenCookie holding the raw dashboard
// (admin) token are still accepted in token mode (no --users-file, no
// --user-header), for scripts that send them; dashgate no longer sets them.
const (
	LoginCookiePrefix     = "dashgate_login_"
	AdminCookiePrefix     = "dashgate_admin_"
	AdminLinkCookiePrefix = "dashgate_adminlink_"
	TokenCookie           = "dashgate_token"
	AdminTokenCookie      = "dashgate_admin_token"
	NodeCookie            = "dashgate_node"
)

// CookieMaxAge is how long a login cookie is accepted after it was issued.
const CookieMaxAge = 30 * 24 * time.Hour

// The kinds of login cookie: the dashboard's (a user, or in token mode the
// anonymous user) and the admin token's; and the admin link's, which
// proves nothing but that the admin token's login was made.
const (
	kindDashboard = "dashboard"
	kindAdmin     = "admin"
	kindAdminLink = "admin-link"
)

const cookieVersion = "v1"

// cookieMAC is HMAC-SHA256 with key over the length-prefixed fields
// (instance, kind, user, issue time in unix seconds, stamp).
func cookieMAC(key []byte, instance, kind, user string, issued int64, stamp string) []byte {
	m := hmac.New(sha256.New, key)
	var n [binary.MaxVarintLen64]byte
	for _, f := range []string{cookieVersion, instance, kind, user, strconv.FormatInt(issued, 10), stamp} {
		m.Write(n[:binary.PutUvarint(n[:], uint64(len(f)))])
		m.Write([]byte(f))
	}
	return m.Sum(nil)
}

// signCookie is a login cookie's value: "v1.<user, base64url>.<issued,
// unix seconds>.<MAC, base64url>".
func signCookie(key []byte, instance, kind, user string, issued time.Time, stamp string) string {
	sec := issued.Unix()
	return cookieVersion + "." + base64.RawURLEncoding.EncodeToString([]byte(user)) + "." +
		strconv.FormatInt(sec, 10) + "." +
		base64.RawURLEncoding.EncodeToString(cookieMAC(key, instance, kind, user, sec, stamp))
}

// parseCookie splits a login cookie's value into its user and issue time,
// without checking the MAC (the stamp to check it with depends on the
// user: verifyCookie).
func parseCookie(v string) (user string, issued int64, mac []byte, ok bool) {
	parts := strings.Split(v, ".")
	if len(parts) != 4 || parts[0] != cookieVersion {
		return "", 0, nil, false
	}
	u, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", 0, nil, false
	}
	issued, err = strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return "", 0, nil, false
	}
	mac, err = base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil || len(mac) != sha256.Size {
		return "", 0, nil, false
	}
	return string(u), issued, mac, true
}

// verifyCookie checks a parsed cookie's MAC (constant time) and age: issued
// at most CookieMaxAge before now, and not in the future (a minute of
// clock skew allowed).
func verifyCookie(key []byte, instance, kind, user string, issued int64, mac []byte, stamp string, now time.Time) bool {
	t := time.Unix(issued, 0)
	if now.Sub(t) > CookieMaxAge || t.Sub(now) > time.Minute {
		return false
	}
	return hmac.Equal(mac, cookieMAC(key, instance, kind, user, issued, stamp))
}
