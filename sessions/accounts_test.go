package sessions

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dashgate/dashgate/accounts"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

// statusIDs is the Uid: or Gid: line of /proc/pid/status ("1001\t1001\t1001\t1001").
func statusIDs(t *testing.T, pid int, key string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("/proc/%d/status has no %s line", pid, key)
	return ""
}

// historyOf is the in-memory history of sid.
func (h *harness) historyOf(sid string) []Message {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	return slices.Clone(h.r.sessions[sid].history)
}

// With Config.Accounts (a real accounts.Map over a real map file and a
// real Unix account), on real children: alice's worker and terminal run
// as her account (the /proc status Uid and Gid lines; the terminal as her
// login shell, -bash, since ProcSpawner.LoginShell is set); mallory (root
// in the map) and stranger (not in the map) get nothing spawned: slash.exec
// and Prompt fail with the refusal itself, the history keeps one notice
// with its reason per refusal (no error entry, no prompt), both kinds of
// terminal attach fail with it, no process carries their session's id,
// their counts stay at zero, and each refusal is one WARN record with
// sid, user and reason.
func TestAccountsRunChildrenAsTheOwner(t *testing.T) {
	t.Parallel()
	acct := testkit.UnixUser(t, "alice")
	mapFile := filepath.Join(t.TempDir(), "unix-users.map")
	if err := os.WriteFile(mapFile, []byte("alice:"+acct.Name+"\nmallory:root\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := accounts.New(accounts.Options{MapFile: mapFile})
	if err != nil {
		t.Fatal(err)
	}
	worker := testkit.ExecutableByAll(t, os.Args[0])
	h, _ := realHarnessWith(t, time.Second, func(c *Config) {
		sp := c.Spawner.(ProcSpawner)
		sp.WorkerCmd, sp.PTYCmd, sp.LoginShell = []string{worker}, []string{"/bin/sh"}, true
		c.Spawner = sp
		c.Accounts = m.Lookup
	})
	alice := Principal{User: "alice"}

	for _, user := range []string{"mallory", "stranger"} {
		t.Run(user, func(t *testing.T) {
			p := Principal{User: user}
			_, want := m.Lookup(user)
			if !errors.Is(want, accounts.ErrRefused) {
				t.Fatalf("the map does not refuse %s: %v", user, want)
			}
			mark := len(h.logs.Records("unix account refused"))
			v := viewerOf(p)
			in, err := h.r.Create(v, NewSession{Title: ""})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.r.Exec(t.Context(), v, in.ID, "/echo hi"); !errors.Is(err, accounts.ErrRefused) || err.Error() != want.Error() {
				t.Fatalf("%s's /echo: %v; want the refusal %q", user, err, want)
			}
			if _, _, err := h.r.Prompt(v, in.ID, "hello"); !errors.Is(err, accounts.ErrRefused) || err.Error() != want.Error() {
				t.Fatalf("%s's prompt: %v; want the refusal %q", user, err, want)
			}
			var kinds []string
			for _, e := range h.historyOf(in.ID) {
				kinds = append(kinds, e.Kind)
				if e.Kind == store.KindNotice && e.Text != want.Error() {
					t.Errorf("%s's notice %q; want the reason %q", user, e.Text, want)
				}
			}
			if want := []string{store.KindSlash, store.KindNotice, store.KindNotice}; !slices.Equal(kinds, want) {
				t.Errorf("%s's history kinds %v; want %v (the command, one notice per refusal)", user, kinds, want)
			}
			if _, err := h.r.AttachTerminal(t.Context(), p, in.ID, TerminalOptions{}); !errors.Is(err, accounts.ErrRefused) || err.Error() != want.Error() {
				t.Fatalf("%s's terminal: %v; want the refusal", user, err)
			}
			if _, err := h.r.AttachTerminal(t.Context(), p, "", TerminalOptions{}); !errors.Is(err, accounts.ErrRefused) {
				t.Fatalf("%s's terminal-only attach: %v; want the refusal", user, err)
			}
			if procs, err := testkit.WithEnv(workers.EnvSessionID + "=" + in.ID); err != nil || len(procs) > 0 {
				t.Errorf("processes of %s's session: %v, %v; want none", user, procs, err)
			}
			if got, _ := h.r.Get(p, in.ID); got.WorkerPID != 0 || got.PTYPID != 0 {
				t.Errorf("%s's session has children: %+v", user, got)
			}
			for _, u := range h.r.Admin().UsersSummary() {
				if u.User == user && (u.Workers != 0 || u.Terminals != 0) {
					t.Errorf("%s's counts after the refusals: %+v; want no worker, no terminal", user, u)
				}
			}
			recs := h.logs.Records("unix account refused")[mark:]
			if len(recs) != 4 {
				t.Fatalf("%d unix account refused records; want 4 (exec, prompt, two attaches): %v", len(recs), recs)
			}
			for i, rec := range recs {
				if rec.Str("level") != "WARN" || rec.Str("user") != user || rec.Str("reason") != want.Error() || rec.Str("sid") == "" {
					t.Errorf("refusal record %v; want WARN with sid, user=%s, reason=%q", rec, user, want)
				}
				if i < 3 && rec.Str("sid") != in.ID {
					t.Errorf("refusal record %d names sid %q, want %s", i, rec.Str("sid"), in.ID)
				}
			}
		})
	}

	v := viewerOf(alice)
	in, err := h.r.Create(v, NewSession{Title: ""})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := h.r.Exec(t.Context(), v, in.ID, "/echo hi"); err != nil || out != "hi" {
		t.Fatalf("alice's /echo: %q, %v", out, err)
	}
	att, err := h.r.AttachTerminal(t.Context(), alice, in.ID, TerminalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Detach(workers.ReasonDetach)
	got, _ := h.r.Get(alice, in.ID)
	ids := func(id uint32) string { return strings.Repeat(fmt.Sprint(id)+"\t", 3) + fmt.Sprint(id) }
	for what, pid := range map[string]int{"worker": got.WorkerPID, "terminal": got.PTYPID} {
		if u := statusIDs(t, pid, "Uid"); u != ids(acct.UID) {
			t.Errorf("alice's %s %d runs with Uid %q; want her account's %d", what, pid, u, acct.UID)
		}
		if g := statusIDs(t, pid, "Gid"); g != ids(acct.GID) {
			t.Errorf("alice's %s %d runs with Gid %q; want her account's %d", what, pid, g, acct.GID)
		}
	}
	if cmd, err := testkit.Cmdline(got.PTYPID); err != nil || !strings.HasPrefix(cmd, "-bash") {
		t.Errorf("alice's terminal runs %q (%v); want her login shell, -bash", cmd, err)
	}
}

// With Config.Accounts the spares are off (no terminal program runs
// before a user asks, as nobody's account): after a terminal-only attach
// handed out its first output, no spare starts, and the next attach
// starts its own; each spawn carries the account Accounts gave for its
// owner in SpawnRequest.Account. (TestTerminalSpare shows the spares with
// the same steps and no Accounts.)
func TestAccountsTurnSparesOff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		given := &accounts.Account{Name: "alice", UID: 4242, GID: 4242, Home: "/home/alice", Shell: "/bin/bash"}
		h := termHarness(t, 5, func(c *Config) {
			c.PTYSpare = true
			// Anyone but mallory has an account, even "" (a spare's owner
			// until taken): only the switch keeps spares from starting.
			c.Accounts = func(user string) (*accounts.Account, error) {
				if user == "mallory" {
					return nil, &accounts.RefusedError{User: user, Reason: `no Unix account for dashgate user "mallory"`}
				}
				return given, nil
			}
		})
		alice := Principal{User: "alice"}
		a1, err := h.r.AttachTerminal(t.Context(), alice, "", TerminalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer a1.Detach(workers.ReasonDetach)
		if _, err := a1.Next(t.Context(), make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		h.sparesOf(0, a1)
		a2, err := h.r.AttachTerminal(t.Context(), alice, "", TerminalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer a2.Detach(workers.ReasonDetach)
		if _, err := a2.Next(t.Context(), make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		h.sparesOf(0, a1, a2)
		ptys := h.sp.terminals()
		if len(ptys) != 2 {
			t.Fatalf("%d terminals started; want the two asked for", len(ptys))
		}
		for _, p := range ptys {
			if p.req.Account != given || p.req.Owner != "alice" {
				t.Errorf("terminal spawned for %q as %+v; want alice's account", p.req.Owner, p.req.Account)
			}
		}
		// mallory has no account: refused, nothing started, still no spare.
		if _, err := h.r.AttachTerminal(t.Context(), Principal{User: "mallory"}, "", TerminalOptions{}); !errors.Is(err, accounts.ErrRefused) {
			t.Fatalf("mallory's terminal: %v; want refused", err)
		}
		synctest.Wait()
		if n := len(h.sp.terminals()); n != 2 {
			t.Errorf("%d terminals after a refusal; want still 2", n)
		}
	})
}

// A refusal that comes only when the turn's worker is to start (the
// account was there when Prompt checked, and gone a moment later) ends
// the turn with one notice with the reason, sent live as event notice
// and kept in the history, instead of an error; nothing is spawned.
func TestAccountRefusedWhenTheTurnStarts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reason := `no Unix account for dashgate user "alice"`
		var asked int
		h := newHarness(t, func(c *Config) {
			c.Accounts = func(user string) (*accounts.Account, error) {
				if asked++; asked == 1 { // Prompt's check
					return &accounts.Account{Name: user}, nil
				}
				return nil, &accounts.RefusedError{User: user, Reason: reason}
			}
		})
		v := viewerOf(Principal{User: "alice"})
		in, err := h.r.Create(v, NewSession{Title: ""})
		if err != nil {
			t.Fatal(err)
		}
		_, start, err := h.r.Prompt(v, in.ID, "hello")
		if err != nil {
			t.Fatal(err)
		}
		start()
		synctest.Wait()
		if n := h.sp.spawned.Load(); n != 0 {
			t.Errorf("%d workers spawned; want none", n)
		}
		var notices []string
		for _, ev := range v.ofType("notice") {
			notices = append(notices, ev.Payload.(map[string]any)["text"].(string))
		}
		if !slices.Equal(notices, []string{reason}) || len(v.ofType("error")) != 0 {
			t.Errorf("events: notices %q, %d errors; want one notice %q and no error", notices, len(v.ofType("error")), reason)
		}
		var kinds []string
		for _, e := range h.historyOf(in.ID) {
			kinds = append(kinds, e.Kind)
		}
		if want := []string{store.KindPrompt, store.KindReply, store.KindNotice}; !slices.Equal(kinds, want) {
			t.Errorf("history kinds %v; want %v", kinds, want)
		}
	})
}
