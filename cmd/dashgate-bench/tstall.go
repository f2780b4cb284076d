package main

// The stall group's load on terminals (`--only stall-terminal`), for a
// side by side with ttyd and gotty (--stall-peers): the same load and the
// same probes on each server in turn, one at a time on the same machine,
// with the same client and the same children. One run, for each server
// (a fresh dashgate of the build, and a fresh peer of each --stall-peers,
// their order turning run by run):
//
//  1. idle: the quiet client (`dashgate-bench tstall-quiet`, a process of
//     its own) opens a terminal, makes it `stty raw -echo; exec cat`, and
//     for stall-secs times every 10 ms a keystroke's round trip (one byte
//     typed, its echo back) and a GET the server answers alone (dashgate's
//     /healthz, ttyd's /token, gotty's /config.js) on a keep-alive
//     connection of its own;
//  2. the load (`dashgate-bench tstall-load`, one process) opens
//     stall-streams terminals, each running a Perl one-liner that prints
//     "word " every 40 ms (the echo agent's pace: 25 a second a stream),
//     and tstall-churn terminals a second opened, read to their first
//     output byte (the shell's prompt) and closed;
//  3. loaded: once every stream has begun and 3 s more have passed, the
//     quiet client measures again; the server's own CPU time (not its
//     children's) and the machine's idle share are taken over it.
//
// What it answers: with the work of a busy relay on it, does dashgate
// answer a quiet terminal and a control request as fast as a peer does
// under the same work? The chat stall group measures dashgate alone; its
// --stall-peers figures are idle peers (the machine's floor).

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

// tstallStreamer is what each streaming terminal runs: "word " every
// 40 ms, unbuffered, as long as the terminal lives.
const tstallStreamer = `exec perl -e '$|=1; for (;;) { print "word "; select(undef, undef, undef, 0.04) }'`

// tstallServer is one server the group measures: its kind (dashgate,
// ttyd or gotty), base URL ("http://127.0.0.1:PORT/"), the token
// (dashgate's) and its pid.
type tstallServer struct {
	kind, base, token string
	pid               int
}

// probePath is the GET the server answers alone.
func (s tstallServer) probePath() string {
	if s.kind == "dashgate" {
		return "healthz"
	}
	return strings.TrimPrefix(stallPeerKinds[s.kind].path, "/")
}

// tstallFigures are one server's figures, in the order tstallMeasure
// returns them.
func tstallFigures(name, probe string) []*Figure {
	return []*Figure{
		fig("stall-terminal: "+name+" keystroke round trip, loaded p99", "ms", ""),
		fig("  "+name+" keystroke, loaded p50", "ms", ""),
		fig("  "+name+" keystroke, loaded max", "ms", ""),
		fig("  "+name+" keystroke, idle p50", "ms", ""),
		fig("  "+name+" keystroke, idle p99", "ms", ""),
		fig("  "+name+" GET "+probe+", loaded p99", "ms", ""),
		fig("  "+name+" GET "+probe+", loaded p50", "ms", ""),
		fig("  "+name+" GET "+probe+", idle p99", "ms", ""),
		fig("  "+name+" server CPU, loaded", "% of a core", ""),
		fig("  "+name+" output bytes/s the load received", "KiB/s", ""),
		fig("  "+name+" churn cycles/s done", "1/s", ""),
		fig("  "+name+" machine idle, loaded", "%", ""),
	}
}

