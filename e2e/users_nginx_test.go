package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The many-user deploy files (issue 24): nginx in front of dashgate with
// auth_basic, and with auth_request to oauth2-proxy.
var userDeployFiles = []string{"dashgate-auth-basic.conf", "dashgate-oauth2-proxy.conf"}

// TestNginxExamplesParse renders each many-user deploy file as the other
// nginx tests do (the listen port and dashgate's Unix socket substituted),
// wraps it in a minimal nginx.conf in a temp dir with the workers as
// www-data, as the files assume, and checks it with `nginx -t`; it also
// checks that the file holds the lines that make the header trustworthy
// and no longer tells to trust an address.
func TestNginxExamplesParse(t *testing.T) {
	requireNginx(t)
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range userDeployFiles {
		t.Run(file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(root, "deploy", "nginx", file))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range userDeployMust[file] {
				if !strings.Contains(string(raw), want) {
					t.Errorf("deploy/nginx/%s lacks %q", file, want)
				}
			}
			for _, bad := range userDeployMustNot {
				if strings.Contains(string(raw), bad) {
					t.Errorf("deploy/nginx/%s still says %q", file, bad)
				}
			}
			port, err := freePort()
			if err != nil {
				t.Fatal(err)
			}
			dir := nginxDir(t, nginxWorkerUser)
			conf := renderSite(t, nginxSite{file: file, socket: filepath.Join(dir, "dashgate.sock")}, port)
			sitePath := filepath.Join(dir, file)
			if err := os.WriteFile(sitePath, []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
			// auth_basic_user_file is relative to the configuration's
			// directory; nginx -t does not open it, but a real run would.
			if err := os.WriteFile(filepath.Join(dir, "dashgate.htpasswd"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			confPath := writeNginxMain(t, dir, sitePath, nginxWorkerUser)
			out, err := exec.Command(nginxPath, "-t", "-c", confPath, "-p", dir+"/").CombinedOutput()
			if err != nil {
				t.Fatalf("nginx -t on deploy/nginx/%s: %v\n%s", file, err, out)
			}
		})
	}
}

// userDeployMust are the lines each many-user deploy file must hold: the
// header is set by nginx from what it checked (overwriting the client's),
// WebSockets pass, and dashgate listens on a Unix socket whose peer must
// be nginx's workers (--proxy-user www-data).
var userDeployMust = map[string][]string{
	"dashgate-auth-basic.conf": {
		"auth_basic_user_file",
		"proxy_set_header X-Forwarded-User $remote_user;",
		"proxy_set_header Upgrade $http_upgrade;",
		"proxy_set_header Connection $dashgate_connection;",
		"server unix:" + deploySocket + ";",
		"--user-header X-Forwarded-User --addr unix:" + deploySocket + " --proxy-user " + nginxWorkerUser,
	},
	"dashgate-oauth2-proxy.conf": {
		"auth_request /oauth2/auth;",
		"auth_request_set $user $upstream_http_x_auth_request_user;",
		"proxy_set_header X-Forwarded-User $user;",
		"location /oauth2/",
		"location = /oauth2/auth",
		"proxy_set_header Upgrade $http_upgrade;",
		"server unix:" + deploySocket + ";",
		"--user-header X-Forwarded-User --addr unix:" + deploySocket,
		"--proxy-user " + nginxWorkerUser,
	},
}

// userDeployMustNot are instructions no many-user deploy file may give any
// more: trusting the header from an address every local account
// connects from (issue 38).
var userDeployMustNot = []string{
	"--user-header X-Forwarded-User --trusted-proxies 127.0.0.1",
	"server 127.0.0.1:8787",
}
