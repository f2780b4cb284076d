package e2e_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/internal/testkit"
)

// The tests of issue 38: a shared box where every local account is a
// possible attacker of every other. A neighbour is a real Unix account
// (testkit.UnixUser) running this test binary as its client (neighbour.do).

// proxySecretHeader is the header the proxy sends --proxy-secret-file's
// secret in (web.ProxySecretHeader, named in the deploy files).
const proxySecretHeader = "X-Dashgate-Proxy-Secret"

// A neighbour on the box sends X-Forwarded-User straight to a dashgate
// that trusts 127.0.0.1 but wants the proxy's secret: without the secret
// it is nobody (401 on the admin API and on a terminal's upgrade, though
// the user it names is an admin); the same requests from the same account
// with the secret name the user, so the secret alone made the difference.
func TestSharedBoxNeighbourForgesHeaderOverTCP(t *testing.T) {
	mallory := newNeighbour(t, "mallory")
	secret, secretFile := writeProxySecret(t)
	d := startDashgate(t, "--user-header", "X-Forwarded-User", "--trusted-proxies", "127.0.0.1",
		"--proxy-secret-file", secretFile, "--admin-users", "carol")
	d.secrets = append(d.secrets, secret)
	origin := "http://" + d.Addr

	// carol's session, made through "the proxy": her name and the secret.
	proxied := http.Header{"X-Forwarded-User": {"carol"}, proxySecretHeader: {secret}}
	carol := openChat(t, "carol's chat through the proxy", d.WSURL("ws/chat"), testkit.DialOptions{Header: proxied, Origin: origin})
	sid := carol.createSession("carol's")
	if owner, ok := d.ownerOf(sid); !ok || owner != "carol" {
		t.Fatalf("the session made with the secret and X-Forwarded-User: carol is %q's (live %v), want carol's", owner, ok)
	}

	forged := map[string]string{"X-Forwarded-User": "carol", "Origin": origin}
	withSecret := map[string]string{"X-Forwarded-User": "carol", "Origin": origin, proxySecretHeader: secret}
	path := func(p string) string { return strings.TrimPrefix(d.URL(p), "http://"+d.Addr) }
	for _, c := range []struct {
		what    string
		ask     neighbourAsk
		want    int
		listsID bool // the body names carol's session
	}{
		{"the admin API, X-Forwarded-User: carol without the secret",
			neighbourAsk{Op: "http", Network: "tcp", Addr: d.Addr, Path: path("admin/api/sessions"), Header: forged}, http.StatusUnauthorized, false},
		{"carol's terminal, X-Forwarded-User: carol without the secret",
			neighbourAsk{Op: "http", Network: "tcp", Addr: d.Addr, Path: path("ws/pty?session_id=" + sid), Header: forged, Upgrade: true}, http.StatusUnauthorized, false},
		{"the admin API, X-Forwarded-User: carol with the secret",
			neighbourAsk{Op: "http", Network: "tcp", Addr: d.Addr, Path: path("admin/api/sessions"), Header: withSecret}, http.StatusOK, true},
		{"carol's terminal, X-Forwarded-User: carol with the secret",
			neighbourAsk{Op: "http", Network: "tcp", Addr: d.Addr, Path: path("ws/pty?session_id=" + sid), Header: withSecret, Upgrade: true}, http.StatusSwitchingProtocols, false},
	} {
		ans := mallory.do(c.ask)
		if ans.Err != "" || ans.Status != c.want {
			t.Errorf("%s (as %s, from 127.0.0.1): %d %s %.200q, want %d", c.what, mallory.Name, ans.Status, ans.Err, ans.Body, c.want)
		}
		if c.listsID && !strings.Contains(ans.Body, sid) {
			t.Errorf("%s: the list lacks carol's session %s: %.300s", c.what, sid, ans.Body)
		}
	}
}

