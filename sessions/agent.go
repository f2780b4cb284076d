package sessions

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

// This file is what a session does with an agent worker's events beyond
// deltas (docs/PROTOCOL.md §7, "The agent worker"): approvals of tool runs,
// the runs themselves, the conversation sent with each prompt, and the
// model a session uses.

// Approval is a tool run a worker asked for, waiting for a viewer's
// answer (approval.request; session.resume lists the pending ones).
type Approval struct {
	RequestID string `json:"request_id"`
	TurnID    string `json:"turn_id"`
	Tool      string `json:"tool"`
	Command   string `json:"command"`
}

// Approval choices, and who resolved an approval (approval.resolved's by).
const (
	ChoiceOnce = "once"
	ChoiceDeny = "deny"

	ByViewer    = "viewer"
	ByInterrupt = "interrupt"
	ByDetach    = "detach"
	ByClose     = "close"
	ByTimeout   = "timeout"
)

// Entry kinds of an agent's turn.
const (
	KindApprovalRequest  = "approval_request"
	KindApprovalResolved = "approval_resolved"
	KindToolCall         = "tool_call"
	KindToolResult       = "tool_result"
)

type approval struct {
	Approval
	w        Worker
	workerID string // the request id the worker gave it
	timer    *time.Timer
}

// publicID is the id viewers see of a worker's request or tool run: the
// worker's own, which a new worker reuses, made unique by the turn's.
func publicID(t *turn, workerID string) string {
	if workerID == "" {
		return ""
	}
	return t.id[:8] + "-" + workerID
}

// approvalAnswerTimeout bounds telling a worker the answer to its approval.
const approvalAnswerTimeout = 5 * time.Second

// onEvent handles an event the worker streams for turn t of s. It runs on
// the worker's stdout goroutine: it takes the lock briefly and never
// blocks on I/O.
func (r *Registry) onEvent(s *Session, t *turn, w Worker, ev workers.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.done {
		return // the turn ended (interrupted): the worker's cancel denies what it asks
	}
	defer r.idleLocked(s, t)
	switch ev.Name {
	case "delta":
		t.text += ev.Text
		r.emitLocked(s, "message.delta", map[string]any{"turn_id": t.id, "text": ev.Text})
		if t.seq == 0 {
			// The reply takes its place where it starts: after its prompt,
			// or after the approvals and tool runs that came before its
			// text. Until it completes, the store holds it as interrupted
			// with what streamed so far, so a crash leaves exactly that.
			s.entrySeq++
			t.seq = s.entrySeq
			if !s.terminalOnly {
				r.journal.putEntry(s.id, t.reply(t.text, true, nil))
			}
		}
		if t.ckpt == nil && !s.terminalOnly {
			t.ckpt = time.AfterFunc(checkpointEvery, func() { r.checkpoint(s, t) })
		}
	case "approval":
		if s.grace != nil { // nobody is left to approve: the grace ends here
			if work := r.endGraceLocked(s); work != nil {
				r.goTracked(work)
			}
			return
		}
		var p struct {
			RequestID string `json:"request_id"`
			Tool      string `json:"tool"`
			Command   string `json:"command"`
		}
		if json.Unmarshal(ev.Line, &p) != nil || p.RequestID == "" {
			return
		}
		// A worker numbers its requests itself (a new worker starts again):
		// viewers get an id made unique by the turn's.
		id := publicID(t, p.RequestID)
		if s.approvals[id] != nil {
			return
		}
		a := &approval{Approval: Approval{RequestID: id, TurnID: t.id, Tool: p.Tool, Command: p.Command}, w: w, workerID: p.RequestID}
		a.timer = time.AfterFunc(r.cfg.ApprovalTimeout, func() { r.expireApproval(s, id) })
		if s.approvals == nil {
			s.approvals = map[string]*approval{}
		}
		s.approvals[id] = a
		r.emitLocked(s, "approval.request", a.Approval)
		r.appendLocked(s, Message{Role: store.RoleSystem, Kind: KindApprovalRequest, Text: p.Command, TurnID: t.id,
			Data: mustJSON(map[string]string{"request_id": id, "tool": p.Tool})})
	case "tool_start":
		var p struct {
			ToolID  string `json:"tool_id"`
			Name    string `json:"name"`
			Command string `json:"command"`
		}
		if json.Unmarshal(ev.Line, &p) != nil {
			return
		}
		t.tools++
		tid := publicID(t, p.ToolID)
		r.emitLocked(s, "tool.start", map[string]any{"turn_id": t.id, "tool_id": tid, "name": p.Name, "command": p.Command})
		r.appendLocked(s, Message{Role: store.RoleTool, Kind: KindToolCall, Text: p.Command, TurnID: t.id,
			Data: mustJSON(map[string]string{"tool_id": tid, "name": p.Name})})
	case "tool_complete":
		var p struct {
			ToolID     string `json:"tool_id"`
			ExitCode   int    `json:"exit_code"`
			Output     string `json:"output"`
			Truncated  bool   `json:"truncated"`
			DurationMS int64  `json:"duration_ms"`
		}
		if json.Unmarshal(ev.Line, &p) != nil {
			return
		}
		t.tools = max(t.tools-1, 0)
		tid := publicID(t, p.ToolID)
		r.emitLocked(s, "tool.complete", map[string]any{"turn_id": t.id, "tool_id": tid, "exit_code": p.ExitCode,
			"output": p.Output, "truncated": p.Truncated, "duration_ms": p.DurationMS})
		r.appendLocked(s, Message{Role: store.RoleTool, Kind: KindToolResult, Text: p.Output, TurnID: t.id,
			Data: mustJSON(map[string]any{"tool_id": tid, "exit_code": p.ExitCode, "truncated": p.Truncated, "duration_ms": p.DurationMS})})
	}
}

