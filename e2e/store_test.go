package e2e_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/dashgate/dashgate/internal/testkit"
)

// wireEntry is a history entry as the wire gives it.
type wireEntry struct {
	Seq         uint64 `json:"seq"`
	Role        string `json:"role"`
	Kind        string `json:"kind"`
	Text        string `json:"text"`
	Interrupted bool   `json:"interrupted"`
	Code        int    `json:"code"`
}

type resumed struct {
	SessionID string      `json:"session_id"`
	State     string      `json:"state"`
	History   []wireEntry `json:"history"`
}

// startOn starts dashgate with its state (and default store) in stateDir,
// its logs in a directory of its own.
func startOn(t *testing.T, stateDir string, extra ...string) *dashgate {
	t.Helper()
	return startDashgate(t, append([]string{"--state-dir", stateDir}, extra...)...)
}

func (d *dashgate) chat(t *testing.T) *chatConn {
	return openChat(t, "chat", d.WSURL("ws/chat"), bearer())
}

func newSession(t *testing.T, c *chatConn, title string) string {
	t.Helper()
	var cr struct {
		SessionID string `json:"session_id"`
	}
	c.mustCall("session.create", map[string]any{"title": title}, &cr)
	return cr.SessionID
}

func resume(t *testing.T, c *chatConn, sid string) resumed {
	t.Helper()
	var r resumed
	c.mustCall("session.resume", map[string]any{"session_id": sid}, &r)
	return r
}