// The shipped set-up (deploy/nginx/dashgate-auth-basic.conf: dashgate on
// a Unix socket for --proxy-user www-data, nginx's workers as www-data):
// the socket is www-data's group's alone and nginx names the right user;
// a neighbour cannot even connect to it, and on a socket a careless admin
// opened to everyone (0666) its X-Forwarded-User still names nobody, as
// its uid is not the proxy's.
func TestSharedBoxNeighbourOnProxySocket(t *testing.T) {
	mallory := newNeighbour(t, "mallory")
	d, n := startBehindAuthBasic(t, []string{"carol"}, "--admin-users", "carol")
	sock := d.socket()

	// The socket as the deploy file says dashgate makes it.
	_, wwwGID := lookupAccount(t, nginxWorkerUser)
	if st, err := os.Stat(sock); err != nil {
		t.Fatal(err)
	} else if sys := st.Sys().(*syscall.Stat_t); st.Mode().Perm() != 0o660 || int(sys.Gid) != wwwGID || sys.Uid != 0 {
		t.Errorf("%s: mode %04o uid %d gid %d, want 0660, root's, group %s (%d)", sock, st.Mode().Perm(), sys.Uid, sys.Gid, nginxWorkerUser, wwwGID)
	}
	if st, err := os.Stat(filepath.Dir(sock)); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("the socket's directory (made by dashgate): %v %v, want mode 0755", st.Mode(), err)
	}

	// carol through nginx (its workers, www-data, on the socket): her
	// session is hers, and she reads the admin API.
	carol := openChat(t, "carol's chat through nginx", n.WS("/ws/chat"), asUser(n, "carol"))
	sid := carol.createSession("carol's")
	if owner, ok := d.ownerOf(sid); !ok || owner != "carol" {
		t.Fatalf("carol's session through nginx is %q's (live %v), want carol's", owner, ok)
	}
	res, body := get(t, httpClient(t), n.URL("/admin/api/sessions"), basicAuth("carol"))
	if res.StatusCode != http.StatusOK || !strings.Contains(body, sid) {
		t.Fatalf("carol's /admin/api/sessions through nginx: %s %.300s, want 200 listing %s", res.Status, body, sid)
	}

	forged := map[string]string{"X-Forwarded-User": "carol", "Origin": "http://" + socketHost}
	admin := neighbourAsk{Op: "http", Network: "unix", Addr: sock, Path: d.socketPath("admin/api/sessions"), Header: forged}
	pty := neighbourAsk{Op: "http", Network: "unix", Addr: sock, Path: d.socketPath("ws/pty?session_id=" + sid), Header: forged, Upgrade: true}
	for what, ask := range map[string]neighbourAsk{"the admin API": admin, "carol's terminal": pty} {
		if ans := mallory.do(ask); ans.Errno != "EACCES" {
			t.Errorf("%s on the socket as %s: %d %q (%s), want permission denied (EACCES) at connect", what, mallory.Name, ans.Status, ans.Err, ans.Errno)
		}
	}

	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	for what, ask := range map[string]neighbourAsk{"the admin API": admin, "carol's terminal": pty} {
		if ans := mallory.do(ask); ans.Err != "" || ans.Status != http.StatusUnauthorized {
			t.Errorf("%s on a 0666 socket as %s with X-Forwarded-User: carol: %d %s %.200q, want 401", what, mallory.Name, ans.Status, ans.Err, ans.Body)
		}
	}
	if owner, ok := d.ownerOf(sid); !ok || owner != "carol" {
		t.Errorf("carol's session after the neighbour's attempts: owner %q, live %v", owner, ok)
	}
}

