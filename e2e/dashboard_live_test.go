package e2e_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/dashgate/dashgate/internal/testkit"
)

// The dashboard live (issue 27): what a tab shows while things happen is
// what a reload shows. Every viewer sees every entry as it is made, a
// reload mid-reply loses nothing, each outcome of a turn is one card.

// streamingReply is the text of the reply being streamed, "" when none.
const streamingReply = `(m => m ? m.textContent : '')(document.querySelector('[data-testid="chat-log"] [data-testid="entry"][data-kind="reply"] [data-testid="chat-message"][data-streaming="true"]'))`

// entriesState lists the entries shown, for failure messages.
const entriesState = `JSON.stringify(` + entriesJS + `)`

// halted streams first, then waits until release is closed (or the client
// went) and streams rest and the end of the stream.
func halted(first []string, release <-chan struct{}, rest string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		var chunks []string
		for _, c := range first {
			chunks = append(chunks, textChunk(c))
		}
		sse(w, chunks...)
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		sse(w, textChunk(rest), `{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}`, "[DONE]")
	}
}

// waitSettled waits until the chat log shows entries of exactly kinds
// (none streaming) and returns them.
func waitSettled(t *testing.T, tb *tab, what string, kinds ...string) []entry {
	t.Helper()
	b, _ := json.Marshal(kinds)
	tb.mustWaitJS(15*time.Second, what,
		fmt.Sprintf(`JSON.stringify(%s.map(e => e.kind)) === %s && !document.querySelector('[data-testid="chat-message"][data-streaming="true"]')`, entriesJS, js(string(b))),
		entriesState)
	return entries(tb)
}

// TestSecondTabSeesEveryEntryLive: with two tabs on one session, what one
// tab types (a slash command, a prompt) and what it gets (the command's
// output, the reply) shows in the other tab at once, in order, as a
// reload shows it; the tab that typed it shows each entry once.
func TestSecondTabSeesEveryEntryLive(t *testing.T) {
	m := newModelServer(t)
	d := startAgent(t, m, t.TempDir())
	b := newBrowser(t)
	tb1 := b.newTab(t, "tab1")
	sid := openDashboard(t, d, tb1)
	tb2 := b.newTab(t, "tab2")
	tb2.Do("open the dashboard", chromedp.Navigate(d.URL("/")))
	waitDashboard(t, tb2)
	if got := currentSession(t, tb2); got != sid {
		t.Fatalf("the second tab shows session %s, want %s", got, sid)
	}

	sendChat(t, tb1, "/help")
	waitSettled(t, tb1, "tab 1: the command and its output", "slash", "slash_output")
	m.then(reply("Hello from the model."))
	sendChat(t, tb1, "hello from tab one")
	want := waitSettled(t, tb1, "tab 1: the command, its output, the prompt, its reply", "slash", "slash_output", "prompt", "reply")
	if want[0].Text != "/help" || want[2].Text != "hello from tab one" || want[3].Text != "Hello from the model." {
		t.Fatalf("tab 1 shows %+v", want)
	}
	waitEntries(t, tb2, "tab 2 shows what tab 1 typed and got, live", want)

	tb2.Do("reload tab 2", chromedp.Reload())
	waitDashboard(t, tb2)
	waitEntries(t, tb2, "tab 2 after a reload shows the same", want)
	// Nothing came twice, or late, to the tab that typed it.
	if got := entries(tb1); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("tab 1 shows %+v, want %+v", got, want)
	}
}

// TestReloadMidReplyKeepsTheReply: a reload while the reply streams (with
// the default --detach-turn-grace) neither cancels the model request nor
// loses text: the tab comes back to the text so far, still streaming,
// and the rest streams into it; the worker stays.
func TestReloadMidReplyKeepsTheReply(t *testing.T) {
	m := newModelServer(t)
	release := make(chan struct{})
	m.then(halted([]string{"Half of ", "the answer "}, release, "and the rest."))
	d := startAgent(t, m, t.TempDir())
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	sid := openDashboard(t, d, tb)

	sendChat(t, tb, "tell me")
	tb.mustWaitJS(15*time.Second, "the first half streams", streamingReply+`.startsWith('Half of the answer')`, entriesState)
	w, ok := d.Worker(sid, "chat")
	if !ok {
		t.Fatalf("no chat worker for %s: %+v", sid, d.Workers())
	}

	tb.Do("reload mid-reply", chromedp.Reload())
	waitDashboard(t, tb)
	tb.mustWaitJS(15*time.Second, "after the reload the text so far, still streaming", streamingReply+`.startsWith('Half of the answer')`, entriesState)
	close(release)
	waitEntries(t, tb, "the rest streamed in", []entry{{"prompt", "tell me"}, {"reply", "Half of the answer and the rest."}})

	if got, ok := d.Worker(sid, "chat"); !ok || got.PID != w.PID {
		t.Errorf("the chat worker after the reload: %+v %v, want %d still there", got, ok, w.PID)
	}
	for _, r := range d.Log.Records("worker closed") {
		if r["worker_pid"] == float64(w.PID) {
			t.Errorf("the worker was closed: %s", r)
		}
	}
	tb.Do("reload again", chromedp.Reload())
	waitDashboard(t, tb)
	waitEntries(t, tb, "the stored reply", []entry{{"prompt", "tell me"}, {"reply", "Half of the answer and the rest."}})
}

