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
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/accounts"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/users"
	"github.com/dashgate/dashgate/web"
	"github.com/dashgate/dashgate/workers"
)

// listen opens --addr: a TCP address, or unix:/path for a Unix socket a
// proxy on the same host connects to. A socket file left by a dashgate
// that died is removed; one something still listens on, or a file that is
// not a socket, is refused. A missing parent directory is made (0755:
// the socket's own mode guards it). The socket is made 0660, owned by
// dashgate's account and, with proxy (--proxy-user), by the proxy's group,
// so that the proxy (and dashgate's account) can connect and nobody else
// can; without proxy, by dashgate's group. The listener removes the file
// when it is closed.
func listen(addr string, proxy *web.ProxyPeer) (net.Listener, error) {
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
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, &startupError{fmt.Errorf("--addr %s: %w", addr, err)}
	}
	// Made with the umask's mode (no write bit for others: nobody else can
	// connect meanwhile), then given to the proxy's group.
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if proxy != nil {
		if err := os.Lchown(path, -1, proxy.SocketGID); err != nil {
			ln.Close()
			return nil, &startupError{fmt.Errorf("--addr %s: give the socket to --proxy-user %s's group (gid %d): %w", addr, proxy.Name, proxy.SocketGID, err)}
		}
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("--addr %s: %w", addr, err)
	}
	return ln, nil
}

// cookieSecrets is the key that signs login cookies and the name they
// carry (web.Config's CookieKey and Instance).
//
// Without users, a cookie stands for the dashboard or admin token and
// nothing more, so it is signed with a key derived from the tokens and
// named after them: every instance with the same tokens (the nodes of a
// cluster behind one nginx, a restart on another port) takes the others'
// cookies, and instances with different tokens keep theirs apart.
//
// With users, a cookie names a user, so only this state directory's key
// (<state-dir>/cookie.key) signs it, and its name comes from that key, the
// bound address and the base path: two instances on one host keep both
// logins, and a restart on the same address keeps them. The nodes of a
// cluster use the cluster's key instead (clusterCookieSecrets).
func cookieSecrets(usersOn bool, token, adminToken, stateKey, addr, basePath string) (key []byte, name string) {
	if !usersOn {
		k := sha256.Sum256([]byte("dashgate cookie key\x00" + token + "\x00" + adminToken))
		n := sha256.Sum256(append(k[:], basePath...))
		return k[:], hex.EncodeToString(n[:4])
	}
	return []byte(stateKey), cookieInstance(stateKey, addr, basePath)
}

// clusterCookieSecrets is cookieSecrets for a node of a cluster with
// users: the key is the cluster's, kept in the shared store (the first
// node makes it), and the name comes from it and the base path, so a
// login made on one node is valid on every node (issue 41), and on no
// dashgate of another store. A removed or rotated user's cookie fails
// everywhere still: it carries the user's stamp, which every node checks
// against its users file. Errors: the store's, bounded by ctx.
func clusterCookieSecrets(ctx context.Context, cs store.ClusterSecrets, basePath string) (key []byte, name string, err error) {
	key, err = cs.ClusterSecret(ctx, "cookie", []byte(randomToken()))
	if err != nil {
		return nil, "", fmt.Errorf("the cluster's login key: %w", err)
	}
	return key, cookieInstance(string(key), "cluster", basePath), nil
}

// cookieInstance names a users-mode instance's login cookies: stable
// across restarts of one state directory and address, different for two
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

// openAccounts is --unix-users' map of dashgate users to Unix accounts,
// nil without the flag. It refuses to start (exit 2) when dashgate could
// not start children as another account: not root and without
// CAP_SETUID, CAP_SETGID, CAP_CHOWN (the pty) and CAP_KILL (signals to
// them); or when the map file is malformed.
func openAccounts(cfg config) (*accounts.Map, error) {
	if !cfg.UnixUsers {
		return nil, nil
	}
	if missing := missingCaps(); len(missing) > 0 {
		return nil, &startupError{fmt.Errorf("--unix-users: dashgate runs as uid %d without %s: run it as root, or grant them (deploy/systemd/dashgate-unix-users.service)",
			os.Geteuid(), strings.Join(missing, ", "))}
	}
	m, err := accounts.New(accounts.Options{MapFile: cfg.UnixUsersMap, AllowRoot: cfg.AllowRootUsers, Output: workers.Output})
	if err != nil {
		return nil, &startupError{fmt.Errorf("--unix-users-map: %w", err)}
	}
	return m, nil
}

// accountsLookup is sessions.Config.Accounts for m (nil: off).
func accountsLookup(m *accounts.Map) func(string) (*accounts.Account, error) {
	if m == nil {
		return nil
	}
	return m.Lookup
}

// missingCaps names the capabilities --unix-users needs that the process
// lacks in its effective set (none for root with a full set).
func missingCaps() []string {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return []string{"a readable capability set (" + err.Error() + ")"}
	}
	eff := uint64(data[0].Effective) | uint64(data[1].Effective)<<32
	var missing []string
	for _, c := range []struct {
		bit  uint
		name string
	}{{unix.CAP_SETUID, "CAP_SETUID"}, {unix.CAP_SETGID, "CAP_SETGID"}, {unix.CAP_CHOWN, "CAP_CHOWN"}, {unix.CAP_KILL, "CAP_KILL"}} {
		if eff&(1<<c.bit) == 0 {
			missing = append(missing, c.name)
		}
	}
	return missing
}
