package web_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/web"
)

// whoAmI answers the principal's user, and whether the proxy secret's
// header reached it (it must not).
var whoAmI = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	leaked := r.Header.Get(web.ProxySecretHeader) != ""
	fmt.Fprintf(w, "user=%s leaked=%v", handlers.PrincipalFrom(r.Context()).User, leaked)
})

func newProxyServer(t testing.TB, cfg web.Config, log *slog.Logger) *web.Server {
	t.Helper()
	cfg.Token, cfg.UserHeader, cfg.Log = "secret-token", "X-Forwarded-User", log
	s, err := web.New(cfg, web.Handlers{Chat: whoAmI, Terminal: whoAmI, Admin: &handlers.Admin{}, Export: whoAmI})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestProxySecret: over TCP, a --trusted-proxies peer names a user only
// with the proxy's secret: without it, or with a wrong one (one WARN, the
// secret not in it), the user header is ignored and the request needs a
// token (401); an address outside the range gets nothing even with the
// secret; and the header never reaches a handler.
func TestProxySecret(t *testing.T) {
	t.Parallel()
	const secret = "0123456789abcdef-the-proxy-secret"
	logs := &syncBuf{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	inRange := newProxyServer(t, web.Config{TrustedProxies: loopback, ProxySecret: []byte(secret)}, log)
	elsewhere := newProxyServer(t, web.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, ProxySecret: []byte(secret)}, log)
	for _, tc := range []struct {
		name   string
		s      *web.Server
		secret []string
		status int
		body   string
	}{
		{"no secret", inRange, nil, 401, ""},
		{"wrong secret", inRange, []string{"guess-guess-guess-guess"}, 401, ""},
		{"secret twice", inRange, []string{secret, secret}, 401, ""},
		{"the secret", inRange, []string{secret}, 200, "user=carol leaked=false"},
		{"the secret from outside the range", elsewhere, []string{secret}, 401, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.s)
			defer srv.Close()
			req, _ := http.NewRequest("GET", srv.URL+"/sessions/x/export", nil)
			req.Header.Set("X-Forwarded-User", "carol")
			for _, v := range tc.secret {
				req.Header.Add(web.ProxySecretHeader, v)
			}
			res, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.status || (tc.body != "" && string(b) != tc.body) {
				t.Fatalf("status %d %q, want %d %q", res.StatusCode, b, tc.status, tc.body)
			}
		})
	}
	if !strings.Contains(logs.String(), `"msg":"proxy secret refused: request not trusted"`) {
		t.Errorf("no WARN for the wrong secret:\n%s", logs)
	}
	if strings.Contains(logs.String(), "guess-guess") || strings.Contains(logs.String(), secret) {
		t.Errorf("a secret reached the log:\n%s", logs)
	}
}

// unixGetEnv makes the test binary an HTTP client of a Unix socket
// (TestProxyPeerCredentials runs it as other accounts): the socket path,
// then the user header's value after a newline; it prints the status and
// the body.
const unixGetEnv = "WEB_TEST_UNIX_GET"

func unixGet() {
	sock, user, _ := strings.Cut(os.Getenv(unixGetEnv), "\n")
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	req, _ := http.NewRequest("GET", "http://dashgate/sessions/x/export", nil)
	req.Header.Set("X-Forwarded-User", user)
	res, err := c.Do(req)
	if err != nil {
		fmt.Printf("error %v", err)
		os.Exit(1)
	}
	b, _ := io.ReadAll(res.Body)
	fmt.Printf("%d %s", res.StatusCode, b)
}

// TestProxyPeerCredentials: on a Unix socket with --proxy-user, the user
// header counts only from the proxy's processes (and dashgate's own
// account), by their peer credentials, not by who could open the socket:
// here the socket is 0666, and a neighbour's forged header still gets
// 401, while the proxy's account names the user.
func TestProxyPeerCredentials(t *testing.T) {
	t.Parallel()
	proxy := testkit.UnixUser(t, "proxy")
	neighbour := testkit.UnixUser(t, "neighbour")
	self := testkit.ExecutableByAll(t, os.Args[0])
	dir, err := os.MkdirTemp("", "dashgate-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "dashgate.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	peer, err := web.LookupProxyPeer(proxy.Name, os.Geteuid())
	if err != nil {
		t.Fatal(err)
	}
	s := newProxyServer(t, web.Config{ProxyPeer: &peer}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- web.Run(ctx, ln, s, 5*time.Second, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() { cancel(); <-done })

	get := func(t *testing.T, uid, gid uint32) string {
		t.Helper()
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(testkit.CleanEnv(), unixGetEnv+"="+sock+"\nbob")
		if uid != 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("client as uid %d: %v: %s", uid, err, out)
		}
		return string(out)
	}
	for _, tc := range []struct {
		name     string
		uid, gid uint32
		want     string
	}{
		{"a neighbour forging the header", neighbour.UID, neighbour.GID, "401 "},
		{"the proxy", proxy.UID, proxy.GID, "200 user=bob leaked=false"},
		{"dashgate's own account", uint32(os.Geteuid()), uint32(os.Getegid()), "200 user=bob leaked=false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := get(t, tc.uid, tc.gid); !strings.HasPrefix(got, tc.want) {
				t.Fatalf("got %q, want %q...", got, tc.want)
			}
		})
	}
}
