package e2e_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// nginxPath is the reverse proxy the deploy tests run. Like Chromium, its
// absence skips them unless DASHGATE_E2E=1.
const nginxPath = "/usr/sbin/nginx"

// requireNginx skips the test when nginx is missing, unless DASHGATE_E2E=1
// asks for the suite to run for real.
func requireNginx(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(nginxPath); err != nil {
		if os.Getenv("DASHGATE_E2E") == "1" {
			t.Fatalf("%s is missing and DASHGATE_E2E=1: install it with scripts/e2e-deps.sh", nginxPath)
		}
		t.Skipf("%s not found: nginx tests skipped (install it with scripts/e2e-deps.sh; set DASHGATE_E2E=1 to make this a failure)", nginxPath)
	}
}

// nginx is one running nginx serving a rendered deploy file, owned by one test.
type nginx struct {
	t       *testing.T
	dir     string // its prefix: nginx.conf, the rendered site file, logs, temp dirs
	addr    string // 127.0.0.1:port
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
}

// nginxSite says how to render a deploy file: upstreams replace, in order,
// every occurrence of the file's 127.0.0.1:8787 and 127.0.0.1:8788 (the
// cluster file names each node in several upstream blocks); socket
// replaces every occurrence of the file's Unix socket
// (/run/dashgate/dashgate.sock), and then nginx's workers run as
// nginxWorkerUser, as the shipped files assume; readTimeout, when set,
// replaces the value of proxy_read_timeout.
type nginxSite struct {
	file        string // under deploy/nginx
	upstreams   []string
	socket      string
	readTimeout string
}

// deployUpstreams are the upstream addresses the deploy files name, in the
// order nginxSite.upstreams replaces them.
var deployUpstreams = []string{"127.0.0.1:8787", "127.0.0.1:8788"}

// deploySocket is the Unix socket the deploy files name (dashgate's --addr
// unix:..., nginx's `server unix:...;`).
const deploySocket = "/run/dashgate/dashgate.sock"

// nginxWorkerUser is the account of Debian's nginx workers, which the
// deploy files on a Unix socket name in --proxy-user.
const nginxWorkerUser = "www-data"

// renderSite reads deploy/nginx/<file> as it is and substitutes only the
// listen port, the upstream addresses and (if asked) proxy_read_timeout.
// The listen port and proxy_read_timeout must be found exactly once, each
// upstream address at least once (all its occurrences are replaced, in one
// pass, so an address substituted in never matches the next one): a deploy
// file that changed shape fails here rather than being tested
// half-rendered.
func renderSite(t *testing.T, site nginxSite, port int) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "nginx", site.file))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(b)
	replaceOnce := func(what string, re *regexp.Regexp, with string) {
		t.Helper()
		if n := len(re.FindAllStringIndex(conf, -1)); n != 1 {
			t.Fatalf("deploy/nginx/%s: %s found %d times, want once (pattern %s)", site.file, what, n, re)
		}
		conf = re.ReplaceAllString(conf, with) // with may use ${1}
	}
	replaceOnce("listen 8080;", regexp.MustCompile(`(?m)^\s*listen 8080;`), fmt.Sprintf("    listen 127.0.0.1:%d;", port))
	if len(site.upstreams) > len(deployUpstreams) {
		t.Fatalf("at most %d upstreams can be substituted", len(deployUpstreams))
	}
	if len(site.upstreams) > 0 {
		with := map[string]string{}
		var alts []string
		for i, up := range site.upstreams {
			from := deployUpstreams[i]
			with[from] = up
			alts = append(alts, regexp.QuoteMeta(from))
			if !regexp.MustCompile(`\b` + regexp.QuoteMeta(from) + `\b`).MatchString(conf) {
				t.Fatalf("deploy/nginx/%s: upstream %s not found", site.file, from)
			}
		}
		re := regexp.MustCompile(`\b(?:` + strings.Join(alts, "|") + `)\b`)
		conf = re.ReplaceAllStringFunc(conf, func(m string) string { return with[m] })
	}
	for _, left := range deployUpstreams[len(site.upstreams):] {
		if strings.Contains(conf, left) {
			t.Fatalf("deploy/nginx/%s names upstream %s too: give the test one more instance", site.file, left)
		}
	}
	switch {
	case site.socket != "" && !strings.Contains(conf, deploySocket):
		t.Fatalf("deploy/nginx/%s: socket %s not found", site.file, deploySocket)
	case site.socket != "":
		conf = strings.ReplaceAll(conf, deploySocket, site.socket)
	case regexp.MustCompile(`(?m)^\s*server\s+unix:`).MatchString(conf):
		t.Fatalf("deploy/nginx/%s has a Unix socket upstream: give the test a socket", site.file)
	}
	if site.readTimeout != "" {
		replaceOnce("proxy_read_timeout", regexp.MustCompile(`(?m)^(\s*)proxy_read_timeout\s+[^;\n]+;`), "${1}proxy_read_timeout "+site.readTimeout+";")
	}
	return conf
}

