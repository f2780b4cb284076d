package main

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
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
