package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/dashgate/dashgate/users"
	"github.com/dashgate/dashgate/web"
)

// listen opens --addr: a TCP address, or unix:/path for a Unix socket a
// proxy on the same host connects to. A socket file left by a dashgate
// that died is removed; one something still listens on, or a file that is
// not a socket, is refused. The socket is made 0660: its group (put the
// proxy's user in dashgate's group, or use a directory only both can
// enter) decides who may connect. The listener removes the file when it
// is closed.
func listen(addr string) (net.Listener, error) {
	path, ok := unixPath(addr)
	if !ok {
		return net.Listen("tcp", addr)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, &startupError{fmt.Errorf("--addr %s: %s exists and is not a socket: refusing to replace it", addr, path)}
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, &startupError{fmt.Errorf("--addr %s: something listens there already", addr)}
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("--addr %s: remove the stale socket: %w", addr, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("--addr %s: %w", addr, err)
	}
	return ln, nil
}

// cookieInstance names this instance's login cookies: stable across
// restarts of one state directory and address, different for two
// instances on one host (which share the cookie jar of its name).
func cookieInstance(key, addr, basePath string) string {
	h := sha256.Sum256([]byte(key + "\x00" + addr + "\x00" + basePath))
	return hex.EncodeToString(h[:4])
}

// openUsers loads --users-file; a malformed or unsafe file refuses the
// start (exit 2) naming the line or the reason.
func openUsers(path string) (*users.File, error) {
	if path == "" {
		return nil, nil
	}
	f, err := users.Open(path)
	if err != nil {
		return nil, &startupError{fmt.Errorf("--users-file: %w", err)}
	}
	return f, nil
}

// reloadOnHUP reloads the users file on each SIGHUP until ctx ends: a
// file that does not load keeps the users as they were (one ERROR); after
// a reload the sockets of every user removed or given a new token are
// closed (4403), and their sessions detach.
func reloadOnHUP(ctx context.Context, uf *users.File, srv *web.Server, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		changed, err := uf.Reload()
		if err != nil {
			log.Error("users file not reloaded: the users stay as they were", "path", uf.Path(), "err", err)
			continue
		}
		closed := srv.Revoke(changed...)
		log.Info("users file reloaded", "path", uf.Path(), "users", uf.Current().Len(),
			"removed_or_changed", len(changed), "sockets_closed", closed)
	}
}
