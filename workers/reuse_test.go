package workers

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// TestTreeSkipsAnotherChildOnAReusedTerminal: a terminal's pty number is
// free again once its master is closed, and the next terminal may get it.
// The closing terminal's escapee search (claimed: processes holding its
// /dev/pts/N) must not take the new terminal's shell, another child's
// leader, for one of its own and end it.
func TestTreeSkipsAnotherChildOnAReusedTerminal(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, Config{})
	spec := Spec{Kind: KindPTY, SessionID: "s-old", Path: "/bin/sh", Args: []string{"-c", "exec sleep 1000"}}
	old, err := m.Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	oldTTY := old.stdio
	old.PTY().Close() // sessions' Release: the number is free from here
	old.Close(ReasonShutdown)
	// The old terminal is closed; its pty number is free. The next terminal
	// takes the lowest free number: that one, unless another test's
	// terminal took it meanwhile (then try again).
	// The new terminal's shell drops its environment (so only its being
	// another child's leader tells it apart) and leaves a child that
	// keeps it (so only its marker, another live child's, does).
	spec.Args = []string{"-c", "sleep 1000 & echo $! > " + filepath.Join(t.TempDir(), "bg") + "; exec env -i /bin/sleep 1001"}
	var fresh *Proc
	deadline := time.Now().Add(10 * time.Second)
	for {
		spec.SessionID = "s-new"
		fresh, err = m.Start(spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fresh.Close(ReasonShutdown) })
		if sameKeys(fresh.stdio, oldTTY) {
			break
		}
		if time.Now().After(deadline) {
			t.Skipf("the pty number of %v was never handed out again", oldTTY)
		}
		fresh.Close(ReasonShutdown)
	}
	var bg []int
	testkit.WaitFor(t, 10*time.Second, "the new terminal's shell exec'd env -i and its child runs", func() bool {
		bg = slices.DeleteFunc(fresh.claimed(), func(pid int) bool { return pid == fresh.pid })
		return len(bg) == 1 && environValue(fresh.pid, EnvWorkerID) == ""
	})
	got := old.claimed()
	if slices.Contains(got, fresh.pid) {
		t.Fatalf("the closed terminal (%v) claims the new terminal's shell %d, another child's leader, as its own: %v", oldTTY, fresh.pid, got)
	}
	if slices.Contains(got, bg[0]) {
		t.Fatalf("the closed terminal (%v) claims %d, which carries the new terminal's marker, as its own: %v", oldTTY, bg[0], got)
	}
}

func sameKeys(a, b map[string]bool) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