// stallTerminal is the group: streams terminals streaming, churn
// terminals a second, each quiet phase secs seconds, on dashgate and on
// every --stall-peers server.
func (b *bench) stallTerminal(streams, churn, secs int) group {
	figs := tstallFigures("dashgate", "/healthz")
	for _, p := range b.cfg.stallPeers {
		figs = append(figs, tstallFigures(p.name, stallPeerKinds[p.name].path)...)
	}
	args := []string{"--max-workers", strconv.Itoa(streams + 200), "--max-sessions", strconv.Itoa(streams + 1000)}
	return group{name: "stall-terminal", figs: figs, args: args, fresh: true,
		run: func(ctx context.Context, t *target, r int) ([]float64, error) {
			d := time.Duration(secs) * time.Second
			// Each server in turn, dashgate first on run 0, then turned
			// one place per run.
			n := 1 + len(b.cfg.stallPeers)
			out := make([][]float64, n)
			for k := range n {
				i := (k + r) % n
				var s tstallServer
				stop := func() {}
				if i == 0 {
					s = tstallServer{kind: "dashgate", base: t.Base, token: t.Token, pid: t.PID()}
				} else {
					var err error
					if s, stop, err = startTermPeer(ctx, b.cfg.stallPeers[i-1]); err != nil {
						return nil, err
					}
				}
				vals, err := tstallMeasure(ctx, s, streams, churn, d)
				stop()
				if err != nil {
					return nil, fmt.Errorf("%s: %w", s.kind, err)
				}
				fmt.Fprintf(b.stderr, "dashgate-bench: stall-terminal (%s) run %d: %s measured\n", t.build, r, s.kind)
				out[i] = vals
			}
			return slices.Concat(out...), nil
		}}
}

// startTermPeer starts p on a port of its own serving /bin/sh and waits
// for it to answer its probe; stop kills it and its children.
func startTermPeer(ctx context.Context, p stallPeer) (tstallServer, func(), error) {
	port, err := freePort()
	if err != nil {
		return tstallServer{}, nil, err
	}
	kind := stallPeerKinds[p.name]
	cmd := exec.Command(p.bin, kind.args(strconv.Itoa(port))...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return tstallServer{}, nil, fmt.Errorf("%s: %w", p.name, err)
	}
	// The terminals' shells are in sessions of their own: killed by
	// their server's end (their pty's hangup), after it.
	stop := func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	}
	s := tstallServer{kind: p.name, base: "http://127.0.0.1:" + strconv.Itoa(port) + "/", pid: cmd.Process.Pid}
	if err := every(ctx, 20*time.Millisecond, 10*time.Second, func() (bool, error) {
		resp, err := noKeepAlive.Get(s.base + s.probePath())
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		stop()
		return s, nil, fmt.Errorf("%s never answered GET %s: %w", p.name, kind.path, err)
	}
	return s, stop, nil
}

// tstallMeasure runs the idle phase, the load and the loaded phase on s
// and returns its figures (tstallFigures' order).
func tstallMeasure(ctx context.Context, s tstallServer, streams, churn int, d time.Duration) ([]float64, error) {
	idle, err := runTermQuiet(ctx, s, d)
	if err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "tstall-load", s.kind, s.base, strconv.Itoa(streams), strconv.Itoa(churn))
	cmd.Env = append(os.Environ(), stallTokenEnv+"="+s.token)
	load, err := runLoadCmd(cmd)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	defer load.kill()
	if err := load.waitReady(ctx, 3*time.Minute); err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if err := sleepCtx(ctx, 3*time.Second); err != nil {
		return nil, err
	}
	cpu0, idle0, t0 := procCPU(s.pid), machineIdle(), time.Now()
	b0, c0 := load.deltas(), load.churned()
	loaded, err := runTermQuiet(ctx, s, d)
	el := time.Since(t0)
	cpu1, idle1, b1, c1 := procCPU(s.pid), machineIdle(), load.deltas(), load.churned()
	_, lerr := load.stop()
	if err = errors.Join(err, lerr); err != nil {
		return nil, fmt.Errorf("loaded: %w", err)
	}
	p := percentile
	return []float64{
		p(loaded.Keys, 99), p(loaded.Keys, 50), p(loaded.Keys, 100), p(idle.Keys, 50), p(idle.Keys, 99),
		p(loaded.Gets, 99), p(loaded.Gets, 50), p(idle.Gets, 99),
		100 * (cpu1 - cpu0).Seconds() / el.Seconds(), float64(b1-b0) / 1024 / el.Seconds(), float64(c1-c0) / el.Seconds(),
		100 * idle1.share(idle0),
	}, nil
}

// termQuietResult is what the terminal quiet client measured, ms.
type termQuietResult struct{ Keys, Gets []float64 }