// idleLocked restarts t's silence timer after an event, or stops it while
// t waits for an approval or a tool runs (the tool has its own timeout).
// r.mu must be held.
func (r *Registry) idleLocked(s *Session, t *turn) {
	if t.done {
		return
	}
	for _, a := range s.approvals {
		if a.TurnID == t.id {
			t.idle.Stop()
			return
		}
	}
	if t.tools > 0 {
		t.idle.Stop()
		return
	}
	t.idle.Reset(r.cfg.WorkerTimeout)
}

// failureData is the data of a failed turn's error event and history
// entry when a worker's call failed: {"failure"} and, when the worker
// named one, "retry_after" (seconds), as error 5004's data has them; nil
// for any other error.
func failureData(err error) json.RawMessage {
	var we *workers.Error
	if !errors.As(err, &we) {
		return nil
	}
	d := map[string]any{"failure": we.Failure}
	if we.RetryAfter > 0 {
		d["retry_after"] = we.RetryAfter
	}
	return mustJSON(d)
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// resolveLocked settles a pending approval once: the viewers get
// approval.resolved and the history an entry. r.mu must be held.
func (r *Registry) resolveLocked(s *Session, a *approval, choice, by string) {
	delete(s.approvals, a.RequestID)
	a.timer.Stop()
	r.emitLocked(s, "approval.resolved", map[string]string{"request_id": a.RequestID, "choice": choice, "by": by})
	r.appendLocked(s, Message{Role: store.RoleSystem, Kind: KindApprovalResolved, Text: choice, TurnID: a.TurnID,
		Data: mustJSON(map[string]string{"request_id": a.RequestID, "choice": choice, "by": by})})
}

// denyApprovalsLocked denies every pending approval of s, by by (the turn
// is ending: its worker is cancelled or closed, so it is not told).
// r.mu must be held.
func (r *Registry) denyApprovalsLocked(s *Session, by string) {
	for _, a := range s.approvals {
		r.resolveLocked(s, a, ChoiceDeny, by)
	}
}

// answer tells the worker the choice for its approval.
func answer(ctx context.Context, a *approval, choice, by string) error {
	ctx, cancel := context.WithTimeout(ctx, approvalAnswerTimeout)
	defer cancel()
	_, err := a.w.Call(ctx, "approval", map[string]string{"request_id": a.workerID, "choice": choice, "by": by}, nil)
	return err
}

// RespondApproval answers a pending approval of sid for viewer v: it
// reports true when this call resolved it, false when another viewer or an
// event did first (or the id is unknown): one answer, one run at most. It
// blocks until the worker was told. Errors: ErrNotFound,
// ErrViewerCapacity.
func (r *Registry) RespondApproval(ctx context.Context, v Viewer, sid, requestID, choice string) (bool, error) {
	s, err := r.use(v, sid)
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	a := s.approvals[requestID]
	if a == nil {
		r.mu.Unlock()
		return false, nil
	}
	r.resolveLocked(s, a, choice, ByViewer)
	if t := s.turn; t != nil && t.id == a.TurnID {
		r.idleLocked(s, t)
	}
	r.mu.Unlock()
	if err := answer(ctx, a, choice, ByViewer); err != nil {
		// The worker is gone or stuck: its turn fails on its own.
		r.log.Warn("approval answer", "sid", sid, "request_id", requestID, "err", err)
	}
	return true, nil
}

// expireApproval denies an approval nobody answered within
// ApprovalTimeout.
func (r *Registry) expireApproval(s *Session, requestID string) {
	r.mu.Lock()
	a := s.approvals[requestID]
	if a == nil {
		r.mu.Unlock()
		return
	}
	r.resolveLocked(s, a, ChoiceDeny, ByTimeout)
	if t := s.turn; t != nil && t.id == a.TurnID {
		r.idleLocked(s, t)
	}
	r.mu.Unlock()
	r.goTracked(func() { answer(context.Background(), a, ChoiceDeny, ByTimeout) })
}

// pendingLocked lists the pending approvals of s. r.mu must be held.
func (s *Session) pendingLocked() []Approval {
	out := []Approval{}
	for _, a := range s.approvals {
		out = append(out, a.Approval)
	}
	return out
}

// modelHistoryLocked is the conversation a prompt of turn t sends its
// worker: prompts, replies and tool entries, oldest first, the oldest
// dropped to fit Config.AgentContext bytes of text. A tool run that was
// denied, or never answered (dashgate stopped first), is there as its
// tool_call and a tool_result saying it did not run and why, so the model
// knows. r.mu must be held.
func (r *Registry) modelHistoryLocked(s *Session, t *turn) []modelEntry {
	var out []modelEntry
	total := 0
	add := func(kind, role, text string) bool {
		if total+len(text) > r.cfg.AgentContext {
			return false
		}
		total += len(text)
		out = append(out, modelEntry{Kind: kind, Role: role, Text: text})
		return true
	}
	denied := map[string]string{} // request_id -> by, of the resolutions seen so far (newer)
	approved := map[string]bool{}
	for i := len(s.history) - 1; i >= 0; i-- {
		e := s.history[i]
		if e.Seq >= t.promptSeq { // this turn's own prompt (and anything after it)
			continue
		}
		switch e.Kind {
		case store.KindPrompt, store.KindReply, KindToolCall, KindToolResult:
			if !add(e.Kind, e.Role, e.Text) {
				return reversed(out)
			}
		case KindApprovalResolved:
			var d struct {
				RequestID string `json:"request_id"`
				Choice    string `json:"choice"`
				By        string `json:"by"`
			}
			if json.Unmarshal(e.Data, &d) == nil {
				if d.Choice == ChoiceDeny {
					denied[d.RequestID] = d.By
				} else {
					approved[d.RequestID] = true // its run has tool entries of its own
				}
			}
		case KindApprovalRequest:
			var d struct {
				RequestID string `json:"request_id"`
			}
			json.Unmarshal(e.Data, &d)
			if approved[d.RequestID] {
				continue
			}
			by, ok := denied[d.RequestID]
			if !ok {
				by = byRestart
			}
			// Newest first, as the loop goes: the result, then the call.
			if !add(KindToolResult, store.RoleTool, notRun(by)) || !add(KindToolCall, store.RoleTool, e.Text) {
				return reversed(out)
			}
		}
	}
	return reversed(out)
}

// byRestart stands for the resolution an approval never got: dashgate
// stopped before it was answered or denied (a crash; a clean stop denies
// it by close).
const byRestart = "restart"

// notRunWhy says, for the model, why a run denied by whom did not run.
var notRunWhy = map[string]string{
	ByViewer:    "the user denied it",
	ByTimeout:   "nobody approved it in time",
	ByInterrupt: "the user interrupted the turn",
	ByDetach:    "the user left before approving it",
	ByClose:     "the session ended before it was approved",
	byRestart:   "dashgate restarted before it was approved",
}

// notRun is the tool result the model gets for a run denied by by.
func notRun(by string) string {
	return "not run: " + cmp.Or(notRunWhy[by], "it was denied")
}

func reversed(out []modelEntry) []modelEntry {
	slices.Reverse(out)
	if out == nil {
		out = []modelEntry{}
	}
	return out
}

// modelEntry is an entry of a prompt's history (a struct, not a map: it is
// encoded on every prompt's path to its first delta).
type modelEntry struct {
	Kind string `json:"kind"`
	Role string `json:"role"`
	Text string `json:"text"`
}

// Configure sets the model of sid's prompts ("" for the worker's
// default); it is kept with the session. v becomes a viewer of it.
// Errors: ErrNotFound, ErrViewerCapacity.
func (r *Registry) Configure(v Viewer, sid, model string) error {
	s, err := r.use(v, sid)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s.model = model
	r.saveLocked(s)
	return nil
}
