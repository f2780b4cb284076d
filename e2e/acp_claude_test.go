package e2e_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/dashgate/dashgate/internal/testkit"
)

// The published Claude Code agent (@zed-industries/claude-agent-acp,
// installed by scripts/acp-agents.sh) as a person meets it on a shared
// box: dashgate as deploy/nginx/dashgate-auth-basic.conf runs it, with
// --unix-users, behind that very nginx file; the agent talks to
// testkit's stand-in of the Anthropic Messages API, so nothing leaves the
// machine (docs/acp-agents-offline.md).

// claudeAgentLine is the --agent value that runs claude-agent-acp at bin
// against the stand-in a: dashgate hands the bridge only its allowlist
// of variables, so the agent's own go on its command line through env(1).
func claudeAgentLine(bin string, a *testkit.Anthropic) string {
	return "claude=env " + strings.Join(a.Env(), " ") + " " + bin
}

// startClaudeBehindNginx starts dashgate as root, from a path every
// account can run (its bridge, `dashgate acp`, starts from dashgate's own
// path as the user), with the flags of deploy/nginx/dashgate-auth-basic.conf
// (the socket moved into a temp dir), --unix-users, --cgroup on where
// cgroup v2 can be written (else auto), claude-agent-acp as --agent claude
// and --default-agent claude, then extra; and nginx on that file in front
// of it with an htpasswd holding acct (the header names the dashgate user,
// which --unix-users runs as the account of the same name).
func startClaudeBehindNginx(t *testing.T, acct unixAccount, a *testkit.Anthropic, extra ...string) (*dashgate, *nginx) {
	t.Helper()
	bin := testkit.ClaudeAgentACP(t)
	socket := filepath.Join(dirForAll(t, "dashgate-run-"), "dashgate", "dashgate.sock")
	const file = "dashgate-auth-basic.conf"
	cgroup := "on"
	if why := cgroupProblem(); why != "" {
		t.Logf("--cgroup auto instead of on: %s", why)
		cgroup = "auto"
	}
	args := append(deployRunFlags(t, file, socket),
		"--worker-grace", workerGrace.String(), "--log-level", "debug",
		"--unix-users", "--cgroup", cgroup,
		"--agent", claudeAgentLine(bin, a), "--default-agent", "claude")
	d := launchBin(t, testkit.Options{Sub: "serve", Bin: testkit.ExecutableByAll(t, dashgateBin), Token: testToken, Dir: t.TempDir(),
		Env: testkit.CleanEnv(), Args: append(args, extra...)})
	n := startNginx(t, nginxSite{file: file, socket: socket})
	writeHtpasswd(t, filepath.Join(n.dir, "dashgate.htpasswd"), acct.Name)
	return d, n
}

// requireClaudeE2E skips (or fails, per DASHGATE_E2E and
// DASHGATE_REQUIRE_ACP_AGENTS) before anything is made when a piece of
// the set-up is missing: the agent, Chromium, nginx, root.
func requireClaudeE2E(t *testing.T) {
	t.Helper()
	testkit.ClaudeAgentACP(t)
	requireChromium(t)
	requireNginx(t)
	testkit.RequireRoot(t, "Unix accounts, and dashgate's socket for nginx's workers")
}

// openClaudeDashboard opens acct's dashboard through n in a browser
// context of its own and waits until the session made on load is
// claude's (its row and the chat header name it); it returns the tab and
// the session.
func openClaudeDashboard(t *testing.T, n *nginx, acct unixAccount) (*tab, string) {
	t.Helper()
	b := newBrowser(t)
	tb := b.contextTab(t, acct.Name, basicAuth(acct.Name))
	tb.Do("open the dashboard through nginx", chromedp.Navigate(n.URL("/")))
	waitDashboard(t, tb)
	sid := currentSession(t, tb)
	waitAgentShown(t, tb, "the session made on load is claude's (--default-agent)", "claude")
	return tb, sid
}

// waitClaudeReply waits until one finished assistant message reads
// exactly text. The agent's first turn starts it (node, then the Claude
// Code CLI: about 1.5 s idle, much more on a loaded machine).
func waitClaudeReply(t *testing.T, tb *tab, text string) {
	t.Helper()
	tb.mustWaitJS(90*time.Second, fmt.Sprintf("the assistant's message %q", text),
		chatCount("assistant", text)+` === 1`, dashboardState)
}

// procEnv is the value of name in pid's environment (/proc/<pid>/environ,
// as it was at exec); ok is false when it is not set or pid is gone.
func procEnv(pid int, name string) (value string, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return "", false
	}
	for _, kv := range strings.Split(string(b), "\x00") {
		if v, found := strings.CutPrefix(kv, name+"="); found {
			return v, true
		}
	}
	return "", false
}

