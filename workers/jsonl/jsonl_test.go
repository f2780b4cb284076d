package jsonl

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestServe: requests run concurrently, a cancel request ends the one it
// names (and is answered), a bad line is reported and skipped, Exit makes
// Serve return its code after the running requests returned.
func TestServe(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var diag strings.Builder
	s := NewServer("test worker", outW, &diag)
	done := make(chan int)
	returned := make(chan struct{})
	go func() {
		done <- s.Serve(t.Context(), inR, func(ctx context.Context, req Request) {
			switch req.Method {
			case "hang":
				<-ctx.Done()
				s.Reply(req.ID, map[string]any{"cancelled": true})
				close(returned)
			case "exit":
				s.Exit(3)
			default:
				s.Fail(req.ID, "unknown", "failure", "nope")
			}
		})
	}()
	lines := bufio.NewScanner(outR)
	next := func() map[string]any {
		t.Helper()
		if !lines.Scan() {
			t.Fatal("no line")
		}
		var m map[string]any
		json.Unmarshal(lines.Bytes(), &m)
		return m
	}
	io.WriteString(inW, `{"id":1,"method":"hang"}`+"\n"+`not json`+"\n"+`{"id":2,"method":"what"}`+"\n")
	if m := next(); m["id"] != 2.0 || m["ok"] != false || m["failure"] != "nope" {
		t.Fatalf("reply to 2: %v", m)
	}
	io.WriteString(inW, `{"id":3,"method":"cancel","params":{"id":1}}`+"\n")
	got := map[float64]map[string]any{}
	for range 2 {
		m := next()
		got[m["id"].(float64)] = m
	}
	if got[1]["ok"] != true || got[3]["result"].(map[string]any)["cancelled"] != true {
		t.Fatalf("replies to 1 and 3: %v", got)
	}
	<-returned
	go io.Copy(io.Discard, outR)
	io.WriteString(inW, `{"id":4,"method":"exit"}`+"\n")
	if code := <-done; code != 3 {
		t.Fatalf("Serve returned %d, want 3", code)
	}
	inW.Close()
	outW.Close()
	if !strings.Contains(diag.String(), "test worker: bad request line") {
		t.Fatalf("diagnostics: %q", diag.String())
	}
}

// awaitExit (the parent watchdog's wait) returns true once the process
// exits, woken by its pidfd; a pid that is no longer the process meant
// counts as gone at once.
func TestAwaitExit(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("/bin/sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() { cmd.Wait(); close(reaped) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-reaped })
	if !awaitExit(cmd.Process.Pid, func() bool { return false }) {
		t.Fatal("awaitExit of a pid that is not the process meant: false, want true at once")
	}
	exited := make(chan bool, 1)
	go func() { exited <- awaitExit(cmd.Process.Pid, func() bool { return true }) }()
	cmd.Process.Kill()
	select {
	case ok := <-exited:
		if !ok {
			t.Fatal("awaitExit: false (no pidfd wait), want true once the process exited")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("awaitExit did not return within 10 s of the process's exit")
	}
}
