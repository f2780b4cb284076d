package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// TestListenUnix: --addr unix:/path listens on a 0660 socket, replaces the
// stale socket a crash left, and refuses a file that is not a socket and a
// socket something still listens on.
func TestListenUnix(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "dg.sock")

	// A crash leaves the socket file behind: nothing listens on it.
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the stale socket is not there: %v", err)
	}
	ln, err := listen("unix:"+path, nil)
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v, want a 0660 socket", fi.Mode())
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	var refused *startupError
	if _, err := listen("unix:"+path, nil); !errors.As(err, &refused) {
		t.Fatalf("listen where something listens: %v, want a refusal", err)
	}
	ln.Close()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the socket outlived its listener: %v", err)
	}

	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := listen("unix:"+plain, nil); !errors.As(err, &refused) {
		t.Fatalf("listen on a regular file: %v, want a refusal", err)
	}
	if b, _ := os.ReadFile(plain); string(b) != "keep me" {
		t.Fatal("listen replaced a regular file")
	}
}

// TestCookieSecrets: without users, instances with the same tokens (a
// cluster's nodes, a restart on another port) share cookie key and name,
// and instances with other tokens do not; with users, two instances on one
// state directory (one key) but different addresses or base paths name
// their cookies apart, and one restarted on its address keeps its name.
func TestCookieSecrets(t *testing.T) {
	t.Parallel()
	k1, n1 := cookieSecrets(false, "tok", "adm", "state-a", "127.0.0.1:8787", "/")
	k2, n2 := cookieSecrets(false, "tok", "adm", "state-b", "127.0.0.1:9999", "/")
	if string(k1) != string(k2) || n1 != n2 {
		t.Fatal("two nodes with the same tokens do not share their login cookies")
	}
	if k3, n3 := cookieSecrets(false, "other", "adm", "state-a", "127.0.0.1:8787", "/"); string(k3) == string(k1) || n3 == n1 {
		t.Fatal("instances with different tokens share a cookie key or name")
	}
	if k, _ := cookieSecrets(false, "tok", "adm", "state-a", "127.0.0.1:8787", "/"); string(k) == "tok" || string(k) == "state-a" {
		t.Fatal("the cookie key is a token or the state key itself")
	}
	_, a := cookieSecrets(true, "tok", "adm", "k", "127.0.0.1:8787", "/")
	if _, again := cookieSecrets(true, "tok", "adm", "k", "127.0.0.1:8787", "/"); again != a {
		t.Fatal("the cookie name changes across restarts")
	}
	for _, other := range []string{
		cookieInstance("k", "127.0.0.1:8788", "/"),
		cookieInstance("k", "127.0.0.1:8787", "/b/"),
		cookieInstance("k2", "127.0.0.1:8787", "/"),
	} {
		if other == a {
			t.Fatalf("two instances share the cookie name %s", a)
		}
	}
	if key, _ := cookieSecrets(true, "tok", "adm", "k", "127.0.0.1:8787", "/"); string(key) != "k" {
		t.Fatal("with users the cookies are not signed with the state directory's key")
	}
}

// TestSIGHUPWithoutUsersFile: without --users-file, SIGHUP (a closed
// terminal, or systemctl reload) stops dashgate as SIGTERM does: exit 0
// after "dashgate stopped", never the signal's default death.
func TestSIGHUPWithoutUsersFile(t *testing.T) {
	t.Parallel()
	in := startInstance(t, "hup", filepath.Join(t.TempDir(), "state"), "--store", "none")
	if err := syscall.Kill(in.PID(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-in.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("dashgate still runs 30 s after SIGHUP")
	}
	if code := in.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGHUP, want 0; log:\n%s", code, in.Log.Tail(20))
	}
	if len(in.Log.Records("dashgate stopped")) != 1 {
		t.Fatalf("no clean stop after SIGHUP; log:\n%s", in.Log.Tail(20))
	}
}

// TestServeUnixSocket: dashgate on --addr unix:/path answers over it, and
// removes the socket when it stops.
func TestServeUnixSocket(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "dg.sock")
	in := startInstance(t, "unix", filepath.Join(dir, "state"), "--store", "none", "--addr", "unix:"+sock)
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://dashgate/admin/api/sessions", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET over the Unix socket: %s", res.Status)
	}
	if code := stop(t, in); code != 0 {
		t.Fatalf("exit %d", code)
	}
	testkit.WaitFor(t, 5*time.Second, "the socket file removed", func() bool {
		_, err := os.Lstat(sock)
		return errors.Is(err, os.ErrNotExist)
	})
}
