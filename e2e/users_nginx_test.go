package e2e_test

import (
	"fmt"
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
// nginx tests do (the listen port and the upstream substituted), wraps it
// in a minimal nginx.conf in a temp dir and checks it with `nginx -t`; it
// also checks the lines that make the header trustworthy are there.
func TestNginxExamplesParse(t *testing.T) {
	requireNginx(t)
	for _, file := range userDeployFiles {
		t.Run(file, func(t *testing.T) {
			port, err := freePort()
			if err != nil {
				t.Fatal(err)
			}
			upstream, err := freePort()
			if err != nil {
				t.Fatal(err)
			}
			conf := renderSite(t, nginxSite{file: file, upstreams: []string{fmt.Sprintf("127.0.0.1:%d", upstream)}}, port)
			for _, want := range userDeployMust[file] {
				if !strings.Contains(conf, want) {
					t.Errorf("deploy/nginx/%s lacks %q", file, want)
				}
			}
			dir := t.TempDir()
			sitePath := filepath.Join(dir, file)
			if err := os.WriteFile(sitePath, []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
			// auth_basic_user_file is relative to the configuration's
			// directory; nginx -t does not open it, but a real run would.
			if err := os.WriteFile(filepath.Join(dir, "dashgate.htpasswd"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			confPath := writeNginxMain(t, dir, sitePath)
			out, err := exec.Command(nginxPath, "-t", "-c", confPath, "-p", dir+"/").CombinedOutput()
			if err != nil {
				t.Fatalf("nginx -t on deploy/nginx/%s: %v\n%s", file, err, out)
			}
		})
	}
}

// userDeployMust are the lines each many-user deploy file must hold: the
// header is set by nginx from what it checked (overwriting the client's),
// and WebSockets pass.
var userDeployMust = map[string][]string{
	"dashgate-auth-basic.conf": {
		"auth_basic_user_file",
		"proxy_set_header X-Forwarded-User $remote_user;",
		"proxy_set_header Upgrade $http_upgrade;",
		"proxy_set_header Connection $dashgate_connection;",
		"--user-header X-Forwarded-User --trusted-proxies 127.0.0.1",
		"--addr unix:/run/dashgate/dashgate.sock",
		"proxy_pass http://unix:/run/dashgate/dashgate.sock:;",
	},
	"dashgate-oauth2-proxy.conf": {
		"auth_request /oauth2/auth;",
		"auth_request_set $user $upstream_http_x_auth_request_user;",
		"proxy_set_header X-Forwarded-User $user;",
		"location /oauth2/",
		"location = /oauth2/auth",
		"proxy_set_header Upgrade $http_upgrade;",
		"--user-header X-Forwarded-User --trusted-proxies 127.0.0.1",
	},
}

// writeNginxMain writes dir/nginx.conf: a minimal main configuration,
// with every path inside dir, including site. It returns its path.
func writeNginxMain(t *testing.T, dir, site string) string {
	t.Helper()
	p := func(name string) string { return filepath.Join(dir, name) }
	user := ""
	if os.Geteuid() == 0 {
		user = "user root root;\n"
	}
	main := fmt.Sprintf(`%sdaemon off;
worker_processes 1;
pid %s;
error_log %s info;
events { worker_connections 64; }
http {
    access_log %s;
    client_body_temp_path %s;
    proxy_temp_path %s;
    fastcgi_temp_path %s;
    uwsgi_temp_path %s;
    scgi_temp_path %s;
    include %s;
}
`, user, p("nginx.pid"), p("error.log"), p("access.log"),
		p("client_body_temp"), p("proxy_temp"), p("fastcgi_temp"), p("uwsgi_temp"), p("scgi_temp"), site)
	path := p("nginx.conf")
	if err := os.WriteFile(path, []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
