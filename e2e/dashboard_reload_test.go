package e2e_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/dashgate/dashgate/internal/testkit"
)

// Issue 27, defects 1, 5 and 13: what a reload replays, and what the
// dashboard says and keeps while dashgate is away.

// liveQuery asks the terminal for its foreground colour and its device
// attributes and prints xterm.js's answers (read from the pty, echo off)
// through cat -v after tag: a program asking live gets its answer.
func liveQuery(tag string) string {
	return `stty -echo; printf '\e]10;?\a\e[c'; IFS= read -rd c a; stty echo; printf '` + tag + `:%s\n' "$a" | cat -v`
}

// liveAnswer matches what liveQuery(tag) prints: the OSC 10 answer (the
// theme's foreground #d7dae0), then the primary device attributes up to
// their c.
func liveAnswer(tag string) *regexp.Regexp {
	return regexp.MustCompile(`^` + tag + `:\^\[\]10;rgb:d7d7/dada/e0e0\^\[\\\^\[\[\?1;2$`)
}

// A replay only redraws: the terminal queries in the output it replays
// (printf's device attributes and colour query, vim's own at its start)
// are not answered into the pty, after a reload and after switching back to
// the session; live queries still are, before and after.
func TestReplayAnswersNothingIntoThePty(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	sid := openDashboard(t, d, tb)
	dir := t.TempDir()

	n := prompts(tb)
	typeInTerminal(t, tb, liveQuery("LIVE0"))
	if _, err := waitTerminalOutput(t, tb, liveQuery("LIVE0"), liveAnswer("LIVE0"), 10*time.Second); err != nil {
		t.Fatalf("a live query got no answer: %v", err)
	}
	waitPrompt(t, tb, n+1)
	const inside = "inside-vim-42"
	vimFile := filepath.Join(dir, "v.txt")
	if err := os.WriteFile(vimFile, []byte(inside+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n = prompts(tb)
	typeInTerminal(t, tb, "vim --clean -n "+vimFile)
	// Once vim's screen shows, xterm.js has parsed (and answered) vim's
	// queries, ahead of the keys that follow on the socket.
	tb.mustWaitJS(10*time.Second, "vim shows the file",
		fmt.Sprintf(`window.dashgate.terminalText().split('\n').includes(%s)`, js(inside)), dashboardState)
	tb.Do("quit vim", typeKeys(":q!\r"))
	waitPrompt(t, tb, n+1)

	// Each replay ends with a line read by head: what the pty gets before
	// the MARK typed after the replay is what the replay answered.
	for i, step := range []struct {
		name   string
		replay func(t *testing.T)
	}{
		{"reload", func(t *testing.T) {
			tb.Do("reload", chromedp.Reload())
			waitDashboard(t, tb)
		}},
		{"switch back", func(t *testing.T) {
			tb.Do("new session", chromedp.Click(chromedp.CSS(byTestID("new-session"))))
			tb.mustWaitJS(10*time.Second, "another session current",
				fmt.Sprintf(`window.dashgate.currentSession() !== %s && window.dashgate.ptySocketState() === 'open'`, js(sid)), dashboardState)
			tb.Do("switch back", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-testid="session-item"][data-session-id=%s] [data-testid="session-resume"]`, js(sid)))))
			tb.mustWaitJS(10*time.Second, "the first session current again",
				fmt.Sprintf(`window.dashgate.currentSession() === %s && window.dashgate.ptySocketState() === 'open'`, js(sid)), dashboardState)
		}},
	} {
		t.Run(step.name, func(t *testing.T) {
			out := filepath.Join(dir, strings.ReplaceAll(step.name, " ", "-")+".txt")
			read := fmt.Sprintf("stty -echo; head -n 1 > %s; stty echo", out)
			reading := fmt.Sprintf(`window.dashgate.terminalText().split('\n').some(l => l.endsWith(%s))`, js(read))
			typeInTerminal(t, tb, read)
			tb.mustWaitJS(10*time.Second, "head reading", reading, dashboardState)

			step.replay(t)
			// The replay is parsed up to its end (the head line): whatever
			// xterm.js answered to it is on the socket ahead of MARK.
			tb.mustWaitJS(10*time.Second, "the replay on screen", reading, dashboardState)
			n := prompts(tb)
			tb.Do("type MARK", chromedp.Evaluate[chromedp.Void](`window.dashgate.term.focus()`), typeKeys("MARK\r"))
			var got []byte
			if !testkit.Until(10*time.Second, func() bool {
				got, _ = os.ReadFile(out)
				return strings.Contains(string(got), "\n")
			}) {
				t.Fatalf("head read no line within 10s; file holds %q", got)
			}
			if string(got) != "MARK\n" {
				t.Errorf("after the %s the pty got %q before MARK, want nothing (the replay's queries were answered into the shell)", step.name, strings.TrimSuffix(string(got), "MARK\n"))
			}
			waitPrompt(t, tb, n+1)

			tag := "LIVE" + fmt.Sprint(i+1)
			n = prompts(tb)
			typeInTerminal(t, tb, liveQuery(tag))
			if _, err := waitTerminalOutput(t, tb, liveQuery(tag), liveAnswer(tag), 10*time.Second); err != nil {
				t.Errorf("after the %s a live query got no answer: %v", step.name, err)
			}
			waitPrompt(t, tb, n+1)
		})
	}
}

// promptsJS counts the prompts of the suite's bash (bash-5.2# ...) on screen.
const promptsJS = `(window.dashgate.terminalText().match(/bash-[0-9.]+[#$]/g) || []).length`

func prompts(tb *tab) int { return mustEval[int](tb, promptsJS) }

// waitPrompt waits until n prompts are on screen and the last line ends with
// one: the shell reads the next command. Keys typed earlier may be read, or
// flushed, by the command still running (vim, or the tty changing modes).
func waitPrompt(t *testing.T, tb *tab, n int) {
	t.Helper()
	tb.mustWaitJS(10*time.Second, fmt.Sprintf("prompt %d", n),
		fmt.Sprintf(`%s >= %d && /bash-[0-9.]+[#$]$/.test(window.dashgate.terminalText())`, promptsJS, n), dashboardState)
}

// colourOf is the computed colour of the first element sel matches ("" when none).
func colourOf(sel string) string {
	return fmt.Sprintf(`(() => { const e = document.querySelector(%s); return e ? getComputedStyle(e).color : ''; })()`, js(sel))
}

// The colours of app.css: --ok (a state that holds) and --text-dim.
const (
	okColour  = "rgb(95, 206, 138)"
	dimColour = "rgb(138, 145, 156)"
)

// While dashgate is stopped the dashboard says "disconnected, retrying"
// (the terminal too, not that its program could not start), the session
// states are grey rather than a green "attached", and all comes back with
// dashgate.
func TestDisconnectedSaysSoAndGreysStates(t *testing.T) {
	state := t.TempDir()
	d := startDashgateOn(t, state, "")
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	// The second dashgate starts after the browser: close the browser
	// before the cleanups (see TestHistoryCompleteAfterReloadAndRestart).
	defer func() {
		if t.Failed() {
			tb.saveArtifacts()
		}
		tb.closed = true
		b.close()
	}()
	sid := openDashboard(t, d, tb)
	attached := fmt.Sprintf(`[data-testid="session-item"][data-session-id=%s] .session-state[data-state="attached"]`, js(sid))
	tb.mustWaitJS(10*time.Second, "the session green and attached", colourOf(attached)+` === `+js(okColour), dashboardState)

	typeInTerminal(t, tb, "echo before-the-$((6*7))-restart")
	if _, err := waitTerminalOutput(t, tb, "echo before-the-$((6*7))-restart", exactly("before-the-42-restart"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	_, port, err := net.SplitHostPort(d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	stopForRestart(t, d)
	status := `document.querySelector('[data-testid="terminal-status"]')`
	tb.mustWaitJS(15*time.Second, "the terminal says it is disconnected",
		status+`.dataset.state === 'disconnected' && !`+status+`.hidden && document.querySelector('[data-testid="terminal-status-text"]').textContent === 'disconnected, retrying'`,
		dashboardState)
	if got := mustEval[string](tb, colourOf(attached)); got != dimColour {
		t.Errorf("while dashgate is down the session's state is %s, want grey %s", got, dimColour)
	}
	// A deliberate stop and a restart look the same to the page.
	if got := mustEval[string](tb, `document.querySelector('[data-testid="conn-status"]').textContent`); got != "disconnected, retrying" {
		t.Errorf("while dashgate is down the banner says %q, want %q", got, "disconnected, retrying")
	}

	startDashgateOn(t, state, net.JoinHostPort("127.0.0.1", port))
	waitDashboard(t, tb)
	tb.mustWaitJS(10*time.Second, "the terminal status gone and the state green again",
		status+`.hidden && `+colourOf(attached)+` === `+js(okColour), dashboardState)
	// The terminal did not survive the stop: the page says a new one
	// began, below the old one's output rather than in its place (issue 41:
	// "a new terminal replaces the old one with no word").
	tb.mustWaitJS(10*time.Second, "the old output kept above a line that says a new terminal began",
		`(t => /before-the-42-restart[\s\S]*── new terminal: the one above ended while this page was away ──/.test(t))(window.dashgate.terminalText())`, dashboardState)
}

// A line sent while the chat socket is down is not lost: it stays in the
// box and in the Up history, and is sent after the reconnect only when Send
// is pressed again.
func TestTextSentWhileDisconnectedIsKept(t *testing.T) {
	state := t.TempDir()
	d := startDashgateOn(t, state, "")
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	defer func() {
		if t.Failed() {
			tb.saveArtifacts()
		}
		tb.closed = true
		b.close()
	}()
	sid := openDashboard(t, d, tb)
	_, port, err := net.SplitHostPort(d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	stopForRestart(t, d)
	tb.mustWaitJS(10*time.Second, "the chat socket down", `window.dashgate.chatSocketState() !== 'open'`, dashboardState)

	const line = "kept while away"
	box := `document.querySelector('[data-testid="chat-input"]').value`
	sendChat(t, tb, line)
	tb.mustWaitJS(5*time.Second, "the page says nothing was sent",
		`[...document.querySelectorAll('[data-testid="chat-message"]')].some(e => e.textContent.startsWith('Not connected: nothing was sent.'))`, dashboardState)
	if got := mustEval[string](tb, box); got != line {
		t.Errorf("after Send while disconnected the box holds %q, want %q", got, line)
	}
	in := chromedp.CSS(byTestID("chat-input"))
	tb.Do("empty the box, then Up", chromedp.Evaluate[chromedp.Void](`document.querySelector('[data-testid="chat-input"]').value = ''`), chromedp.SendKeys(in, kb.ArrowUp))
	if got := mustEval[string](tb, box); got != line {
		t.Errorf("Up after Send while disconnected gives %q, want %q", got, line)
	}

	startDashgateOn(t, state, net.JoinHostPort("127.0.0.1", port))
	waitDashboard(t, tb)
	if got := currentSession(t, tb); got != sid {
		t.Fatalf("after the restart the current session is %s, want %s", got, sid)
	}
	// Not sent by itself: the session's history, asked on the new socket
	// (after anything the reconnect would have sent on it), has no prompt.
	prompts := fmt.Sprintf(`window.dashgate.call('session.history', {session_id: %s}).then(r => r.entries.filter(e => e.kind === 'prompt' && e.text === %s).length)`, js(sid), js(line))
	if n := mustEval[int](tb, prompts); n != 0 {
		t.Fatalf("the line was sent %d times on reconnect, before Send was pressed again", n)
	}
	if got := mustEval[string](tb, box); got != line {
		t.Errorf("after the reconnect the box holds %q, want %q", got, line)
	}
	tb.Do("press Send again", chromedp.SendKeys(in, "\r"))
	waitAssistant(t, tb, "(echo agent) "+line, 1)
	if n := mustEval[int](tb, prompts); n != 1 {
		t.Errorf("after Send the history holds the prompt %d times, want once", n)
	}
}