// TestRestartKeepsConversations: SIGTERM suspends every chat session (one
// "session suspended" record each, no "session closed"); the next dashgate
// on the same state directory restores them detached, with no worker, and
// resume returns exactly the history it returned before, failed command,
// error, worker exit and interrupted reply included.
func TestRestartKeepsConversations(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	d := startOn(t, state)
	c := d.chat(t)
	sid := newSession(t, c, "kept")
	c.mustCall("slash.exec", map[string]any{"session_id": sid, "command": "/echo hello there"}, nil)
	var rpc *testkit.RPCError
	if err := c.call("slash.exec", map[string]any{"session_id": sid, "command": "/nosuchcommand"}, nil); !errors.As(err, &rpc) || rpc.Code != 5004 {
		t.Fatalf("/nosuchcommand: %v", err)
	}
	c.call("slash.exec", map[string]any{"session_id": sid, "command": "/exit 3"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := c.WaitEvent(ctx, "worker.exited", sid); err != nil {
		t.Fatal(err)
	}
	c.mustCall("prompt.submit", map[string]any{"session_id": sid, "text": strings.Repeat("many words ", 100)}, nil)
	if _, err := c.WaitEvent(ctx, "message.delta", sid); err != nil {
		t.Fatal(err)
	}
	c.mustCall("session.interrupt", map[string]any{"session_id": sid}, nil)
	before := resume(t, c, sid)
	// /exit 3 is a failed command (its reply is an error), then a worker
	// exit, in that order whatever the pipes said first.
	kinds := []string{"slash", "slash_output", "slash", "error", "slash", "error", "notice", "prompt", "reply"}
	if len(before.History) != len(kinds) {
		t.Fatalf("history before the restart: %+v", before.History)
	}
	for i, k := range kinds {
		if before.History[i].Kind != k {
			t.Fatalf("entry %d is %q, want %q: %+v", i, before.History[i].Kind, k, before.History)
		}
	}
	if last := before.History[len(before.History)-1]; !last.Interrupted {
		t.Fatalf("the interrupted reply: %+v", last)
	}

	d.stop()
	if _, ok := d.findLog(func(r logRecord) bool { return r.Msg() == "session suspended" && r.Str("sid") == sid }); !ok {
		t.Fatalf("no session suspended record:\n%s", d.logText())
	}
	if _, ok := d.findLog(func(r logRecord) bool { return r.Msg() == "session closed" && r.Str("sid") == sid }); ok {
		t.Fatal("a suspended session logged session closed")
	}

	d2 := startOn(t, state)
	if rec, ok := d2.waitLog(5*time.Second, func(r logRecord) bool { return r.Msg() == "sessions restored" }); !ok || rec["count"] != float64(1) {
		t.Fatalf("sessions restored: %v %v", rec, ok)
	}
	if s, ok := d2.Session(sid); !ok || s.State != "detached" || s.WorkerPID != 0 {
		t.Fatalf("restored session: %+v %v", s, ok)
	}
	c2 := d2.chat(t)
	after := resume(t, c2, sid)
	if !sameHistory(before.History, after.History) {
		t.Fatalf("history after the restart differs:\nbefore %+v\nafter  %+v", before.History, after.History)
	}
	if w := d2.Workers(); len(w) != 0 {
		t.Fatalf("a worker runs after resume, before any command: %+v", w)
	}
}

func sameHistory(a, b []wireEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCrashMidTurnKeepsPartialReply: after kill -9 in the middle of a
// streaming reply, the next dashgate restores the session with the reply
// marked interrupted, holding the text streamed until shortly before.
func TestCrashMidTurnKeepsPartialReply(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	d := startOn(t, state)
	c := d.chat(t)
	sid := newSession(t, c, "")
	c.mustCall("prompt.submit", map[string]any{"session_id": sid, "text": strings.Repeat("alpha ", 500)}, nil)

	// Read the store as another process would, until a checkpoint holds
	// some streamed words.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(state, "dashgate.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	testkit.WaitFor(t, 10*time.Second, "a checkpoint with streamed text", func() bool {
		var text string
		err := db.QueryRow(`SELECT text FROM entries WHERE session_id = ? AND kind = 'reply'`, sid).Scan(&text)
		return err == nil && strings.Contains(text, "alpha alpha")
	})
	d.kill()

	d2 := startOn(t, state)
	c2 := d2.chat(t)
	r := resume(t, c2, sid)
	if len(r.History) != 2 {
		t.Fatalf("history after the crash: %+v", r.History)
	}
	reply := r.History[1]
	if reply.Kind != "reply" || !reply.Interrupted || !strings.HasPrefix(reply.Text, "(echo agent) alpha alpha") {
		t.Fatalf("the reply after the crash: %+v", reply)
	}
	if w := d2.Workers(); len(w) != 0 {
		t.Fatalf("a worker runs for the restored session: %+v", w)
	}
}

// refuse runs dashgate with args and expects it to refuse to start: exit
// code 2 and one line on stderr holding want.
func refuse(t *testing.T, want string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, dashgateBin, append([]string{"serve", "--addr", "127.0.0.1:0", "--log-format", "json"}, args...)...)
	cmd.Env = testkit.CleanEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("dashgate %v: %v, want exit code 2; stderr:\n%s", args, err, stderr.String())
	}
	var last string
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if !strings.HasPrefix(line, "{") { // the JSON log records before it
			last = line
		}
	}
	if !strings.HasPrefix(last, "dashgate: ") || !strings.Contains(last, want) {
		t.Fatalf("stderr line %q does not say %q; stderr:\n%s", last, want, stderr.String())
	}
}

