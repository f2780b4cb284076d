package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// TestACPAgentAsUnixUser: with --unix-users an ACP agent runs as the
// session's owner, and so does everything it does through dashgate's
// client: the bridge and the agent have alice's uid, the agent's terminal
// reports alice's uid, gid and home (its cwd), a file it writes is owned
// by alice, and its read of a file only bob may read fails as it would
// for alice; none of dashgate's own environment reaches the agent. When
// alice's browser goes, nothing of hers is left: not the bridge, the
// agent, nor the terminal (a shell and its sleep) the agent left running.
func TestACPAgentAsUnixUser(t *testing.T) {
	alice, bob := makeUnixUser(t, "alice"), makeUnixUser(t, "bob")
	agent := testkit.ExecutableByAll(t, buildAgent(t, "github.com/dashgate/dashgate/internal/testkit/acpagent"))
	u := startUnixUsers(t, []string{alice.Name, bob.Name}, []string{"E2E_DASHGATE_OWN=not-for-agents"},
		"--agent", "test="+agent)
	c := openChat(t, alice.Name+"'s chat", u.WSURL("ws/chat"), u.as(alice.Name))
	sid := newSession(t, c, "acp as alice")
	ask := func(text string) string {
		t.Helper()
		var ps struct {
			TurnID string `json:"turn_id"`
		}
		c.mustCall("prompt.submit", map[string]any{"session_id": sid, "text": text}, &ps)
		end := c.waitTurnEvent("message.complete", sid, ps.TurnID).Payload()
		out, _ := end["text"].(string)
		if end["status"] != "complete" {
			t.Fatalf("%q: message.complete %v", text, end)
		}
		return out
	}

	want := fmt.Sprintf("terminal uid=%d gid=%d cwd=%s home=%s; agent uid=%d", alice.UID, alice.GID, alice.Home, alice.Home, alice.UID)
	if got := ask("id"); got != want {
		t.Errorf("id: %q, want %q", got, want)
	}
	ws := chatWorkers(u.dashgate)
	if len(ws) != 1 {
		t.Fatalf("chat workers: %+v", ws)
	}
	for _, pid := range append([]int{ws[0].PID}, ws[0].Children...) {
		if uid, _, _ := procIDs(t, pid); uid != alice.UID {
			t.Errorf("%s runs as uid %d, want alice's %d", testkit.Describe(pid), uid, alice.UID)
		}
		if env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); strings.Contains(string(env), "E2E_DASHGATE_OWN") {
			t.Errorf("dashgate's own environment reached %s", testkit.Describe(pid))
		}
	}

	dir := filepath.Join(alice.Home, "work")
	if got := ask("fs " + dir); !strings.HasPrefix(got, `read "two\n" err=false;`) {
		t.Errorf("fs: %q", got)
	}
	fi, err := os.Stat(filepath.Join(dir, "sub", "file.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != alice.UID || st.Gid != alice.GID {
		t.Errorf("the file the agent wrote is owned by %d:%d, want alice's %d:%d", st.Uid, st.Gid, alice.UID, alice.GID)
	}
	secret := filepath.Join(bob.Home, "secret.txt")
	if err := os.WriteFile(secret, []byte("bob's"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(secret, int(bob.UID), int(bob.GID)); err != nil {
		t.Fatal(err)
	}
	if got := ask("read " + secret); !strings.HasPrefix(got, "read failed:") || !strings.Contains(got, "permission denied") {
		t.Errorf("alice's agent reading bob's file: %q, want a permission error", got)
	}

	// A terminal the agent leaves running (a shell and its sleep) is
	// alice's too, and goes with the agent when her browser goes.
	if got := ask("sleepterm"); got != "started" {
		t.Fatalf("sleepterm: %q", got)
	}
	if sleeps := pgrepUser(t, alice.Name); len(sleeps) < 4 { // the bridge, the agent, sh, sleep
		t.Fatalf("alice's processes with the agent's terminal: %v", sleeps)
	}
	mark := u.logMark()
	c.drop(false)
	if rec, ok := u.waitLogSince(mark, 15*time.Second, func(r logRecord) bool { return r.Msg() == "worker closed" && r.Str("sid") == sid }); !ok || rec.Str("agent") != "test" || rec.Str("reason") != "detach" {
		t.Fatalf("worker closed record: %v (found %v)", rec, ok)
	}
	waitNoProcs(t, alice.Name, 15*time.Second)
}

// TestACPConversationOutlivesTheAgent: the agent's conversation id is
// kept with the session, in the store: after the browser went (the agent
// reaped) and after dashgate restarted, the next prompt's new agent is
// asked to load that conversation (the test agent offers loadSession and
// replays it, as agents do), no notice is told, and nothing of the
// replay is added to the history a second time.
func TestACPConversationOutlivesTheAgent(t *testing.T) {
	state := t.TempDir()
	agent := "test=" + buildAgent(t, "github.com/dashgate/dashgate/internal/testkit/acpagent")
	d := startOn(t, state, "--agent", agent)
	c := d.chat(t)
	sid := newSession(t, c, "acp load")
	turn := func(c *chatConn, text string) string {
		t.Helper()
		var ps struct {
			TurnID string `json:"turn_id"`
		}
		c.mustCall("prompt.submit", map[string]any{"session_id": sid, "text": text}, &ps)
		out, _ := c.waitTurnEvent("message.complete", sid, ps.TurnID).Payload()["text"].(string)
		return out
	}
	first := turn(c, "session")
	if !strings.HasPrefix(first, "session s-") {
		t.Fatalf("first turn: %q", first)
	}
	mark := d.logMark()
	c.drop(false)
	if _, ok := d.waitLogSince(mark, 15*time.Second, func(r logRecord) bool { return r.Msg() == "worker closed" && r.Str("sid") == sid }); !ok {
		t.Fatalf("the agent was not reaped with the browser; log:\n%s", d.logText())
	}
	check := func(c *chatConn) {
		t.Helper()
		if got := turn(c, "session"); got != first {
			t.Fatalf("turn after the reap: %q, want the agent's conversation of before, %q", got, first)
		}
		r := resume(t, c, sid)
		for _, m := range r.History {
			if m.Kind == "notice" || strings.Contains(m.Text, "REPLAYED") {
				t.Fatalf("history after the load: %+v", r.History)
			}
		}
		for _, ev := range c.Events() {
			if ev.Type() == "notice" || strings.Contains(fmt.Sprint(ev.Payload()), "REPLAYED") {
				t.Fatalf("event after the load: %v", ev)
			}
		}
	}
	c2 := d.chat(t)
	resume(t, c2, sid)
	check(c2)
	if _, ok := d.findLog(func(r logRecord) bool { return r.Msg() == "worker closed" && r.Str("sid") == sid }); !ok {
		t.Fatal("no worker closed record")
	}

	d.stop()
	d2 := startOn(t, state, "--agent", agent)
	c3 := d2.chat(t)
	resume(t, c3, sid)
	check(c3)
}
