package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/store/sqlite"
	"github.com/dashgate/dashgate/workers"
)

// TestStoreLease: a store file is held by one dashgate at a time. With the
// default path a second one takes the next file; an explicit path that is
// held refuses (a *startupError, exit 2); a released file is taken again.
func TestStoreLease(t *testing.T) {
	state := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	cfg := config{StateDir: state}
	first, err := openStore(t.Context(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	second, err := openStore(t.Context(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if first.Path != filepath.Join(state, "dashgate.db") || second.Path != filepath.Join(state, "dashgate-2.db") {
		t.Fatalf("paths %s and %s", first.Path, second.Path)
	}
	_, err = openStore(t.Context(), config{StateDir: state, Store: first.Path}, log)
	var refused *startupError
	if !errors.As(err, &refused) || !errors.Is(err, errLeased) {
		t.Fatalf("an explicit store in use: %v", err)
	}
	first.Close()
	again, err := openStore(t.Context(), cfg, log)
	if err != nil || again.Path != first.Path {
		t.Fatalf("after the release: %v, %v", again, err)
	}
	again.Close()
	second.Close()
	if mem, err := openStore(t.Context(), config{StateDir: state, Store: "none"}, log); err != nil || mem.Durable || mem.Path != "" {
		t.Fatalf("--store none: %+v %v", mem, err)
	}
}

// TestStateToken: without --token, the token made at the first start is
// kept in the state dir (0600) and reused by the next, so a browser's
// cookie outlives a restart.
func TestStateToken(t *testing.T) {
	dir := t.TempDir()
	first, err := stateToken(dir)
	if err != nil || len(first) < 32 {
		t.Fatalf("first token %q, %v", first, err)
	}
	again, err := stateToken(dir)
	if err != nil || again != first {
		t.Fatalf("next start's token %q, %v; want %q", again, err, first)
	}
	fi, err := os.Stat(filepath.Join(dir, "token"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi.Mode(), err)
	}
	if other, _ := stateToken(t.TempDir()); other == first {
		t.Fatal("two state dirs share a token")
	}
}

// TestStoreDamagedRefused: dashgate given a store file cut inside its last
// page refuses to start: exit code 2, one line on stderr naming the file,
// and the file keeps its bytes.
func TestStoreDamagedRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "damaged.db")
	st, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := store.Batch{Sessions: []store.Session{{ID: "s", State: store.StateSuspended}}}
	for i := range 100 {
		b.Entries = append(b.Entries, store.SessionEntry{SessionID: "s", Entry: store.Entry{
			Seq: uint64(i + 1), Kind: store.KindPrompt, Text: strings.Repeat("a damaged file is refused ", i%20+1)}})
	}
	if err := st.Apply(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()-100); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Bounded: a dashgate that starts serves until the deadline kills it.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, "--addr", "127.0.0.1:0", "--log-format", "json",
		"--state-dir", filepath.Join(dir, "state"), "--store", path)
	cmd.Env = append(testkit.CleanEnv(), mainEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = workers.Run(cmd) // not a plain fork: TestNodeLoad's workers close in parallel
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("dashgate: %v; want exit code 2; stderr:\n%s", err, stderr.String())
	}
	var lines []string
	for line := range strings.Lines(stderr.String()) {
		if !strings.HasPrefix(line, "{") { // the JSON log records before it
			lines = append(lines, line)
		}
	}
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "dashgate: ") || !strings.Contains(lines[0], path) ||
		!strings.Contains(lines[0], sqlite.ErrDamaged.Error()) {
		t.Fatalf("stderr %q; want one line naming %s as damaged", stderr.String(), path)
	}
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(before, after) {
		t.Fatalf("the refused file changed (%d bytes -> %d, %v)", len(before), len(after), err)
	}
}