// With --unix-users every person served has a shell on the box: dashgate
// refuses (exit 2, one line naming the safe ways) to believe a user header
// from an address, and to take a token from the command line. With the
// token in DASHGATE_TOKEN or --token-file it starts, and a neighbour
// finds the token neither in /proc/<pid>/cmdline nor (unreadable to it) in
// /proc/<pid>/environ.
func TestSharedBoxUnixUsersRefusesUnsafeStart(t *testing.T) {
	mallory := newNeighbour(t, "mallory")
	dir := t.TempDir()
	file := filepath.Join(dir, "users")
	_, aliceToken := userAdd(t, file, "alice", "http://127.0.0.1/")
	bin := testkit.ExecutableByAll(t, dashgateBin)
	base := func(state string) []string {
		return []string{"serve", "--addr", "127.0.0.1:0", "--state-dir", filepath.Join(dir, state), "--log-format", "json",
			"--users-file", file, "--unix-users", "--cgroup", "auto"}
	}
	const argvToken = "argv-token-5d2e9b71c4"

	for _, c := range []struct {
		name  string
		args  []string
		env   []string
		wants []string // in the one line on stderr
	}{
		{"user header trusted by address",
			[]string{"--trusted-proxies", "127.0.0.1", "--user-header", "X-Forwarded-User"}, []string{"DASHGATE_TOKEN=" + testToken},
			[]string{"--trusted-proxies 127.0.0.1", "an address proves nothing", "--addr unix:", "--proxy-user", "--proxy-secret-file"}},
		{"token on the command line",
			[]string{"--token", argvToken}, nil,
			[]string{"--token on the command line", "/proc/<pid>/cmdline", "DASHGATE_TOKEN", "--token-file"}},
		{"admin token on the command line",
			[]string{"--admin-token", argvToken}, []string{"DASHGATE_TOKEN=" + testToken},
			[]string{"--admin-token on the command line", "/proc/<pid>/cmdline", "DASHGATE_ADMIN_TOKEN", "--admin-token-file"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A refusal is immediate; a dashgate that serves instead is
			// killed at the deadline (exit -1).
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, append(base("refused"), c.args...)...)
			cmd.Env = append(testkit.CleanEnv(), c.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			cmd.Run()
			line := strings.TrimSpace(stderr.String())
			if code := cmd.ProcessState.ExitCode(); code != 2 {
				t.Fatalf("dashgate --unix-users %s: exit %d, want 2; stderr:\n%s", strings.Join(c.args, " "), code, stderr.String())
			}
			if line == "" || strings.Contains(line, "\n") || stdout.Len() > 0 {
				t.Errorf("the refusal: stderr %q, stdout %q; want one line on stderr", stderr.String(), stdout.String())
			}
			for _, w := range c.wants {
				if !strings.Contains(line, w) {
					t.Errorf("the refusal does not say %q: %s", w, line)
				}
			}
			if strings.Contains(line, argvToken) {
				t.Errorf("the refusal repeats the token: %s", line)
			}
		})
	}

	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		env  []string
	}{
		{"DASHGATE_TOKEN", nil, []string{"DASHGATE_TOKEN=" + testToken}},
		{"--token-file", []string{"--token-file", tokenFile}, nil},
	} {
		t.Run("starts with "+c.name, func(t *testing.T) {
			d := launchBin(t, testkit.Options{Bin: bin, Dir: t.TempDir(), Token: testToken, Exact: true,
				Args: append(base("state-"+strings.Trim(c.name, "-")), c.args...), Env: append(testkit.CleanEnv(), c.env...)})
			d.secrets = append(d.secrets, aliceToken)
			d.Sessions() // the admin API answers the token: it was taken
			cmdline := mallory.do(neighbourAsk{Op: "read", Path: fmt.Sprintf("/proc/%d/cmdline", d.PID())})
			if cmdline.Err != "" || !strings.Contains(cmdline.Body, "--unix-users") {
				t.Fatalf("%s reading dashgate's /proc/%d/cmdline: %q %s, want its arguments", mallory.Name, d.PID(), cmdline.Body, cmdline.Err)
			}
			if strings.Contains(cmdline.Body, testToken) {
				t.Errorf("%s finds the token in dashgate's command line: %q", mallory.Name, cmdline.Body)
			}
			if env := mallory.do(neighbourAsk{Op: "read", Path: fmt.Sprintf("/proc/%d/environ", d.PID())}); env.Errno != "EACCES" {
				t.Errorf("%s reading dashgate's /proc/%d/environ: %q %s, want permission denied", mallory.Name, d.PID(), env.Body, env.Err)
			}
		})
	}
}

// Without --unix-users dashgate still starts with a user header trusted
// by address, but says once, at WARN, that every local process can then
// name itself any user; with the proxy's secret it does not.
func TestSharedBoxAddressTrustWarns(t *testing.T) {
	warnings := func(d *dashgate) []logRecord {
		// Start-up's records: everything before "dashgate listening".
		var out []logRecord
		for _, r := range d.Log.Records("") {
			if r.Msg() == "dashgate listening" {
				break
			}
			if r.Str("level") == "WARN" {
				out = append(out, r)
			}
		}
		return out
	}
	d := startDashgate(t, "--user-header", "X-Forwarded-User", "--trusted-proxies", "127.0.0.1")
	ws := warnings(d)
	if len(ws) != 1 {
		t.Fatalf("--user-header with --trusted-proxies 127.0.0.1: %d WARN records at start, want 1: %v", len(ws), ws)
	}
	if msg := ws[0].Msg(); !strings.Contains(msg, "every local process") || !strings.Contains(msg, "any user") || !strings.Contains(msg, "127.0.0.1") {
		t.Errorf("the WARN %q does not say that every local process (127.0.0.1) can name itself any user", msg)
	}

	secret, secretFile := writeProxySecret(t)
	proven := startDashgate(t, "--user-header", "X-Forwarded-User", "--trusted-proxies", "127.0.0.1", "--proxy-secret-file", secretFile)
	proven.secrets = append(proven.secrets, secret)
	if ws := warnings(proven); len(ws) != 0 {
		t.Errorf("with --proxy-secret-file: WARN records at start %v, want none", ws)
	}
}