// runTermQuiet runs `dashgate-bench tstall-quiet` on s for d.
func runTermQuiet(ctx context.Context, s tstallServer, d time.Duration) (termQuietResult, error) {
	var res termQuietResult
	self, err := os.Executable()
	if err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(ctx, d+2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, "tstall-quiet", s.kind, s.base, s.probePath(), d.String())
	cmd.Env = append(os.Environ(), stallTokenEnv+"="+s.token)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return res, fmt.Errorf("tstall-quiet: %w", err)
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return res, fmt.Errorf("tstall-quiet: %q: %w", out, err)
	}
	if len(res.Keys) == 0 || len(res.Gets) == 0 {
		return res, fmt.Errorf("tstall-quiet: no samples: %s", out)
	}
	return res, nil
}

// tstallHelper runs `tstall-quiet KIND BASE PROBE DURATION` or
// `tstall-load KIND BASE STREAMS CHURN`; ok is false for any other
// arguments.
func tstallHelper(args []string, stdout io.Writer) (name string, ok bool, err error) {
	switch {
	case len(args) == 5 && args[0] == "tstall-quiet":
		return args[0], true, serveTermQuiet(args[1], args[2], args[3], args[4], stdout)
	case len(args) == 5 && args[0] == "tstall-load":
		return args[0], true, serveTermLoad(args[1], args[2], args[3], args[4], stdout)
	}
	return "", false, nil
}

// serveTermQuiet is the quiet client: a keystroke into cat every 10 ms,
// and GET base+probe every 10 ms, for dur; it writes termQuietResult as
// JSON on stdout.
func serveTermQuiet(kind, base, probe, dur string, stdout io.Writer) error {
	d, err := time.ParseDuration(dur)
	if err != nil {
		return err
	}
	token := os.Getenv(stallTokenEnv)
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	tm, err := dialKindTerm(ctx, kind, base, token)
	if err != nil {
		return err
	}
	defer tm.stop()
	if _, err := tm.runMarked("exec cat"); err != nil {
		return err
	}
	var res termQuietResult
	until := time.Now().Add(d)
	var getErr error
	var wg sync.WaitGroup
	wg.Go(func() { getErr = timeGets(ctx, base+probe, "", 10*time.Millisecond, until, d+time.Minute, &res.Gets) })
	key := []byte{'k'}
	err = every(ctx, 10*time.Millisecond, d+time.Minute, func() (bool, error) {
		t0 := time.Now()
		if err := tm.send(key); err != nil {
			return false, err
		}
		for got := 0; got == 0; {
			b, err := tm.recv()
			if err != nil {
				return false, fmt.Errorf("keystroke echo: %w", err)
			}
			got = len(b)
		}
		res.Keys = append(res.Keys, ms1(time.Since(t0)))
		return !time.Now().Before(until), nil
	})
	wg.Wait()
	if err = errors.Join(err, getErr); err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(res)
}

// serveTermLoad is the load: it prints "ready" once every stream's first
// word came, "count deltas=BYTES churn=N" every 500 ms (the bytes of
// output the streams received), and when its stdin closes, closes its
// terminals and prints "done ..." (or "error ...").
func serveTermLoad(kind, base, streamsArg, churnArg string, stdout io.Writer) error {
	streams, err1 := strconv.Atoi(streamsArg)
	churn, err2 := strconv.Atoi(churnArg)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	token := os.Getenv(stallTokenEnv)
	var bytesIn, churned atomic.Int64
	return runLoadLoop(loadSpec{
		streams: streams,
		stream: func(ctx context.Context, began func()) error {
			return termStream(ctx, kind, base, token, &bytesIn, began)
		},
		churn: func(ctx context.Context, fail func(error)) { termChurn(ctx, kind, base, token, churn, &churned, fail) },
		count: func() string { return fmt.Sprintf("deltas=%d churn=%d", bytesIn.Load(), churned.Load()) },
		done:  func() string { return fmt.Sprintf("bytes=%d churn=%d", bytesIn.Load(), churned.Load()) },
	}, stdout)
}