// TestClosedTabTurnFinishesThenWorkerGoes: a turn whose tab went finishes
// (its reply stored), and its worker is closed the moment it ends, with
// one record carrying turn_grace_ms; the next tab shows the whole reply.
func TestClosedTabTurnFinishesThenWorkerGoes(t *testing.T) {
	m := newModelServer(t)
	release := make(chan struct{})
	m.then(halted([]string{"Written ", "while away "}, release, "and done."))
	d := startAgent(t, m, t.TempDir())
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	sid := openDashboard(t, d, tb)

	sendChat(t, tb, "work on it")
	tb.mustWaitJS(15*time.Second, "the first words stream", streamingReply+`.startsWith('Written while away')`, entriesState)
	w, ok := d.Worker(sid, "chat")
	if !ok {
		t.Fatalf("no chat worker for %s: %+v", sid, d.Workers())
	}
	tb.Close()
	testkit.WaitFor(t, 10*time.Second, "the session detached", func() bool { s, ok := d.Session(sid); return ok && s.State == "detached" })
	if !alive(w.PID, d.startTime(w.PID)) {
		t.Fatalf("the worker %d went with the tab, mid-turn", w.PID)
	}
	close(release)
	rec, ok := d.waitLog(15*time.Second, func(r logRecord) bool { return r.Msg() == "worker closed" && r["worker_pid"] == float64(w.PID) })
	if !ok {
		t.Fatalf("no worker closed record for %d after the turn ended; log:\n%s", w.PID, d.logText())
	}
	if rec.Str("reason") != "detach" || rec["turn_grace_ms"] == nil {
		t.Errorf("worker closed record: %s, want reason detach and turn_grace_ms", rec)
	}
	var n int
	for _, r := range d.Log.Records("worker closed") {
		if r["worker_pid"] == float64(w.PID) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d worker closed records for %d, want 1", n, w.PID)
	}

	tb2 := b.newTab(t, "again")
	tb2.Do("open the dashboard", chromedp.Navigate(d.URL("/")))
	waitDashboard(t, tb2)
	if got := currentSession(t, tb2); got != sid {
		t.Fatalf("the new tab shows %s, want %s", got, sid)
	}
	waitEntries(t, tb2, "the whole reply", []entry{{"prompt", "work on it"}, {"reply", "Written while away and done."}})
}

