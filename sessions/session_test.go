package sessions

import (
	"testing"
	"time"
)

// TestEncodeNeverWaits: an event's viewers share its encoding, and a
// writer that comes while another one is encoding encodes its own copy
// instead of waiting for it (300 writers of one session.changed waited in
// turn on a lock). Once the first is done, every writer gets its bytes.
func TestEncodeNeverWaits(t *testing.T) {
	t.Parallel()
	ev := NewEvent("session.changed", "", 0, Change{SessionID: "s"})
	encoding, release := make(chan struct{}), make(chan struct{})
	first := make(chan []byte, 1)
	go func() {
		first <- ev.Encode(func(Event) []byte { close(encoding); <-release; return []byte("first") })
	}()
	<-encoding
	second := make(chan []byte, 1)
	go func() { second <- ev.Encode(func(Event) []byte { return []byte("second") }) }()
	select {
	case b := <-second:
		if string(b) != "second" {
			t.Fatalf("the second writer got %q while the first was encoding; want its own copy", b)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the second writer waited for the first one's encoding")
	}
	close(release)
	if b := <-first; string(b) != "first" {
		t.Fatalf("the first writer got %q", b)
	}
	if b := ev.Encode(func(Event) []byte { return []byte("third") }); string(b) != "first" {
		t.Fatalf("a writer after the first got %q; want the shared %q", b, "first")
	}
}