// pidAt is a process and its start time: a reused pid is someone else.
type pidAt struct {
	pid   int
	start uint64
}

// TestClaudeAgentThroughNginxAsUnixUser: alice opens her dashboard
// through nginx (auth_basic) on a dashgate with --unix-users whose
// default agent is the published claude-agent-acp; her "hello" reaches
// the stand-in model and its reply is her assistant's message. The
// session's bridge runs as alice, and so does every process of the agent
// under it (node, the Claude Code CLI), with HOME her home. Closing the
// tab ends the session's worker: the bridge and every agent process are
// gone, nothing of alice's runs, and the log holds exactly one "worker
// closed" record for the session, naming agent claude.
func TestClaudeAgentThroughNginxAsUnixUser(t *testing.T) {
	requireClaudeE2E(t)
	alice := makeUnixUser(t, "alice")
	const reply = "Stand-in says: hello back, through nginx."
	a := testkit.StartAnthropicT(t, testkit.AnthropicOptions{Reply: reply})
	d, n := startClaudeBehindNginx(t, alice, a)
	defer func() {
		if t.Failed() {
			t.Logf("stand-in requests: %+v", a.Requests())
		}
	}()

	tb, sid := openClaudeDashboard(t, n, alice)
	if owner, ok := d.ownerOf(sid); !ok || owner != alice.Name {
		t.Fatalf("the dashboard's session %s is %q's (live %v), want %s's", sid, owner, ok, alice.Name)
	}
	sendChat(t, tb, "hello")
	waitClaudeReply(t, tb, reply)
	if !slices.ContainsFunc(a.Messages(), func(r testkit.AnthropicRequest) bool { return r.UserText == "hello" }) {
		t.Errorf("no request to the stand-in carried the prompt \"hello\": %+v", a.Messages())
	}

	// The bridge (the session's chat worker) and the agent under it.
	w, ok := d.Worker(sid, "chat")
	if !ok {
		t.Fatalf("no chat worker for session %s: %+v", sid, d.Workers())
	}
	if uid, gid, _ := procIDs(t, w.PID); uid != alice.UID || gid != alice.GID {
		t.Errorf("the bridge %s runs as uid %d gid %d, want alice's %d %d", testkit.Describe(w.PID), uid, gid, alice.UID, alice.GID)
	}
	if cl, _ := testkit.Cmdline(w.PID); !strings.Contains(cl, " acp") {
		t.Errorf("the session's chat worker is %q, want the bridge (dashgate acp)", cl)
	}
	tracked := []pidAt{{w.PID, d.remember(w.PID)}}
	agentTop, agentProcs := 0, 0
	var seen []string
	for _, pid := range w.Children {
		p, err := testkit.ReadProc(pid)
		if err != nil || p.Dead() {
			continue // a short-lived helper of the CLI (ps, npm root -g) that ended
		}
		cl, _ := testkit.Cmdline(pid)
		uid, _, _ := procIDs(t, pid)
		home, _ := procEnv(pid, "HOME")
		seen = append(seen, fmt.Sprintf("%d ppid %d uid %d HOME=%s: %s", pid, p.PPID, uid, home, cl))
		tracked = append(tracked, pidAt{pid, d.remember(pid)})
		if p.Comm == "node" || p.Comm == "claude" || strings.Contains(cl, "node") {
			agentProcs++
		}
		if p.PPID == w.PID && strings.Contains(cl, "claude-agent-acp") {
			agentTop = pid
		}
		if uid != alice.UID || home != alice.Home {
			t.Errorf("agent process %d runs as uid %d with HOME=%q, want alice's uid %d and HOME=%s: %s", pid, uid, home, alice.UID, alice.Home, cl)
		}
	}
	t.Logf("under the bridge %d: %s", w.PID, strings.Join(seen, "; "))
	if agentTop == 0 || agentProcs < 2 {
		t.Fatalf("want claude-agent-acp a child of the bridge %d and the Claude Code CLI under it (2 node processes at least); the bridge's children: %s",
			w.PID, strings.Join(seen, "; "))
	}

	pty, ok := d.Worker(sid, "pty")
	if !ok {
		t.Fatalf("no terminal for session %s: %+v", sid, d.Workers())
	}

	// The tab goes: the session has no viewer and no turn, so its worker
	// is closed at once, and the agent with it.
	mark := d.logMark()
	closed := time.Now()
	tb.Close()
	rec, ok := d.waitLogSince(mark, 30*time.Second, func(r logRecord) bool {
		return r.Msg() == "worker closed" && r.Str("sid") == sid && r.Str("agent") != ""
	})
	if !ok {
		t.Fatalf("no \"worker closed\" record with an agent for %s within 30s of the tab's close; log:\n%s", sid, d.logText())
	}
	if rec.Str("agent") != "claude" || rec.Str("reason") != "detach" {
		t.Errorf("worker closed record %v: want agent claude, reason detach", rec)
	}
	var left []string
	if testkit.Until(30*time.Second, func() bool {
		left = left[:0]
		for _, p := range tracked {
			if present(p.pid, p.start) {
				left = append(left, testkit.Describe(p.pid))
			}
		}
		return len(left) == 0
	}) {
		t.Logf("the bridge and the agent were gone %v after the tab closed", time.Since(closed).Round(time.Millisecond))
	} else {
		t.Errorf("30s after the tab closed, still there of the bridge and the agent: %s", strings.Join(left, ", "))
	}
	if _, ok := d.Worker(sid, "chat"); ok {
		t.Errorf("session %s still has a chat worker after its tab closed", sid)
	}
	// Nothing else of alice's runs but her terminal, which a closed tab
	// parks (--pty-keepalive) rather than ends.
	var others []string
	if !testkit.Until(15*time.Second, func() bool {
		testkit.ReapZombieChildren()
		others = slices.DeleteFunc(pgrepUser(t, alice.Name), func(s string) bool { return s == strconv.Itoa(pty.PID) })
		return len(others) == 0
	}) {
		var desc []string
		for _, s := range others {
			pid, _ := strconv.Atoi(s)
			desc = append(desc, testkit.Describe(pid))
		}
		t.Errorf("processes of alice other than her parked terminal %d still running: %s", pty.PID, strings.Join(desc, ", "))
	}

	var recs []string
	for _, r := range d.Log.Records("") {
		if r.Msg() == "worker closed" && r.Str("sid") == sid && (r.Str("kind") == "chat" || r.Str("agent") != "") {
			recs = append(recs, r.String())
		}
	}
	if len(recs) != 1 {
		t.Errorf("%d \"worker closed\" records of the chat worker of %s, want 1:\n%s", len(recs), sid, strings.Join(recs, "\n"))
	}
}