// TestOneCardPerOutcome: a model server that fails before any text is
// one error card (no empty reply marked interrupted); an administrator's
// reap of the worker mid-reply is the text so far, marked interrupted,
// and one notice that says an administrator ended it (no "the worker
// stopped before it answered"); live and after a reload alike.
func TestOneCardPerOutcome(t *testing.T) {
	m := newModelServer(t)
	d := startAgent(t, m, t.TempDir())
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	sid := openDashboard(t, d, tb)

	m.then(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"message":"the model is down"}}`, http.StatusBadGateway)
	})
	sendChat(t, tb, "fail please")
	first := waitSettled(t, tb, "the failed turn is its error alone", "prompt", "error")

	m.then(func(w http.ResponseWriter, r *http.Request) {
		sse(w, textChunk("partial "), textChunk("words "))
		<-r.Context().Done()
	})
	sendChat(t, tb, "go on")
	tb.mustWaitJS(15*time.Second, "the words stream", streamingReply+`.startsWith('partial words')`, entriesState)
	w, ok := d.Worker(sid, "chat")
	if !ok {
		t.Fatalf("no chat worker for %s", sid)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, d.URL(fmt.Sprintf("admin/workers/%d/reap", w.PID)), nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Accept", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		t.Fatalf("reap worker %d: %s", w.PID, res.Status)
	}
	want := append(first, entry{"prompt", "go on"}, entry{"reply", "partial words [interrupted]"}, entry{"notice", "worker ended by an administrator"})
	waitEntries(t, tb, "the reaped turn: its text, interrupted, and one notice", want)
	for _, e := range entries(tb) {
		if strings.Contains(e.Text, "stopped before it answered") {
			t.Errorf("an entry says %q", e.Text)
		}
	}
	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	waitEntries(t, tb, "after a reload, the same cards", want)
}

// TestFirstPromptTitlesTheSession: a session keeps no "session N" once
// its first prompt is typed: it takes that prompt's first words (cut at a
// word, with …), in the list at once and after a reload; and after its
// default-titled session was reaped, the next one is not given the
// closed one's "session N" again (the dashboard, which knows only the
// live ones, asks for it).
func TestFirstPromptTitlesTheSession(t *testing.T) {
	m := newModelServer(t)
	d := startAgent(t, m, t.TempDir())
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	sid := openDashboard(t, d, tb)
	first, _ := d.Session(sid)
	if first.Title != "session 1" {
		t.Fatalf("the first session is titled %q, want session 1", first.Title)
	}

	// A slash command is not a prompt: the title stays.
	sendChat(t, tb, "/help")
	waitSettled(t, tb, "the command ran", "slash", "slash_output")
	if s, _ := d.Session(sid); s.Title != "session 1" {
		t.Fatalf("after a slash command the title is %q", s.Title)
	}
	// Reaped with its default title: it stands in the closed list as "session 1".
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, d.URL("admin/sessions/"+sid+"/reap"), nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Accept", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		t.Fatalf("reap session %s: %s", sid, res.Status)
	}
	tb.mustWaitJS(15*time.Second, "the tab says the session closed", `[...document.querySelectorAll('[data-testid="chat-log"] [data-testid="chat-message"]')].some(e => e.textContent === 'the next message starts a new session')`, entriesState)
	// A reload knows no live session: the dashboard makes one, and asks
	// for "session 1" again.
	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	sid2 := currentSession(t, tb)
	if sid2 == sid {
		t.Fatalf("after the reap the tab still shows %s", sid)
	}
	if s, _ := d.Session(sid2); s.Title != "session 2" {
		t.Errorf("the next session is titled %q, want session 2 (session 1 is the closed one's)", s.Title)
	}

	m.then(reply("Sure."))
	const want = "Plan the quarterly offsite for the…"
	sendChat(t, tb, "Plan the quarterly offsite for the whole team")
	testkit.WaitFor(t, 15*time.Second, "the session titled from its first prompt", func() bool { s, _ := d.Session(sid2); return s.Title == want })
	current := `(e => e ? e.textContent : '')(document.querySelector('[data-testid="session-item"].current'))`
	tb.mustWaitJS(15*time.Second, "the list shows the new title", current+`.includes(`+js(want)+`)`, current)
	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	tb.mustWaitJS(15*time.Second, "after a reload the list shows the new title", current+`.includes(`+js(want)+`)`, current)
}

// TestShutdownMidReplySaysDashgateStopped: dashgate stopping (SIGTERM)
// while a reply streams keeps the text so far, marked interrupted, and
// says "dashgate stopped" after the restart: no error card, nothing that
// says the worker crashed.
func TestShutdownMidReplySaysDashgateStopped(t *testing.T) {
	m := newModelServer(t)
	m.then(halted([]string{"Cut ", "short "}, nil, ""))
	state := t.TempDir()
	d := startAgent(t, m, t.TempDir(), "--state-dir", state)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	sid := openDashboard(t, d, tb)
	sendChat(t, tb, "start")
	tb.mustWaitJS(15*time.Second, "the words stream", streamingReply+`.startsWith('Cut short')`, entriesState)

	_, port, err := net.SplitHostPort(d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	stopForRestart(t, d)
	d2 := startAgent(t, m, t.TempDir(), "--state-dir", state, "--addr", net.JoinHostPort("127.0.0.1", port))
	waitDashboard(t, tb)
	if got := currentSession(t, tb); got != sid {
		t.Fatalf("after the restart the page shows %s, want %s", got, sid)
	}
	want := []entry{{"prompt", "start"}, {"reply", "Cut short [interrupted]"}, {"notice", "dashgate stopped before the reply was finished"}}
	waitEntries(t, tb, "after the restart", want)
	tb.Do("load the page again", chromedp.Navigate(d2.URL("/")))
	waitDashboard(t, tb)
	waitEntries(t, tb, "after a reload", want)
	b.close() // before d2 stops: its stop counts what runs as orphans
}
