package sessions

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dashgate/dashgate/workers"
)

// TestTerminalPasteWhole: one WriteWithin's bytes go in whole, even when
// another attachment of the shared terminal types meanwhile (issue 39: a
// keystroke landed at byte 13,824 of a 1 MiB paste). The program, a real
// /bin/sh on a real pty, squeezes each run of a paste's letter into one
// (tr -s ab), so a paste split by a keystroke shows as two letters.
func TestTerminalPasteWhole(t *testing.T) {
	h, _ := realHarnessWith(t, time.Second, nil)
	paster, err := h.r.AttachTerminal(t.Context(), anon, "", TerminalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer paster.Detach(workers.ReasonDetach)
	typist, err := h.r.AttachTerminal(t.Context(), anon, paster.t.s.id, TerminalOptions{Share: true})
	if err != nil {
		t.Fatal(err)
	}
	defer typist.Detach(workers.ReasonDetach)

	var (
		mu   sync.Mutex
		seen bytes.Buffer
	)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for _, a := range []*Attachment{paster, typist} { // both read: neither holds the pty back
		go func() {
			buf := make([]byte, MaxFrame)
			for {
				n, err := a.Next(ctx, buf)
				if err != nil {
					return
				}
				if a == paster {
					mu.Lock()
					seen.Write(buf[:n])
					mu.Unlock()
				}
			}
		}()
	}
	waitFor := func(what string) string {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			s := seen.String()
			mu.Unlock()
			if strings.Contains(s, what) {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the output after 20 s: %q", what, s[max(0, len(s)-200):])
			}
			time.Sleep(5 * time.Millisecond) // polling with a deadline
		}
	}
	// Raw and without echo, so that neither a line's length nor the echo
	// gets in the way; the marker's echo is R_''S, its output R_S.
	if err := paster.WriteWithin(t.Context(), []byte("stty raw -echo; printf R_''S; exec tr -s ab\r"), time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor("R_S")

	// Pastes of 32 KiB (more than the pty takes at once), letters a and b
	// in turn, while the typist types x as fast as it can.
	const pastes = 256
	pasted := make(chan error, 1)
	typed := make(chan struct{}) // the typist typed once at least
	go func() {
		<-typed
		for i := range pastes {
			if err := paster.WriteWithin(t.Context(), bytes.Repeat([]byte{"ab"[i%2]}, 32<<10), 20*time.Second); err != nil {
				pasted <- err
				return
			}
		}
		pasted <- nil
	}()
	keys := 0
	for done := false; !done; {
		if err := typist.WriteWithin(t.Context(), []byte{'x'}, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		if keys++; keys == 1 {
			close(typed)
		}
		select {
		case err := <-pasted:
			if err != nil {
				t.Fatal(err)
			}
			done = true
		default:
		}
	}
	// tr's output is line buffered: a newline brings it out.
	if err := typist.WriteWithin(t.Context(), []byte("E\n"), time.Second); err != nil {
		t.Fatal(err)
	}
	all := waitFor("E\n")
	all = all[strings.Index(all, "R_S")+len("R_S") : strings.Index(all, "E\n")]
	if runs := strings.Count(all, "a") + strings.Count(all, "b"); runs != pastes {
		t.Fatalf("%d pastes came in %d pieces among %d keystrokes of another attachment, want %d: %q (x: keystrokes, squeezed)", pastes, runs, keys, pastes, regexp.MustCompile("x+").ReplaceAllString(all, "x"))
	}
	if got := strings.Count(all, "x"); got != keys {
		t.Fatalf("%d keystrokes came through, want %d", got, keys)
	}
}
