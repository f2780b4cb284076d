package e2e_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/dashgate/dashgate/internal/testkit"
)

// Issue 41, with logins: the same failover as
// TestClusterFailoverPageFollowsItsSession, for a user of a users file
// (--users-file) with two sessions, an admin user. alice logs in through nginx with the
// login URL `dashgate user add` printed, pinned to node a; she chats in
// one session, starts a second and, while its reply streams, types a
// draft. Node a is killed (SIGKILL). Without a reload (so with no login
// page and no token asked: her login cookie is the cluster's) the page
// follows the session it showed onto node b, keeps listing both of her
// sessions while it waits (marked moving) and lists both again from b,
// none made by the page; the draft, sent, is answered.
// Then node a comes back on its address and state directory: a new
// browser (bob, pinned to a) is served by a, starts a session there that
// a answers, and gets every asset the page names; alice's sessions stay
// with b, which adopted them.
func TestClusterFailoverWithLoginsKeepsTheList(t *testing.T) {
	if os.Getenv(testkit.EnvE2E) != "1" {
		t.Skip("waits for a killed node's lease to lapse: set DASHGATE_E2E=1 to run it")
	}
	requireNginx(t)
	m := newModelServer(t)
	m.then(reply("Noted."), halted([]string{"Cut ", "short "}, nil, ""), reply("Still here, on b."), reply("Hello bob, from a."))
	users := filepath.Join(t.TempDir(), "users")
	_, aliceToken := userAdd(t, users, "alice", "http://127.0.0.1/")
	_, bobToken := userAdd(t, users, "bob", "http://127.0.0.1/")
	storeURL := testkit.Postgres(t)
	stateA := filepath.Join(t.TempDir(), "state-a")
	// alice is an admin too: her dashboard is hers all the same (a trial
	// found an admin user's list left without the sessions b adopted).
	nodeFlags := []string{"--users-file", users, "--admin-users", "alice"}
	a := startAgentNode(t, m, storeURL, "a", stateA, pageExpiry, nodeFlags...)
	b := startAgentNode(t, m, storeURL, "b", filepath.Join(t.TempDir(), "state-b"), pageExpiry, nodeFlags...)
	n := startNginx(t, nginxSite{file: "dashgate-cluster.conf", upstreams: []string{a.Addr, b.Addr}})

	// A browser pinned to node a (nginx routes by the dashgate_node
	// cookie's node), logged in as alice by her login URL.
	const pinA = "a.0000000000000000"
	open := func(br *browser, who, token string) *tab {
		tb := br.newTab(t, who)
		if _, err := chromedp.Call(tb.ctx, network.SetCookie, network.SetCookieParams{Name: "dashgate_node", Value: pinA, URL: n.URL("/")}); err != nil {
			t.Fatalf("network.setCookie dashgate_node: %v", err)
		}
		tb.Do(who+" logs in through nginx", chromedp.Navigate(n.URL("/?token="+token)))
		waitDashboard(t, tb)
		if got := mustEval[string](tb, `document.querySelector('.meta[title="node"]')?.textContent ?? ''`); got != "a" {
			t.Fatalf("%s's dashboard names node %q, want a (pinned)", who, got)
		}
		return tb
	}
	brAlice := newBrowser(t)
	tb := open(brAlice, "alice", aliceToken)
	other := currentSession(t, tb)
	sendChat(t, tb, "first words")
	waitAssistant(t, tb, "Noted.", 1)
	startSession(tb)
	tb.mustWaitJS(15*time.Second, "a second session shown", `window.dashgate.currentSession() !== `+js(other)+` && `+dashboardReady, dashboardState)
	sid := currentSession(t, tb)
	sendChat(t, tb, "hold on")
	tb.mustWaitJS(15*time.Second, "the reply streams", streamingReply+`.startsWith('Cut short')`, entriesState)
	const draft = "and then?"
	tb.Do("type a draft", chromedp.SendKeys(chromedp.CSS(`[data-testid="chat-input"]`), draft))
	testkit.WaitFor(t, 30*time.Second, "both sessions and the streamed reply in PostgreSQL", func() bool {
		row, err := storedSession(t, storeURL, sid)
		if err != nil || row.node != "a" || row.entries != 2 {
			return false
		}
		if row, err := storedSession(t, storeURL, other); err != nil || row.entries != 2 {
			return false
		}
		text, interrupted, err := storedReply(t, storeURL, sid)
		return err == nil && interrupted && strings.HasPrefix(text, "Cut short")
	})
	mustEval[bool](tb, failoverRecorder)

	a.kill()
	w := &failoverWatch{t: t, tb: tb, storeURL: storeURL, killed: time.Now(), current: sid, mayList: []string{other, sid}, stored: 2}
	both := []string{other, sid}
	slices.Sort(both)
	// While it moves, the list keeps both sessions (marked moving), not
	// "No sessions", and the terminal says it waits for its session, not
	// that it could not start.
	w.poll("the page says the conversation is moving, both sessions still listed, the terminal waiting", w.killed.Add(pageExpiry+5*time.Second), func(p pageNow) bool {
		return len(p.Seen.Moving) > 0 && p.Moving != "" && slices.Equal(slices.Sorted(slices.Values(p.Live)), both) &&
			strings.Contains(p.Terminal, "waits for its session")
	})
	want := []entry{{"prompt", "hold on"}, {"reply", "Cut short [interrupted]"}}
	conversation := func(es []entry) []entry {
		return slices.DeleteFunc(slices.Clone(es), func(e entry) bool { return e.Kind != "prompt" && e.Kind != "reply" })
	}
	w.poll("the page back on its session on node b, both sessions listed", w.killed.Add(pageExpiry+20*time.Second), func(p pageNow) bool {
		live := slices.Sorted(slices.Values(p.Live))
		return p.Moving == "" && p.Current == sid && p.Chat == "open" && p.Node == "b" &&
			!p.Streaming && slices.Equal(conversation(p.Entries), want) && slices.Equal(live, both)
	})
	t.Logf("the page back on node b, both sessions listed, %.1f s after the kill", time.Since(w.killed).Seconds())
	if w.now.Draft != draft {
		t.Errorf("the chat input holds %q after the failover, want the draft %q", w.now.Draft, draft)
	}
	tb.Do("send the draft", chromedp.SendKeys(chromedp.CSS(`[data-testid="chat-input"]`), "\r"))
	want = append(want, entry{"prompt", draft}, entry{"reply", "Still here, on b."})
	w.poll("the draft answered on b", time.Now().Add(15*time.Second), func(p pageNow) bool {
		return !p.Streaming && slices.Equal(conversation(p.Entries), want)
	})

	// Node a comes back. Once nginx routes a's browsers to it again, a new
	// browser pinned to a is served there, with every asset. (alice's
	// browser goes first: a dashgate started after it would count it,
	// still running at its stop, as a process left to the test.)
	brAlice.close()
	a = startAgentNode(t, m, storeURL, "a", stateA, pageExpiry, append(nodeFlags, "--addr", a.Addr)...)
	probe := probeClient(t, n, pinA)
	testkit.WaitFor(t, 15*time.Second, "nginx routing a browser pinned to a to node a again", func() bool {
		return servedBy(t, probe, n, bobToken) == "a"
	})
	bob := open(newBrowser(t), "bob", bobToken)
	bobSid := currentSession(t, bob)
	sendChat(t, bob, "hello")
	waitAssistant(t, bob, "Hello bob, from a.", 1)
	if _, ok := a.Session(bobSid); !ok {
		t.Errorf("bob's new session %s is not on node a, which served his page", bobSid)
	}
	assets := mustEval[[]string](bob, `performance.getEntriesByType('resource').filter(e => new URL(e.name).pathname.startsWith('/static/')).map(e => e.responseStatus + ' ' + new URL(e.name).pathname)`)
	if len(assets) == 0 {
		t.Fatal("bob's page loaded no asset under /static/")
	}
	for _, s := range assets {
		if !strings.HasPrefix(s, "200 ") {
			t.Errorf("bob's page on the returned node a: asset %s, want 200", s)
		}
	}
	// alice's sessions stay where they were adopted.
	for _, id := range both {
		if _, ok := b.Session(id); !ok {
			t.Errorf("alice's session %s is no longer on node b after node a returned", id)
		}
		if _, ok := a.Session(id); ok {
			t.Errorf("the returned node a took alice's session %s back", id)
		}
	}
	if got := mustEval[[]string](bob, `[...document.querySelectorAll('[data-testid="session-item"]')].map(e => e.dataset.sessionId)`); !slices.Equal(got, []string{bobSid}) {
		t.Errorf("bob's page lists %v, want only his session %s", got, bobSid)
	}
}
