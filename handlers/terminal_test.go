package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/dustin/go-humanize"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
)

// ptyClient is a test's /ws/pty client: a testkit.PTY whose frames a
// collector takes as they come, keeping every output byte and text frame.
type ptyClient struct {
	*testkit.PTY
	t      *testing.T
	mu     sync.Mutex
	out    bytes.Buffer     // every binary byte received (unless discard)
	n      int64            // binary bytes received
	sink   bool             // count binary bytes, keep none (endless output)
	texts  []map[string]any // the text frames, hello first
	sizes  []int            // every frame's payload size after hello, in order
	closed chan struct{}    // closed when the socket ended
	err    error            // why
}

func (e *env) pty(query url.Values) *ptyClient {
	e.t.Helper()
	return e.dialPTY(query, false)
}

// ptySink is pty for a terminal whose output is endless: its bytes are
// counted, not kept (output() is empty).
func (e *env) ptySink(query url.Values) *ptyClient {
	e.t.Helper()
	return e.dialPTY(query, true)
}

func (e *env) dialPTY(query url.Values, sink bool) *ptyClient {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), 10*time.Second)
	defer cancel()
	k, _, err := testkit.DialPTY(ctx, e.url+"/ws/pty?"+query.Encode(), testkit.DialOptions{Header: e.hdr, ReadLimit: 1 << 20})
	if err != nil {
		e.t.Fatal(err)
	}
	hello, _ := json.Marshal(k.Hello)
	p := &ptyClient{PTY: k, t: e.t, closed: make(chan struct{}), sink: sink}
	var m map[string]any
	json.Unmarshal(hello, &m)
	p.texts = append(p.texts, m)
	go p.collect()
	e.t.Cleanup(func() { k.Drop(false); <-p.closed })
	return p
}

func (p *ptyClient) collect() {
	defer close(p.closed)
	for {
		f, err := p.Next(context.Background())
		p.mu.Lock()
		if err != nil {
			p.err = err
			p.mu.Unlock()
			return
		}
		p.sizes = append(p.sizes, len(f.Data))
		if f.Type == websocket.MessageBinary {
			p.n += int64(len(f.Data))
			if !p.sink {
				p.out.Write(f.Data)
			}
		} else {
			var m map[string]any
			json.Unmarshal(f.Data, &m)
			p.texts = append(p.texts, m)
		}
		p.mu.Unlock()
	}
}

// frameSizes is the payload size of each frame received so far after
// hello, in order.
func (p *ptyClient) frameSizes() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.sizes)
}