// 300 silent TCP connections from one peer, each re-opened as soon as the
// server closes it, do not deny the service: /healthz answers and an
// authenticated chat makes a session and runs /echo meanwhile.
func TestSharedBoxSilentConnectionsFlood(t *testing.T) {
	d := startDashgate(t)
	const silent = 300
	f := startSilentFlood(t, d.Addr, silent)
	// The flood's steady state: every connection opened, and as many more
	// re-opened after the server closed them (budget or header timeout).
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("%d silent connections open and %d re-opened", silent, silent), func() bool {
		return f.opened.Load() >= 2*silent
	})
	t.Logf("flood: %d connections opened, %d closed by the server, %d dial errors", f.opened.Load(), f.closed.Load(), f.dialErrs.Load())

	healthz := func(when string) {
		t.Helper()
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
		defer c.CloseIdleConnections()
		for i := range 10 {
			res, err := c.Get(d.URL("healthz"))
			if err != nil {
				t.Fatalf("GET /healthz %s (%d of 10): %v", when, i+1, err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("GET /healthz %s (%d of 10): %s, want 200", when, i+1, res.Status)
			}
		}
	}
	healthz("during the flood")
	chat := openChat(t, "chat during the flood", d.WSURL("ws/chat"), testkit.DialOptions{Token: testToken})
	sid := chat.createSession("during the flood")
	chat.mustEcho(sid, "hi")
	healthz("after the chat, the flood still on")
	if f.live() == 0 {
		t.Fatalf("the flood ended before the checks (%d dial errors)", f.dialErrs.Load())
	}
	t.Logf("flood at the end: %d opened, %d closed by the server, %d dial errors", f.opened.Load(), f.closed.Load(), f.dialErrs.Load())
}

// silentFlood holds n TCP connections to one address that never send a
// byte; each one the server closes is opened again at once, by the
// goroutine that held it, until the flood ends (the test's cleanup).
type silentFlood struct {
	opened, closed, dialErrs atomic.Int64
	holders                  atomic.Int64 // goroutines still holding

	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	ended bool
	conns map[net.Conn]struct{}
}