// TestClaudeAgentApprovalRejectedInBrowser: the stand-in answers with a
// tool_use of Bash that is not read-only (touch), so Claude Code asks
// permission through dashgate: the approval card shows in alice's
// browser with the agent's options; she rejects; the command does not run
// (its file is not in her home), the refusal goes back to the model as a
// tool_result, and the turn ends with the stand-in's reply.
func TestClaudeAgentApprovalRejectedInBrowser(t *testing.T) {
	requireClaudeE2E(t)
	alice := makeUnixUser(t, "alice")
	const command = "touch dashgate-stand-in"
	a := testkit.StartAnthropicT(t, testkit.AnthropicOptions{ToolCommand: command})
	_, n := startClaudeBehindNginx(t, alice, a)
	defer func() {
		if t.Failed() {
			t.Logf("stand-in requests: %+v", a.Requests())
		}
	}()

	tb, _ := openClaudeDashboard(t, n, alice)
	sendChat(t, tb, "run it")
	tb.mustWaitJS(90*time.Second, "the approval card is pending",
		`!!document.querySelector('`+approvalCard+`[data-state="pending"]')`, `JSON.stringify({card: `+cardState+`, state: `+dashboardState+`})`)
	buttons := mustEval[[]string](tb, approvalButtonsJS)
	t.Logf("the approval card's buttons: %q", buttons)
	if !slices.ContainsFunc(buttons, func(b string) bool { return strings.HasPrefix(b, "deny=deny:") }) ||
		!slices.ContainsFunc(buttons, func(b string) bool { return strings.HasPrefix(b, "approve=once:") }) {
		t.Fatalf("the approval card's buttons are %q, want the agent's allow once and reject once among them", buttons)
	}
	if got := mustEval[string](tb, `document.querySelector('`+approvalCard+` [data-testid="approval-command"]')?.textContent ?? ''`); !strings.Contains(got, command) {
		t.Errorf("the approval card names %q, want the command %q", got, command)
	}
	tb.Do("reject", chromedp.Click(chromedp.CSS(approvalCard+`[data-state="pending"] [data-testid="deny"][data-choice="deny"]`)))
	waitClaudeReply(t, tb, testkit.DefaultAnthropicReply)
	if _, err := os.Stat(filepath.Join(alice.Home, "dashgate-stand-in")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the rejected command ran: stat its file in alice's home: %v", err)
	}
	msgs := a.Messages()
	if !slices.ContainsFunc(msgs, func(r testkit.AnthropicRequest) bool { return r.Answer == "tool_use" }) ||
		!slices.ContainsFunc(msgs, func(r testkit.AnthropicRequest) bool { return r.ToolResult && r.Answer == "text" }) {
		t.Errorf("the stand-in saw %+v, want a tool_use answered, then a tool_result", msgs)
	}
}