func (p *ptyClient) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *ptyClient) received() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func (p *ptyClient) waitText(typ string) map[string]any {
	p.t.Helper()
	var found map[string]any
	testkit.WaitFor(p.t, 10*time.Second, "text frame "+typ, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, m := range p.texts {
			if m["type"] == typ {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

func (p *ptyClient) countText(typ string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, m := range p.texts {
		if m["type"] == typ {
			n++
		}
	}
	return n
}

func (p *ptyClient) send(s string) {
	p.t.Helper()
	if err := p.Send(p.t.Context(), []byte(s)); err != nil {
		p.t.Fatal(err)
	}
}

func (p *ptyClient) control(s string) {
	p.t.Helper()
	if err := p.Write(p.t.Context(), websocket.MessageText, []byte(s)); err != nil {
		p.t.Fatal(err)
	}
}

// expect waits until the output matches re.
func (p *ptyClient) expect(re string, d time.Duration) {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	if !testkit.Until(d, func() bool { return rx.MatchString(p.output()) }) {
		out := p.output()
		if len(out) > 2000 {
			out = out[len(out)-2000:]
		}
		p.t.Fatalf("output does not match %q after %v; tail: %q", re, d, out)
	}
}

// drop ends the socket without a close frame, as a closed tab does.
func (p *ptyClient) drop() {
	p.Drop(false)
	<-p.closed
}

func (p *ptyClient) closeErr() error {
	p.t.Helper()
	select {
	case <-p.closed:
	case <-time.After(10 * time.Second):
		p.t.Fatal("terminal socket not closed")
	}
	return p.err
}

func TestTerminalSizeAndResize(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	p := e.pty(url.Values{"cols": {"123"}, "rows": {"37"}})
	p.send("stty size\n")
	p.expect(`[\r\n]37 123\r\n`, 5*time.Second)
	p.control(`{"type":"resize","cols":50,"rows":20}`)
	p.control(`{"type":"resize","cols":61,"rows":22}`) // the last one wins
	p.send("stty size\n")
	p.expect(`[\r\n]22 61\r\n`, 5*time.Second)
}

func TestTerminalUTF8SplitAcrossReads(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	p := e.pty(nil)
	p.send(`printf '\342'; sleep 0.05; printf '\200\224\n'` + "\n")
	p.expect("\xe2\x80\x94", 5*time.Second)
}

func TestTerminalExitFrame(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	p := e.pty(nil) // a terminal-only session
	sid := p.waitText("hello")["session_id"].(string)
	p.send("exit 3\n")
	ex := p.waitText("exit")
	if ex["exit_code"] != float64(3) {
		t.Fatalf("exit frame = %v", ex)
	}
	if err := p.closeErr(); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("closed with %v, want 1000", err)
	}
	testkit.WaitFor(t, 5*time.Second, "session closed record", func() bool { return len(e.logs.Records("session closed")) == 1 })
	rec := e.logs.Records("session closed")[0]
	if rec["end_reason"] != "pty_exit" || rec["sid"] != sid {
		t.Fatalf("session closed record = %v", rec)
	}
	e.reg.Wait()
	if n := len(e.logs.Records("worker closed")); n != 1 {
		t.Fatalf("%d worker closed records, want 1", n)
	}
	if n := p.countText("exit"); n != 1 {
		t.Fatalf("%d exit frames", n)
	}
}

// descendantsOf returns the pids the manager lists under the pty.
func (e *env) ptyTree(t *testing.T) (int, []int) {
	t.Helper()
	for _, row := range e.mgr.Table(t.Context()) {
		if row.Kind == "pty" {
			return row.PID, row.Descendants
		}
	}
	t.Fatal("no pty in the table")
	return 0, nil
}

func TestTerminalCloseEndsWholeTree(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		cmd        string
		children   int
		escalation string
	}{
		{"background job", "sleep 310 &\n", 1, ""},
		{"HUP ignored", "trap '' HUP; sleep 311 & sleep 312 & wait\n", 2, "kill"},
		{"own session via setsid", "setsid sleep 313 &\n", 1, ""},
		{"nohup double fork", "(nohup sleep 314 >/dev/null 2>&1 &)\n", 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{})
			p := e.pty(nil)
			p.send(tt.cmd)
			shell, _ := e.ptyTree(t)
			sleeps := regexp.MustCompile(`sleep 31\d`).FindAllString(tt.cmd, -1)
			var kids []int
			testkit.WaitFor(t, 5*time.Second, "children started", func() bool {
				kids = pidsRunning(sleeps)
				return len(kids) >= tt.children
			})
			p.Close()
			testkit.WaitFor(t, 5*time.Second, "tree gone", func() bool {
				for _, pid := range append(kids, shell) {
					if !testkit.Gone(pid) {
						return false
					}
				}
				return true
			})
			testkit.WaitFor(t, 2*time.Second, "record", func() bool { return len(e.workerRecords(shell)) == 1 })
			rec := e.workerRecords(shell)[0]
			if rec["reason"] != "detach" || rec["kind"] != "pty" {
				t.Fatalf("record = %v", rec)
			}
			if tt.escalation != "" && rec["escalation"] != tt.escalation {
				t.Fatalf("escalation = %v, want %s (%v)", rec["escalation"], tt.escalation, rec)
			}
		})
	}
}

// pidsRunning finds the processes whose command line is one of cmds
// ("sleep 311"), wherever they moved (their own group, session or parent).
func pidsRunning(cmds []string) []int {
	procs, _ := testkit.Procs()
	var out []int
	for _, p := range procs {
		line, err := testkit.Cmdline(p.PID)
		if err == nil && slices.Contains(cmds, line) && !testkit.Gone(p.PID) {
			out = append(out, p.PID)
		}
	}
	return out
}

func TestTerminalKeepaliveReplayExactlyOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	chat := e.chat()
	sid := chat.create()
	q := url.Values{"session_id": {sid}, "keepalive": {"1"}}
	p := e.pty(q)
	hello := p.waitText("hello")
	token := hello["resume_token"].(string)
	p.send("for i in $(seq 1 2000); do echo \"n$i\"; case $i in *00) sleep 0.05;; esac; done; echo E$((1+1))ND\n")
	p.expect(`n300\r\n`, 10*time.Second)
	p.drop()
	var got bytes.Buffer
	got.WriteString(p.output())

	q.Set("resume_token", token)
	q.Set("offset", strconv.FormatInt(int64(got.Len()), 10))
	p2 := e.pty(q)
	if p2.countText("reset") != 0 {
		t.Fatal("reset although nothing rolled out")
	}
	if off := p2.waitText("hello")["offset"].(float64); int(off) != got.Len() {
		t.Fatalf("hello offset %v, want %d", off, got.Len())
	}
	p2.expect(`E2ND\r\n`, 30*time.Second)
	got.WriteString(p2.output())

	re := regexp.MustCompile(`(?m)^(?:\x1b\[\?2004l\r)?n(\d+)\r$`)
	var nums []int
	for _, m := range re.FindAllStringSubmatch(got.String(), -1) {
		n, _ := strconv.Atoi(m[1])
		nums = append(nums, n)
	}
	if len(nums) != 2000 {
		t.Fatalf("%d numbers received, want 2000", len(nums))
	}
	for i, n := range nums {
		if n != i+1 {
			t.Fatalf("number %d is %d: lost or duplicated output", i+1, n)
		}
	}
}

// TestTerminalHelloReplayEnd: a reattach that asks for the whole buffer
// (offset 0) is told in hello.replay_end where the replay ends: the bytes
// before it are what the terminal wrote before the attach, exactly, and
// live output (the echo of what is typed now) begins there (PROTOCOL.md,
// issue 27).
func TestTerminalHelloReplayEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	sid := e.chat().create()
	q := url.Values{"session_id": {sid}, "keepalive": {"1"}}
	p := e.pty(q)
	token := p.waitText("hello")["resume_token"].(string)
	p.send("echo $((6*7))-before\n")
	p.expect(`42-before\r\n(?:\x1b\[\?2004h)?[^\n]*[$#] $`, 10*time.Second) // back at the prompt: bash writes nothing more
	before := p.output()
	p.drop()

	q.Set("resume_token", token)
	q.Set("offset", "0")
	p2 := e.pty(q)
	hello := p2.waitText("hello")
	if off, _ := hello["offset"].(float64); off != 0 {
		t.Fatalf("hello offset %v, want 0 (the buffer holds it all)", hello["offset"])
	}
	end, ok := hello["replay_end"].(float64)
	if !ok || int(end) != len(before) {
		t.Fatalf("hello replay_end %v, want %d (the output before the reattach)", hello["replay_end"], len(before))
	}
	p2.send("echo $((6*8))-after\n")
	p2.expect(`48-after\r\n`, 10*time.Second)
	out := p2.output()
	if replay, live := out[:int(end)], out[int(end):]; replay != before || !strings.HasPrefix(live, "e") || strings.Contains(live, "42-before") {
		t.Fatalf("replay %q, live %q: want the output before the reattach, then the echo of the new line", replay, live)
	}
}

func TestTerminalResetWhenOutputRolledOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{reg: func(c *sessions.Config) { c.PTYBuffer = 64 << 10 }})
	sid := e.chat().create()
	q := url.Values{"session_id": {sid}, "keepalive": {"1"}}
	p := e.pty(q)
	token := p.waitText("hello")["resume_token"].(string)
	p.send("echo start\n")
	p.expect(`[\r\n]start\r\n`, 5*time.Second)
	have := p.received()
	p.drop()
	// While parked, 200 KB of output roll the first bytes out of the ring.
	testkit.WaitFor(t, 5*time.Second, "parked", func() bool { in, _ := e.reg.Get(sessions.Principal{}, sid); return in.Viewers == 1 })
	p2 := e.pty(url.Values{"session_id": {sid}, "keepalive": {"1"}, "resume_token": {token}, "offset": {strconv.FormatInt(have, 10)}})
	p2.send("head -c 200000 /dev/zero | tr '\\0' x; echo; echo $((40+2))-end\n")
	p2.expect(`42-end\r\n`, 10*time.Second)
	p2.drop()
	p3 := e.pty(url.Values{"session_id": {sid}, "keepalive": {"1"}, "resume_token": {token}, "offset": {strconv.FormatInt(have, 10)}})
	p3.waitText("reset")
	if off := int64(p3.waitText("hello")["offset"].(float64)); off <= have {
		t.Fatalf("hello offset %d, want past %d", off, have)
	}
}

func TestTerminalTakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	sid := e.chat().create()
	a := e.pty(url.Values{"session_id": {sid}})
	a.send("export MARK=takeover\n")
	a.expect(`export MARK`, 5*time.Second)
	b := e.pty(url.Values{"session_id": {sid}})
	if err := a.closeErr(); websocket.CloseStatus(err) != 4409 {
		t.Fatalf("first socket closed with %v, want 4409", err)
	}
	b.send("echo $MARK\n")
	b.expect(`[\r\n]takeover\r\n`, 5*time.Second)
}

func TestTerminalGarbageControlFrames(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	p := e.pty(nil)
	frames := []string{`nope`, `{"type":"resize","cols":0,"rows":5}`, `{"type":"resize","cols":2001,"rows":5}`, `{"type":"resize","cols":80,"rows":1001}`, `{"type":"launch"}`, `[]`}
	for _, f := range frames {
		p.control(f)
	}
	testkit.WaitFor(t, 5*time.Second, "error frames", func() bool { return p.countText("error") == len(frames) })
	p.send("echo still-$((40+2))\n")
	p.expect(`still-42`, 5*time.Second)
}

func TestTerminalQueryValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	for _, q := range []string{"cols=0", "rows=1001", "cols=abc", "offset=-1", "session_id=nope"} {
		_, resp, err := websocket.Dial(t.Context(), e.url+"/ws/pty?"+q, nil)
		if err == nil || resp == nil || (resp.StatusCode != 400 && resp.StatusCode != 404) {
			t.Fatalf("%s: err %v resp %v", q, err, resp)
		}
	}
	if e.mgr.Count() != 0 {
		t.Fatal("a bad query started a child")
	}
}

// TestTerminalBackpressure: a client that stops reading while `yes` floods
// stops `yes` itself: what it writes while the client does not read stays
// within what the buffers between them hold (the kernel's socket buffers,
// PTYPending, the pty), it then sleeps in write(2), and dashgate's memory
// does not grow; once the client reads again, Ctrl-C lands.
func TestTerminalBackpressure(t *testing.T) {
	// Not parallel: the heap it reads is the whole test process's, and a
	// parallel test's own output (TestShutdownClosesBusySocketsGoingAway's
	// four yes) once pushed it past the bound in CI.
	const pending = 256 << 10
	e := newEnv(t, envOpts{sock: handlers.SocketConfig{WriteTimeout: time.Minute},
		reg: func(c *sessions.Config) { c.PTYPending = pending }})
	p := e.pty(nil)
	p.send("yes\n")
	p.expect(`y\r\ny\r\n`, 5*time.Second)
	yes := ptyProgram(t, e, "yes")
	p.Pause()
	from := wchar(t, yes)
	// What may lie between yes and the paused client: the socket's send and
	// receive buffers at their largest, the unsent output dashgate keeps,
	// the pty's own buffer and a frame being read.
	bound := sysctlMax(t, "net/ipv4/tcp_wmem") + sysctlMax(t, "net/ipv4/tcp_rmem") + pending + 1<<20
	waitStopped(t, yes, "yes stopped by a client that does not read", func(w int64) {
		if w-from > bound {
			t.Fatalf("yes wrote %s (%d bytes) while the client did not read, more than the %d bytes the buffers between them hold: nothing stops it",
				humanize.IBytes(uint64(w-from)), w-from, bound)
		}
	})
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if ms.HeapInuse > 64<<20 {
		t.Fatalf("heap in use %s while the client does not read", humanize.IBytes(ms.HeapInuse))
	}
	p.Resume()
	p.send("\x03")
	p.send("echo after-$((1+1))\n")
	p.expect(`after-2`, 10*time.Second)
}

