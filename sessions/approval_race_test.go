package sessions

import (
	"fmt"
	"sync"
	"testing"
)

// TestApprovalAnsweredAtOnceByTwo: two viewers of one session answer the
// same approval at the same instant, round after round. Each time exactly
// one answer resolves it (one RespondApproval reports true, each viewer
// hears one approval.resolved), the worker is told once, and so its tool
// starts once: finding the approval and resolving it are one decision.
func TestApprovalAnsweredAtOnceByTwo(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	v1, v2 := &recViewer{}, &recViewer{}
	in, _ := h.r.Create(v1, NewSession{Title: ""})
	if _, err := h.r.Resume(v2, in.ID); err != nil {
		t.Fatal(err)
	}
	agentTurn(t, h, v1, in.ID)
	const rounds = 200
	for i := range rounds {
		rid := askApproval(h, fmt.Sprintf("r%d", i))
		w := h.sp.workers()[0] // it asked: it runs
		told := len(w.answered())
		go1 := make(chan struct{}) // the barrier: both answers leave at once
		var wg sync.WaitGroup
		var won [2]bool
		var errs [2]error
		for j, v := range []*recViewer{v1, v2} {
			wg.Go(func() {
				<-go1
				won[j], errs[j] = h.r.RespondApproval(t.Context(), v, in.ID, rid, ChoiceOnce)
			})
		}
		close(go1)
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("round %d: answers failed: %v, %v", i, errs[0], errs[1])
		}
		// The worker runs the tool once per "once" it is told, as the
		// agent worker does.
		answers := w.answered()[told:]
		for _, a := range answers {
			tid := fmt.Sprintf("t%d-%d", i, len(v1.ofType("tool.start")))
			send(h, event("tool_start", map[string]any{"tool_id": tid, "name": "shell", "command": "touch " + a["request_id"]}))
			send(h, event("tool_complete", map[string]any{"tool_id": tid, "exit_code": 0, "output": "", "duration_ms": 1}))
		}
		if len(answers) != 1 {
			t.Errorf("round %d: the worker was told %d times: %v", i, len(answers), answers)
		}
		for _, v := range []*recViewer{v1, v2} {
			if n := len(v.ofType("tool.start")); n != i+1 {
				t.Errorf("round %d: %d tool.start so far, want %d", i, n, i+1)
			}
			if got := resolved(v); len(got) != i+1 || got[i] != rid+":once:viewer" {
				t.Errorf("round %d: approval.resolved so far: %v", i, got)
			}
		}
		if won[0] == won[1] {
			t.Errorf("round %d: RespondApproval reported %v and %v, want exactly one true", i, won[0], won[1])
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	close(h.sp.events)
	h.r.Wait()
}