func startSilentFlood(t *testing.T, addr string, n int) *silentFlood {
	f := &silentFlood{stop: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	f.holders.Store(int64(n))
	for range n {
		f.wg.Add(1)
		go f.hold(addr)
	}
	t.Cleanup(f.end)
	return f
}

// live is the number of goroutines still holding a connection (a dial
// error ends one).
func (f *silentFlood) live() int64 { return f.holders.Load() }

func (f *silentFlood) hold(addr string) {
	defer f.wg.Done()
	defer f.holders.Add(-1)
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	var buf [512]byte
	for {
		c, err := dialer.Dial("tcp", addr)
		if err != nil {
			f.dialErrs.Add(1)
			return
		}
		f.mu.Lock()
		if f.ended {
			f.mu.Unlock()
			c.Close()
			return
		}
		f.conns[c] = struct{}{}
		f.mu.Unlock()
		f.opened.Add(1)
		for {
			if _, err := c.Read(buf[:]); err != nil {
				break // closed by the server (or by end)
			}
		}
		f.mu.Lock()
		delete(f.conns, c)
		ended := f.ended
		f.mu.Unlock()
		c.Close()
		if ended {
			return
		}
		f.closed.Add(1)
	}
}

// end closes every connection and waits for the goroutines.
func (f *silentFlood) end() {
	f.mu.Lock()
	f.ended = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// writeProxySecret writes a new proxy secret to a 0600 file of the test
// and returns it and the file's path.
func writeProxySecret(t *testing.T) (secret, path string) {
	t.Helper()
	var b [24]byte
	rand.Read(b[:])
	secret = hex.EncodeToString(b[:])
	path = filepath.Join(t.TempDir(), "proxy-secret")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return secret, path
}

// envNeighbour, when set, makes the test binary a neighbour's client
// (TestMain calls neighbourMain): it does the neighbourAsk the variable
// holds as JSON and prints a neighbourAnswer as JSON on stdout.
const envNeighbour = "DASHGATE_E2E_NEIGHBOUR"

// neighbourAsk is what a neighbour does: an HTTP request (Op "http") to
// Addr over Network ("tcp": host:port, "unix": a socket's path), a
// WebSocket upgrade when Upgrade; or reading the file Path (Op "read").
type neighbourAsk struct {
	Op      string            `json:"op"`
	Network string            `json:"network,omitempty"`
	Addr    string            `json:"addr,omitempty"`
	Path    string            `json:"path"`
	Header  map[string]string `json:"header,omitempty"`
	Upgrade bool              `json:"upgrade,omitempty"`
}

// neighbourAnswer is what came of a neighbourAsk: the status and body of
// the response (the body is the file's for Op "read"), or the error and
// its errno's name (EACCES).
type neighbourAnswer struct {
	UID    int    `json:"uid"`
	Status int    `json:"status"`
	Body   string `json:"body"`
	Err    string `json:"err"`
	Errno  string `json:"errno"`
}

// neighbour is a local account of the box that runs this test binary as
// its client (neighbourMain), from a copy every account can run.
type neighbour struct {
	testkit.UnixAccount
	t   *testing.T
	bin string
}

// newNeighbour makes a real account (testkit.UnixUser: removed, with every
// process of it, at the end of the test) to attack from. Made before the
// test's dashgate, it is removed after that dashgate's checking stop.
func newNeighbour(t *testing.T, label string) *neighbour {
	t.Helper()
	a := testkit.UnixUser(t, label)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &neighbour{UnixAccount: a, t: t, bin: testkit.ExecutableByAll(t, self)}
}

// do runs the client as the account (its uid and gid, no supplementary
// group) to do ask, and returns what came of it.
func (n *neighbour) do(ask neighbourAsk) neighbourAnswer {
	t := n.t
	t.Helper()
	b, err := json.Marshal(ask)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.bin, "-test.run=^$")
	cmd.Env = []string{envNeighbour + "=" + string(b), "PATH=/usr/bin:/bin", "HOME=" + n.Home}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: n.UID, Gid: n.GID}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the neighbour %s: %v\n%s", n.Name, err, stderr.String())
	}
	var ans neighbourAnswer
	if err := json.Unmarshal(out, &ans); err != nil {
		t.Fatalf("the neighbour %s printed %q: %v", n.Name, out, err)
	}
	if ans.UID != int(n.UID) {
		t.Fatalf("the neighbour ran as uid %d, want %s's %d", ans.UID, n.Name, n.UID)
	}
	return ans
}

// neighbourMain is the test binary run as a neighbour: it does the ask of
// req and prints the answer. Its exit code is 0 unless req is malformed.
func neighbourMain(req string) int {
	var ask neighbourAsk
	if err := json.Unmarshal([]byte(req), &ask); err != nil {
		fmt.Fprintln(os.Stderr, "neighbour:", err)
		return 2
	}
	ans := neighbourDo(ask)
	ans.UID = os.Getuid()
	if err := json.NewEncoder(os.Stdout).Encode(ans); err != nil {
		return 1
	}
	return 0
}

func neighbourDo(ask neighbourAsk) neighbourAnswer {
	fail := func(err error) neighbourAnswer {
		ans := neighbourAnswer{Err: err.Error()}
		var errno syscall.Errno
		if errors.As(err, &errno) {
			ans.Errno = unix.ErrnoName(errno)
		}
		return ans
	}
	switch ask.Op {
	case "read":
		b, err := os.ReadFile(ask.Path)
		if err != nil {
			return fail(err)
		}
		return neighbourAnswer{Body: string(b)}
	case "http":
	default:
		return fail(fmt.Errorf("unknown op %q", ask.Op))
	}
	host := ask.Addr
	if ask.Network == "unix" {
		host = socketHost
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+ask.Path, nil)
	if err != nil {
		return fail(err)
	}
	for k, v := range ask.Header {
		req.Header.Set(k, v)
	}
	if ask.Upgrade {
		var key [16]byte
		rand.Read(key[:])
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", base64.StdEncoding.EncodeToString(key[:]))
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, ask.Network, ask.Addr)
	}}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return fail(err)
	}
	defer res.Body.Close()
	ans := neighbourAnswer{Status: res.StatusCode}
	if res.StatusCode != http.StatusSwitchingProtocols { // an opened socket is closed unread
		b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		ans.Body = string(b)
	}
	return ans
}