// waitStopped waits (30 s at most) until pid is stopped: it sleeps
// without being woken while the poll looks five times in a row, and its
// write count does not move. check sees the write count at each look.
func waitStopped(t *testing.T, pid int, what string, check func(wchar int64)) {
	t.Helper()
	var last, lastSwitches int64 = -1, -1
	still := 0
	testkit.WaitFor(t, 30*time.Second, what, func() bool {
		w, sw := wchar(t, pid), switches(t, pid)
		check(w)
		if pr, err := testkit.ReadProc(pid); err == nil && pr.State == 'S' && w == last && sw == lastSwitches {
			still++
		} else {
			still = 0
		}
		last, lastSwitches = w, sw
		return still >= 5
	})
}

// writeLog is a listener whose connections record the size of each
// Write, in order, per connection.
type writeLog struct {
	net.Listener
	mu    sync.Mutex
	conns [][]int
}

type loggedConn struct {
	net.Conn
	l *writeLog
	i int
}

func (l *writeLog) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conns = append(l.conns, nil)
	return &loggedConn{Conn: c, l: l, i: len(l.conns) - 1}, nil
}

func (c *loggedConn) Write(b []byte) (int, error) {
	c.l.mu.Lock()
	c.l.conns[c.i] = append(c.l.conns[c.i], len(b))
	c.l.mu.Unlock()
	return c.Conn.Write(b)
}

// TestTerminalFrameIsOneWrite: each frame of a terminal's socket, bulk
// output of up to 32 KiB included, leaves the server in one write(2): its
// header and payload together. coder/websocket writes through the
// hijacked connection's buffer, which net/http makes 4 KiB: a larger frame
// went out as two writes, two TCP sends.
func TestTerminalFrameIsOneWrite(t *testing.T) {
	t.Parallel()
	wl := &writeLog{}
	e := newEnv(t, envOpts{listen: func(l net.Listener) net.Listener { wl.Listener = l; return wl }})
	p := e.pty(nil)
	p.send("head -c 1000000 /dev/zero | tr '\\0' z; echo E_$((6*7))\n")
	p.expect(`E_42\r\n`, 10*time.Second)
	frames := p.frameSizes()
	wl.mu.Lock()
	writes := slices.Clone(wl.conns[len(wl.conns)-1])
	wl.mu.Unlock()
	// The first writes are the 101 and hello; then one a frame, header
	// and payload.
	big := 0
	for i, n := range frames {
		header := 2
		switch {
		case n > 65535:
			header = 10
		case n > 125:
			header = 4
		}
		if 2+i >= len(writes) || writes[2+i] != header+n {
			t.Fatalf("frame %d (%d bytes of payload) is not one write of %d bytes: writes from it %v", i, n, header+n, writes[min(2+i, len(writes)):min(len(writes), 5+i)])
		}
		if n > 4<<10 {
			big++
		}
	}
	if big == 0 {
		t.Fatalf("no frame over 4 KiB in %d frames", len(frames))
	}
}

// stalledPTY attaches a socket to sid's terminal, floods it with yes and
// stops reading: once yes is stopped, the terminal's reader is held in a
// write to the socket (the reader writes to a caught-up socket itself).
func (e *env) stalledPTY(t *testing.T, sid string) *ptyClient {
	t.Helper()
	p := e.ptySink(url.Values{"session_id": {sid}})
	p.send("yes\n")
	testkit.WaitFor(t, 5*time.Second, "yes's output", func() bool { return p.received() > 1<<20 })
	yes := ptyProgram(t, e, "yes")
	p.Pause()
	waitStopped(t, yes, "yes stopped by a client that does not read", func(int64) {})
	return p
}