// TestStoreRefusals: a store that cannot be used stops the start with exit
// code 2 and one line naming it; a file it cannot read is left untouched.
func TestStoreRefusals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	random := make([]byte, 8192)
	rand.Read(random)
	corrupt := filepath.Join(dir, "corrupt.db")
	os.WriteFile(corrupt, random, 0o600)
	text := filepath.Join(dir, "notes.db")
	os.WriteFile(text, []byte("these are my notes, not a database\n"), 0o600)

	// A store from a newer dashgate: a real one whose schema version is
	// ahead of this build.
	newer := filepath.Join(dir, "newer.db")
	d := startDashgate(t, "--store", newer)
	d.stop()
	db, err := sql.Open("sqlite", newer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA user_version = 9999`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	tests := []struct {
		name, path, want string
	}{
		{"random bytes", corrupt, corrupt},
		{"a text file", text, text},
		{"newer schema", newer, "schema version"},
		{"a directory", dir, dir},
		{"cannot create", "/proc/dashgate.db", "/proc/dashgate.db"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before []byte
			var beforeInfo os.FileInfo
			if fi, err := os.Stat(tt.path); err == nil && fi.Mode().IsRegular() {
				before, _ = os.ReadFile(tt.path)
				beforeInfo = fi
			}
			refuse(t, tt.want, "--store", tt.path, "--state-dir", t.TempDir())
			if beforeInfo != nil {
				after, _ := os.ReadFile(tt.path)
				fi, _ := os.Stat(tt.path)
				if !bytes.Equal(before, after) || !fi.ModTime().Equal(beforeInfo.ModTime()) {
					t.Fatalf("%s was modified", tt.path)
				}
				for _, suffix := range []string{"-wal", "-shm", "-journal"} {
					if _, err := os.Stat(tt.path + suffix); err == nil && tt.name != "newer schema" {
						t.Fatalf("%s%s was created", tt.path, suffix)
					}
				}
			}
		})
	}
}

// TestDiskFull: with the store on a small tmpfs that fills up, chat goes
// on, one ERROR record says the writes fail, and once space returns every
// entry is written (one INFO record) and survives a restart.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=2m"); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root): %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	state := t.TempDir()
	storePath := filepath.Join(mnt, "dashgate.db")
	d := startOn(t, state, "--store", storePath)
	d.allowErrors = []string{"store write failed"}
	c := d.chat(t)
	sid := newSession(t, c, "")
	c.mustCall("slash.exec", map[string]any{"session_id": sid, "command": "/echo before"}, nil)

	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			break // ENOSPC
		}
	}
	f.Close()

	word := strings.Repeat("x", 2000)
	for i := range 30 {
		var out struct {
			Output string `json:"output"`
		}
		c.mustCall("slash.exec", map[string]any{"session_id": sid, "command": "/echo " + word}, &out)
		if out.Output != word {
			t.Fatalf("command %d while the disk is full: %q", i, out.Output)
		}
	}
	if _, ok := d.waitLog(10*time.Second, func(r logRecord) bool { return r.Msg() == "store write failed" }); !ok {
		t.Fatalf("no store write failed record:\n%s", d.logText())
	}
	os.Remove(filler)
	if _, ok := d.waitLog(15*time.Second, func(r logRecord) bool { return r.Msg() == "store writes resumed" }); !ok {
		t.Fatalf("no store writes resumed record:\n%s", d.logText())
	}
	fails := d.Log.Records("store write failed")
	if len(fails) != 1 || fails[0].Str("level") != "WARN" {
		t.Fatalf("store write failed records: %v", fails)
	}
	want := len(resume(t, c, sid).History)
	if want != 62 {
		t.Fatalf("history holds %d entries, want 62", want)
	}
	d.stop()
	d2 := startOn(t, state, "--store", storePath)
	if got := resume(t, d2.chat(t), sid); len(got.History) != want {
		t.Fatalf("after the restart the history holds %d entries, want %d", len(got.History), want)
	}
}

// TestTwoInstancesOneStateDir: two dashgates on one state directory each
// keep their own store file, so their sessions never mix and both survive
// a restart.
func TestTwoInstancesOneStateDir(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	a := startOn(t, state)
	b := startOn(t, state)
	paths := map[string]string{}
	for name, d := range map[string]*dashgate{"a": a, "b": b} {
		rec, ok := d.waitLog(5*time.Second, func(r logRecord) bool { return r.Msg() == "store opened" })
		if !ok {
			t.Fatalf("%s: no store opened record", name)
		}
		paths[name] = rec.Str("path")
	}
	if paths["a"] == paths["b"] {
		t.Fatalf("both instances use %s", paths["a"])
	}
	sids := map[string]string{}
	for name, d := range map[string]*dashgate{"a": a, "b": b} {
		sids[name] = newSession(t, d.chat(t), name)
	}
	a.stop()
	b.stop()

	// Restarted one after the other, each takes a free file: between them
	// they restore both sessions, each exactly once.
	a2 := startOn(t, state)
	b2 := startOn(t, state)
	seen := map[string]int{}
	for _, d := range []*dashgate{a2, b2} {
		ss := d.Sessions()
		if len(ss) != 1 {
			t.Fatalf("an instance restored %d sessions, want 1: %+v", len(ss), ss)
		}
		seen[ss[0].SessionID]++
	}
	if seen[sids["a"]] != 1 || seen[sids["b"]] != 1 {
		t.Fatalf("restored %v, want each of %v once", seen, sids)
	}
}