// startNginx renders site, wraps it in a minimal nginx.conf in a temp dir
// and runs nginx on it as a child of the test, on a free loopback port. It
// returns once nginx answers HTTP; the cleanup stops it with SIGQUIT and
// waits for it (nginx then waits for its open connections, so tests close
// their sockets first: cleanups run last-in first-out).
func startNginx(t *testing.T, site nginxSite) *nginx {
	t.Helper()
	requireNginx(t)
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		n, err := tryStartNginx(t, site)
		if err == nil {
			return n
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	t.Fatal(lastErr)
	return nil
}

var errPortTaken = errors.New("port taken")

func tryStartNginx(t *testing.T, site nginxSite) (*nginx, error) {
	t.Helper()
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	workers := ""
	if site.socket != "" {
		workers = nginxWorkerUser
	}
	dir := nginxDir(t, workers)
	n := &nginx{t: t, dir: dir, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), exited: make(chan struct{})}
	sitePath := filepath.Join(dir, site.file)
	if err := os.WriteFile(sitePath, []byte(renderSite(t, site, port)), 0o644); err != nil {
		return nil, err
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	confPath := writeNginxMain(t, dir, sitePath, workers)
	out, err := os.Create(p("nginx.out"))
	if err != nil {
		return nil, err
	}
	defer out.Close()
	n.cmd = exec.Command(nginxPath, "-c", confPath, "-p", dir+"/")
	n.cmd.Stdout, n.cmd.Stderr = out, out
	n.cmd.Env = testkit.CleanEnv()
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start nginx: %w", err)
	}
	testkit.Own(n.cmd.Process.Pid)
	go func() {
		n.waitErr = n.cmd.Wait()
		testkit.Disown(n.cmd.Process.Pid)
		close(n.exited)
	}()

	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	answered := testkit.Until(10*time.Second, func() bool {
		select {
		case <-n.exited:
			return true
		default:
		}
		res, err := client.Get("http://" + n.addr + "/")
		if err != nil {
			return false
		}
		res.Body.Close()
		return true
	})
	select {
	case <-n.exited:
		logs := n.logs()
		if strings.Contains(logs, "Address already in use") {
			return nil, fmt.Errorf("%w: %s", errPortTaken, logs)
		}
		return nil, fmt.Errorf("nginx exited at startup (%v):\n%s", n.waitErr, logs)
	default:
	}
	t.Cleanup(n.stop)
	if !answered {
		return nil, fmt.Errorf("nginx did not answer on %s within 10s:\n%s", n.addr, n.logs())
	}
	return n, nil
}