// TestTerminalTakeoverOfAStalledSocket: a takeover of a terminal whose
// reader is held in a write to a socket that stopped reading ends that
// socket once the write has blocked for sessions.DirectGrace, not at its
// write timeout (a minute here) nor at the end of its close handshake
// (coder/websocket's 5 s), so the new socket's command shows within 4 s.
func TestTerminalTakeoverOfAStalledSocket(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{sock: handlers.SocketConfig{WriteTimeout: time.Minute}})
	sid := e.chat().create()
	a := e.stalledPTY(t, sid)
	b := e.pty(url.Values{"session_id": {sid}})
	b.send("\x03") // SIGINT from the line discipline: yes ends whatever the reader does
	b.send("echo after-$((1+1))\n")
	b.expect(`after-2`, 4*time.Second)
	a.Resume() // it reads what its buffers hold, then finds the socket ended
	if err := a.closeErr(); err == nil {
		t.Fatal("the stalled socket did not end")
	}
}

// TestTerminalEndWithAStalledSocket: the end of a terminal (its session
// closed) whose reader is held in a write to a socket that stopped reading
// ends that socket after sessions.DirectGrace, so session.close answers
// (within the client's 10 s), not at the socket's write timeout (a minute
// here), which the end waited for with the reader.
func TestTerminalEndWithAStalledSocket(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{sock: handlers.SocketConfig{WriteTimeout: time.Minute}})
	cc := e.chat()
	sid := cc.create()
	a := e.stalledPTY(t, sid)
	pid, _ := e.ptyTree(t)
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := cc.ctx()
		defer cancel()
		closed <- cc.Call(ctx, "session.close", map[string]any{"session_id": sid}, nil)
	}()
	testkit.WaitFor(t, 3*time.Second, "the terminal's worker closed record", func() bool { return len(e.workerRecords(pid)) > 0 })
	if err := <-closed; err != nil {
		t.Fatalf("session.close: %v", err)
	}
	a.Resume()
	if err := a.closeErr(); err == nil {
		t.Fatal("the stalled socket did not end")
	}
}

// ptyProgram is the pid of the process named comm under the terminal's
// program.
func ptyProgram(t *testing.T, e *env, comm string) int {
	t.Helper()
	var pid int
	testkit.WaitFor(t, 5*time.Second, comm+" under the terminal", func() bool {
		_, desc := e.ptyTree(t)
		for _, d := range desc {
			if pr, err := testkit.ReadProc(d); err == nil && pr.Comm == comm {
				pid = d
				return true
			}
		}
		return false
	})
	return pid
}

// wchar is what pid wrote so far, in bytes (proc(5), /proc/pid/io).
func wchar(t *testing.T, pid int) int64 { return procField(t, pid, "io", "wchar:") }

// switches counts the times pid gave up the CPU to wait, woken since
// (proc(5), /proc/pid/status).
func switches(t *testing.T, pid int) int64 {
	return procField(t, pid, "status", "voluntary_ctxt_switches:")
}

func procField(t *testing.T, pid int, file, key string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, key); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatalf("/proc/%d/%s: %q: %v", pid, file, line, err)
			}
			return n
		}
	}
	t.Fatalf("/proc/%d/%s has no %s", pid, file, key)
	return 0
}

// sysctlMax is the largest value (the last field) of a sysctl such as
// net/ipv4/tcp_rmem ("min default max").
func sysctlMax(t *testing.T, name string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	n, err := strconv.ParseInt(f[len(f)-1], 10, 64)
	if err != nil {
		t.Fatalf("%s: %q", name, b)
	}
	return n
}

func TestTerminalWriteTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{sock: handlers.SocketConfig{WriteTimeout: 300 * time.Millisecond}})
	p := e.pty(nil)
	p.send("yes\n")
	p.expect(`y\r\n`, 5*time.Second)
	p.Pause()
	defer func() {
		if t.Failed() {
			t.Logf("logs: %v", e.logs.Records("worker closed"))
		}
	}()
	testkit.WaitFor(t, 30*time.Second, "write_timeout record", func() bool {
		for _, r := range e.logs.Records("worker closed") {
			if r["reason"] == "write_timeout" && r["kind"] == "pty" {
				return true
			}
		}
		return false
	})
}

