package handlers

import (
	"testing"
	"time"

	"github.com/dashgate/dashgate/sessions"
)

// TestHeldElsewhereAnswers4010: a session another node of the cluster
// still holds answers 4010 with the holder and the lease's time left in
// milliseconds (issue 41), so the dashboard waits and asks again instead
// of taking it for gone (4001).
func TestHeldElsewhereAnswers4010(t *testing.T) {
	e := rpcError(nil, "session.resume", &sessions.HeldElsewhereError{Node: "a", RetryIn: 4500 * time.Millisecond})
	if e.Code != 4010 {
		t.Fatalf("code %d, want 4010", e.Code)
	}
	data, _ := e.Data.(map[string]any)
	if data["node"] != "a" || data["retry_in_ms"] != int64(4500) {
		t.Fatalf("data %v, want node a, retry_in_ms 4500", e.Data)
	}
}