// termChurn opens rate terminals a second, each read to its first output
// (the shell's prompt) and closed, counted into n, until ctx ends.
func termChurn(ctx context.Context, kind, base, token string, rate int, n *atomic.Int64, fail func(error)) {
	if rate <= 0 {
		return
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var cycles sync.WaitGroup
	defer cycles.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cycles.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			tm, err := dialKindTerm(cctx, kind, base, token)
			if err == nil {
				_, err = tm.recv()
				tm.stop()
			}
			if err != nil {
				if ctx.Err() == nil {
					fail(fmt.Errorf("churn: %w", err))
				}
				return
			}
			n.Add(1)
		})
	}
}

// termStream is one streaming terminal of the load: its shell's prompt
// awaited, the streamer typed, its output read and counted into n until
// ctx ends; began runs at its first word.
func termStream(ctx context.Context, kind, base, token string, n *atomic.Int64, began func()) error {
	tm, err := dialKindTerm(ctx, kind, base, token)
	if err != nil {
		return err
	}
	defer tm.stop()
	if _, err := tm.recv(); err != nil { // the prompt
		return err
	}
	if err := tm.send([]byte(tstallStreamer + "\r")); err != nil {
		return err
	}
	// It has begun at a word after the typed line's echo (which holds
	// the word too), on the lines that follow it.
	var seen []byte
	begun := false
	for {
		b, err := tm.recv()
		if err != nil {
			return err
		}
		n.Add(int64(len(b)))
		if !begun {
			seen = append(seen, b...)
			if _, after, ok := strings.Cut(string(seen), "\n"); ok && strings.Contains(after, "word ") {
				begun, seen = true, nil
				began()
			}
		}
	}
}

// dialKindTerm opens an 80×24 terminal on a server of kind at base, in its
// own protocol:
//
//   - dashgate (docs/PROTOCOL.md §3): /ws/pty, bytes in binary frames both
//     ways;
//   - ttyd: /ws, subprotocol "tty", a first JSON message with the size;
//     then input '0' + bytes, output '0' + bytes (other types are its
//     title and preferences);
//   - gotty: /ws, subprotocol "webtty", text frames: a first JSON message,
//     the size ('3' + JSON), input '1' + bytes, output '1' + base64.
func dialKindTerm(ctx context.Context, kind, base, token string) (*term, error) {
	ws := "ws" + strings.TrimPrefix(base, "http")
	if kind == "dashgate" {
		return dialTerm(ctx, ws+"ws/pty?cols=80&rows=24", token)
	}
	sub := map[string]string{"ttyd": "tty", "gotty": "webtty"}[kind]
	if sub == "" {
		return nil, fmt.Errorf("no terminal protocol for %q", kind)
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(dctx, ws+"ws", &websocket.DialOptions{HTTPClient: noKeepAlive, Subprotocols: []string{sub}})
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(16 << 20)
	if kind == "ttyd" {
		err = c.Write(ctx, websocket.MessageBinary, []byte(`{"AuthToken":"","columns":80,"rows":24}`))
	} else if err = c.Write(ctx, websocket.MessageText, []byte(`{"Arguments":"","AuthToken":""}`)); err == nil {
		err = c.Write(ctx, websocket.MessageText, []byte(`3{"columns":80,"rows":24}`))
	}
	if err != nil {
		c.CloseNow()
		return nil, err
	}
	typ, prefix := websocket.MessageBinary, byte('0')
	if kind == "gotty" {
		typ, prefix = websocket.MessageText, '1'
	}
	var dec []byte
	return &term{
		send: func(b []byte) error { return c.Write(ctx, typ, append([]byte{prefix}, b...)) },
		recv: func() ([]byte, error) {
			for {
				_, msg, err := c.Read(ctx)
				if err != nil {
					return nil, err
				}
				if len(msg) < 2 || msg[0] != prefix {
					continue
				}
				if kind == "ttyd" {
					return msg[1:], nil
				}
				dec = slices.Grow(dec[:0], base64.StdEncoding.DecodedLen(len(msg)-1))[:base64.StdEncoding.DecodedLen(len(msg)-1)]
				k, err := base64.StdEncoding.Decode(dec, msg[1:])
				if err != nil {
					return nil, fmt.Errorf("gotty output: %w", err)
				}
				if k > 0 {
					return dec[:k], nil
				}
			}
		},
		stop: func() error { return c.Close(websocket.StatusNormalClosure, "") },
	}, nil
}