func TestPingTimeoutEndsSockets(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{sock: handlers.SocketConfig{PingInterval: 100 * time.Millisecond, PingTimeout: 200 * time.Millisecond}})
	// A chat client that never reads never answers pings.
	c, _, err := websocket.Dial(t.Context(), e.url+"/ws/chat", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.Write(t.Context(), websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":1,"method":"session.create","params":{}}`))
	testkit.WaitFor(t, 5*time.Second, "session", func() bool { return len(e.reg.List(sessions.Principal{})) == 1 })
	sid := e.reg.List(sessions.Principal{})[0].ID
	c.Write(t.Context(), websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":2,"method":"slash.exec","params":{"session_id":"`+sid+`","command":"/echo"}}`))
	testkit.WaitFor(t, 10*time.Second, "ping_timeout record", func() bool {
		for _, r := range e.logs.Records("worker closed") {
			if r["reason"] == "ping_timeout" {
				return true
			}
		}
		return false
	})
}

func TestTerminalKeepaliveExpires(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{reg: func(c *sessions.Config) { c.PTYKeepalive = 300 * time.Millisecond }})
	sid := e.chat().create()
	p := e.pty(url.Values{"session_id": {sid}, "keepalive": {"1"}})
	shell, _ := e.ptyTree(t)
	p.drop()
	testkit.WaitFor(t, 10*time.Second, "keepalive_expired record", func() bool {
		recs := e.workerRecords(shell)
		return len(recs) == 1 && recs[0]["reason"] == "keepalive_expired"
	})
	if !testkit.Gone(shell) {
		t.Fatal("shell alive after its keepalive expired")
	}
	// The record is logged once the tree is reaped; the terminal leaves its
	// session after its reader drained, a moment later.
	testkit.WaitFor(t, 10*time.Second, "terminal unhooked from its session", func() bool {
		in, ok := e.reg.Get(sessions.Principal{}, sid)
		return ok && in.PTYPID == 0
	})
}

func TestTerminalInputFrameLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	p := e.pty(nil)
	p.Write(t.Context(), websocket.MessageBinary, bytes.Repeat([]byte("a"), handlers.MaxInputFrame+1))
	if err := p.closeErr(); websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("closed with %v, want 1009", err)
	}
	testkit.WaitFor(t, 5*time.Second, "terminal ended", func() bool { return e.mgr.Count() == 0 })
}

// TestTerminalClosesGoingAwayAtShutdown: a terminal ended because dashgate
// shuts down closes its socket with 1001, as PROTOCOL.md §7 says, not 1000
// (issue 16 item 8).
func TestTerminalClosesGoingAwayAtShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	p := e.pty(nil)
	p.waitText("hello")
	e.reg.Shutdown(t.Context())
	if err := p.closeErr(); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("closed with %v, want 1001", err)
	}
}

// TestShutdownClosesBusySocketsGoingAway: the server's shutdown (its base
// context cancelled with ErrShutdown, as web.Run does) closes every socket
// with 1001 even while frames are being written to it. coder/websocket
// drops the connection without a close frame when the context of a write
// in progress ends, so writes must not use a context the shutdown ends.
func TestShutdownClosesBusySocketsGoingAway(t *testing.T) {
	t.Parallel()
	base, stop := context.WithCancelCause(context.Background())
	defer stop(nil)
	e := newEnv(t, envOpts{base: base, ptyCmd: []string{"/usr/bin/yes", "a line of output that keeps the socket busy"}})
	var ps []*ptyClient
	for range 4 {
		ps = append(ps, e.ptySink(nil)) // yes at full speed: count, keep nothing
	}
	for _, p := range ps {
		testkit.WaitFor(t, 10*time.Second, "output streaming", func() bool { return p.received() > 256<<10 })
	}
	cc := e.chat()
	cc.create()
	stop(handlers.ErrShutdown)
	for i, p := range ps {
		if err := p.closeErr(); websocket.CloseStatus(err) != websocket.StatusGoingAway {
			t.Errorf("busy terminal socket %d closed with %v, want 1001", i, err)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "chat socket closed", func() bool { return cc.Err() != nil })
	if err := cc.Err(); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Errorf("chat socket closed with %v, want 1001", err)
	}
}