// writeNginxMain writes dir/nginx.conf: a minimal main configuration,
// with every path inside dir, including site, and returns its path. Its
// workers run as the account workers when not "" (the master stays root);
// else, as root, as root too: they would otherwise run as nobody, who
// cannot enter the test's private temp dir.
func writeNginxMain(t *testing.T, dir, site, workers string) string {
	t.Helper()
	p := func(name string) string { return filepath.Join(dir, name) }
	user := ""
	switch {
	case workers != "":
		user = fmt.Sprintf("user %s %s;\n", workers, workers)
	case os.Geteuid() == 0:
		user = "user root root;\n"
	}
	temps := ""
	for _, name := range nginxTempDirs {
		temps += fmt.Sprintf("    %s_path %s;\n", name, p(name))
	}
	main := fmt.Sprintf(`%sdaemon off;
master_process on;
worker_processes 1;
pid %s;
error_log %s info;
events { worker_connections 256; }
http {
    access_log %s;
%s    include %s;
}
`, user, p("nginx.pid"), p("error.log"), p("access.log"), temps, site)
	path := p("nginx.conf")
	if err := os.WriteFile(path, []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// nginxTempDirs are the temp paths writeNginxMain puts in nginx's prefix.
var nginxTempDirs = []string{"client_body_temp", "proxy_temp", "fastcgi_temp", "uwsgi_temp", "scgi_temp"}

// nginxDir makes nginx's prefix directory, removed at cleanup (registered
// before nginx's stop, so it runs after it). With workers (an account,
// e.g. www-data) it is 0755 (t.TempDir is 0700, which the workers could
// not enter to read the htpasswd) and the temp dirs in it are the
// workers', as they would be under /var/lib/nginx.
func nginxDir(t *testing.T, workers string) string {
	t.Helper()
	if workers == "" {
		return t.TempDir()
	}
	uid, gid := lookupAccount(t, workers)
	dir := dirForAll(t, "dashgate-nginx-")
	for _, name := range nginxTempDirs {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// dirForAll is a new temporary directory every account may enter (0755),
// removed with what it holds at cleanup.
func dirForAll(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // MkdirTemp makes it 0700
		t.Fatal(err)
	}
	return dir
}

// lookupAccount is the uid and primary gid of the account name.
func lookupAccount(t *testing.T, name string) (uid, gid int) {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("account %s (the deploy files' nginx workers): %v", name, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		t.Fatalf("account %s: uid %q gid %q", name, u.Uid, u.Gid)
	}
	return uid, gid
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// URL is the absolute URL of path (which starts with "/") on nginx.
func (n *nginx) URL(path string) string { return "http://" + n.addr + path }

// WS is the ws:// URL of path on nginx.
func (n *nginx) WS(path string) string { return "ws://" + n.addr + path }

// Origin is what a browser on a page served by this nginx sends as Origin.
func (n *nginx) Origin() string { return "http://" + n.addr }

func (n *nginx) logs() string {
	var b strings.Builder
	for _, name := range []string{"nginx.out", "error.log"} {
		if c, err := os.ReadFile(filepath.Join(n.dir, name)); err == nil && len(c) > 0 {
			fmt.Fprintf(&b, "--- %s\n%s", name, c)
		}
	}
	return b.String()
}

// stop ends nginx gracefully (SIGQUIT) and waits for it; on failure its
// logs become artifacts.
func (n *nginx) stop() {
	t := n.t
	select {
	case <-n.exited:
		t.Errorf("nginx exited before the end of the test: %v\n%s", n.waitErr, n.logs())
	default:
		n.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-n.exited:
			if n.waitErr != nil {
				t.Errorf("nginx exited with %v after SIGQUIT", n.waitErr)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("nginx did not exit within 15s of SIGQUIT (a socket the test left open?); killing it")
			n.cmd.Process.Kill()
			<-n.exited
		}
	}
	// The master waits for its worker before it exits; anything left would
	// be reparented to us and found by the dashgate cleanups' reapOrphans.
	if t.Failed() {
		for _, name := range []string{"error.log", "access.log", "nginx.out", "nginx.conf"} {
			if b, err := os.ReadFile(filepath.Join(n.dir, name)); err == nil {
				writeArtifact(t, "nginx-"+name, b)
			}
		}
	}
}
