package main

// The stall group's floor (--stall-peers): terminal servers started beside
// dashgate, each answering one HTTP request alone (no child, no store),
// timed by the quiet client every 10 ms with dashgate's own GET /healthz,
// idle and under the same load, on the same machine, with the same client.
// An idle peer's tail under the load is what the machine alone costs a
// server's wake-up; dashgate's figures above it are its own.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stallPeerKinds are the servers --stall-peers knows: the request timed,
// and the command line (peerbench's: the port, 127.0.0.1, /bin/sh).
var stallPeerKinds = map[string]struct {
	path string
	args func(port string) []string
}{
	"ttyd": {"/token", func(p string) []string { return []string{"-p", p, "-i", "127.0.0.1", "-W", "/bin/sh"} }},
	"gotty": {"/config.js", func(p string) []string {
		return []string{"--address", "127.0.0.1", "--port", p, "--permit-write", "/bin/sh"}
	}},
}

// stallPeer is one --stall-peers entry: a kind of stallPeerKinds and its
// binary.
type stallPeer struct{ name, bin string }

// parseStallPeers parses --stall-peers, "name=path,...".
func parseStallPeers(s string) ([]stallPeer, error) {
	var out []stallPeer
	for kv := range strings.SplitSeq(s, ",") {
		if kv == "" {
			continue
		}
		name, bin, _ := strings.Cut(kv, "=")
		if _, ok := stallPeerKinds[name]; !ok || bin == "" {
			return nil, fmt.Errorf("--stall-peers: %q is not name=path with a name among ttyd, gotty", kv)
		}
		if slices.ContainsFunc(out, func(p stallPeer) bool { return p.name == name }) {
			return nil, fmt.Errorf("--stall-peers: %s twice", name)
		}
		out = append(out, stallPeer{name, bin})
	}
	return out, nil
}

// stallProbe is a request the quiet client times beside its calls: its
// figure's label and URL.
type stallProbe struct{ label, url string }

// stallProbesEnv carries the probes to the quiet client, "label=url" per
// line.
const stallProbesEnv = "DASHGATE_BENCH_STALL_PROBES"

// probeFigures are the figures of the probes labels: loaded p99, loaded
// p50, idle p99 each.
func probeFigures(labels []string) []*Figure {
	var figs []*Figure
	for _, l := range labels {
		figs = append(figs,
			fig("  "+l+", loaded p99", "ms", ""),
			fig("  "+l+", loaded p50", "ms", ""),
			fig("  "+l+", idle p99", "ms", ""))
	}
	return figs
}

// probeLabels are the probes' labels for dashgate at base and peers, in
// the order of their figures.
func probeLabels(peers []stallPeer) []string {
	if len(peers) == 0 {
		return nil
	}
	labels := []string{"GET /healthz (dashgate alone)"}
	for _, p := range peers {
		labels = append(labels, fmt.Sprintf("GET %s of an idle %s beside it (the machine's floor)", stallPeerKinds[p.name].path, p.name))
	}
	return labels
}

// startStallPeers starts peers, each on a port of its own, and returns
// the probes (dashgate's /healthz at base first) and a stop that kills
// them. With no peers it returns none.
func startStallPeers(ctx context.Context, base string, peers []stallPeer) ([]stallProbe, func(), error) {
	if len(peers) == 0 {
		return nil, func() {}, nil
	}
	labels := probeLabels(peers)
	probes := []stallProbe{{labels[0], base + "healthz"}}
	var cmds []*exec.Cmd
	stop := func() {
		for _, c := range cmds {
			syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			c.Wait()
		}
	}
	for i, p := range peers {
		port, err := freePort()
		if err != nil {
			stop()
			return nil, nil, err
		}
		kind := stallPeerKinds[p.name]
		cmd := exec.Command(p.bin, kind.args(strconv.Itoa(port))...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			stop()
			return nil, nil, fmt.Errorf("%s: %w", p.name, err)
		}
		cmds = append(cmds, cmd)
		u := "http://127.0.0.1:" + strconv.Itoa(port) + kind.path
		if err := every(ctx, 20*time.Millisecond, 10*time.Second, func() (bool, error) {
			resp, err := noKeepAlive.Get(u)
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		}); err != nil {
			stop()
			return nil, nil, fmt.Errorf("%s never answered GET %s: %w", p.name, kind.path, err)
		}
		probes = append(probes, stallProbe{labels[i+1], u})
	}
	return probes, stop, nil
}

// encodeProbes and decodeProbes carry probes in stallProbesEnv.
func encodeProbes(probes []stallProbe) string {
	var b strings.Builder
	for _, p := range probes {
		b.WriteString(p.label + "=" + p.url + "\n")
	}
	return b.String()
}

func decodeProbes(s string) []stallProbe {
	var out []stallProbe
	for line := range strings.Lines(s) {
		// A label holds no "=http", a URL begins with it.
		if i := strings.LastIndex(line, "=http"); i > 0 {
			out = append(out, stallProbe{line[:i], strings.TrimSpace(line[i+1:])})
		}
	}
	return out
}

// timeGets times GET url (with token as its bearer, when set) every
// interval on a keep-alive connection of its own until until, into *into
// (ms); an error or a status other than 200 ends it.
func timeGets(ctx context.Context, url, token string, interval time.Duration, until time.Time, limit time.Duration, into *[]float64) error {
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: nil}}
	defer c.CloseIdleConnections()
	return every(ctx, interval, limit, func() (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		t0 := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return false, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		*into = append(*into, ms1(time.Since(t0)))
		return !time.Now().Before(until), err
	})
}

// probesOf reads the probes the quiet client was given.
func probesOf() []stallProbe { return decodeProbes(os.Getenv(stallProbesEnv)) }

var errNoProbeSamples = errors.New("a probe took no samples")