// One user cannot push another out, with the defaults: with users on, the
// per-user caps are shares of the global ones (--max-sessions 8 and
// --max-workers 8 give each user 2 sessions, 1 chat worker, 1 terminal),
// so alice asking for eight sessions and a worker in each gets 4029 naming
// the per-user flags, and bob's detached session, his worker and his
// terminal are still there for him. With the per-user caps off (0), the
// global caps still take only from whoever is over their fair share: at
// --max-workers alice's idle worker is closed for bob (reason=reclaimed),
// not bob refused.
func TestSharedBoxFairShare(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "users")
	_, aliceToken := userAdd(t, file, "alice", "http://127.0.0.1/")
	_, bobToken := userAdd(t, file, "bob", "http://127.0.0.1/")
	is4029 := func(err error, flag string) bool {
		var rpc *testkit.RPCError
		return errors.As(err, &rpc) && rpc.Code == 4029 && strings.Contains(rpc.Message, flag)
	}

	t.Run("the defaults", func(t *testing.T) {
		d := startDashgate(t, "--users-file", file, "--max-sessions", "8", "--max-workers", "8", "--pty-spare=false")
		d.secrets = append(d.secrets, aliceToken, bobToken)
		bob := openChat(t, "bob's chat", d.WSURL("ws/chat"), testkit.DialOptions{Token: bobToken})
		b1 := bob.createSession("bob's")
		bob.mustEcho(b1, "before")
		bob.Close() // detached: what a global LRU evicted for alice on main
		testkit.WaitFor(t, 10*time.Second, "bob's session detached", func() bool {
			for _, s := range d.adminSessions() {
				if s.SessionID == b1 {
					return s.State == "detached"
				}
			}
			return false
		})

		alice := openChat(t, "alice's chat", d.WSURL("ws/chat"), testkit.DialOptions{Token: aliceToken})
		var mine []string
		for i := range 8 {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			sid, err := alice.CreateSession(ctx, fmt.Sprintf("a%d", i))
			cancel()
			switch {
			case err == nil:
				mine = append(mine, sid)
			case !is4029(err, "--max-sessions-per-user"):
				t.Fatalf("alice's session %d: %v, want a session or error 4029 naming --max-sessions-per-user", i, err)
			}
		}
		if len(mine) != 2 {
			t.Fatalf("alice holds %d sessions, want her default share 2 (a quarter of --max-sessions 8)", len(mine))
		}
		alice.mustEcho(mine[0], "mine")
		if _, err := alice.slash(mine[1], "/echo more"); !is4029(err, "--max-workers-per-user") {
			t.Fatalf("alice's second worker: %v, want error 4029 naming --max-workers-per-user", err)
		}

		bob = openChat(t, "bob's chat again", d.WSURL("ws/chat"), testkit.DialOptions{Token: bobToken})
		bob.mustCall("session.resume", map[string]any{"session_id": b1}, nil)
		bob.mustEcho(b1, "after")
		pty := openPTY(t, "bob's terminal", d.WSURL("ws/pty?session_id="+b1), testkit.DialOptions{Token: bobToken})
		if err := pty.run("echo bob-term", exactly("bob-term"), 10*time.Second); err != nil {
			t.Fatal(err)
		}
		for _, r := range d.Log.Records("session closed") {
			if r.Str("user") == "bob" {
				t.Errorf("bob's session was closed: %s", r)
			}
		}
	})

	t.Run("the per-user caps off", func(t *testing.T) {
		d := startDashgate(t, "--users-file", file, "--max-workers", "2", "--pty-spare=false",
			"--max-sessions-per-user", "0", "--max-workers-per-user", "0", "--max-terminals-per-user", "0")
		d.secrets = append(d.secrets, aliceToken, bobToken)
		alice := openChat(t, "alice's chat", d.WSURL("ws/chat"), testkit.DialOptions{Token: aliceToken})
		a1, a2 := alice.createSession("a1"), alice.createSession("a2")
		alice.mustEcho(a1, "one")
		alice.mustEcho(a2, "two") // both workers of the box: alice's, idle
		bob := openChat(t, "bob's chat", d.WSURL("ws/chat"), testkit.DialOptions{Token: bobToken})
		b1 := bob.createSession("b1")
		bob.mustEcho(b1, "mine too")
		testkit.WaitFor(t, 10*time.Second, "a worker closed record with reason reclaimed", func() bool {
			for _, r := range d.Log.Records("worker closed") {
				if r.Str("reason") == "reclaimed" && r.Str("user") == "alice" && r.Str("for_user") == "bob" {
					return true
				}
			}
			return false
		})
		alice.mustEcho(a1, "again") // her session stays; a worker starts again
	})
}
