package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

// This file owns a prompt's turn: its run in the worker, the checkpoints
// of its streamed reply, its end (complete, failed, interrupted), its
// interrupt, and what it does with an agent worker's events beyond deltas
// (docs/PROTOCOL.md §7, "The agent worker"): approvals of tool runs and
// the runs themselves.

// Prompt starts a turn: it records the prompt and returns the turn id and a
// start function that the caller calls once it has sent its reply, so that
// the reply precedes the turn's events. files are the ids of attachments
// it sends (attachments.go): files of the session waiting to be sent, or
// sent by an earlier prompt. Errors: ErrNotFound, ErrBusy,
// ErrLeaseUnproven, *UnknownAttachmentError, *AttachLimitError (nothing
// was recorded), and
// an *accounts.RefusedError when the session has no worker and
// Config.Accounts refuses its owner: then no turn starts, nothing is
// spawned and the history keeps one notice with the reason (not the
// prompt).
func (r *Registry) Prompt(v Viewer, sid, text string, files ...string) (string, func(), error) {
	s, err := r.use(v, sid)
	if err != nil {
		return "", nil, err
	}
	if err := r.checkAccount(s); err != nil {
		return "", nil, err
	}
	if err := r.lease.mayWork(s); err != nil { // ErrLeaseUnproven (lease.go)
		return "", nil, err
	}
	r.mu.Lock()
	if s.turn != nil {
		r.mu.Unlock()
		return "", nil, ErrBusy
	}
	refs, err := s.promptFilesLocked(files, r.cfg.Attach)
	if err != nil {
		r.mu.Unlock()
		return "", nil, err
	}
	// WorkerTimeout bounds the silence of a turn, not its length: every
	// event the worker sends restarts it, and it stands still while the turn
	// waits for a viewer's approval or a tool runs.
	ctx, cancelCause := context.WithCancelCause(context.Background())
	cancel := func() { cancelCause(context.Canceled) }
	now := time.Now()
	t := &turn{r: r, s: s, id: newID(), at: now, cancel: cancel, finished: make(chan struct{}), files: refs}
	t.idle = time.AfterFunc(r.cfg.WorkerTimeout, func() { cancelCause(context.DeadlineExceeded) })
	s.turn = t
	s.turns++
	r.shareLocked(s, v, Message{Role: store.RoleUser, Kind: store.KindPrompt, Text: text, At: now, TurnID: t.id, Attachments: refs})
	t.promptSeq = s.entrySeq
	r.titleFromPromptLocked(s, text, t.promptSeq)
	r.mu.Unlock()
	start := func() { r.goTracked(func() { t.run(ctx, text) }) }
	return t.id, start, nil
}

// titleFromPromptLocked gives s, when nobody chose its title (it is empty
// or a default "session N", and s was not renamed), the title of its
// first prompt, text at seq (promptTitle): stored and announced
// (session.changed) as a rename. A restored or reopened session whose
// entries are not loaded keeps its title. r.mu must be held.
func (r *Registry) titleFromPromptLocked(s *Session, text string, seq uint64) {
	if s.titled || s.unloaded {
		return
	}
	if _, ok := defaultNumber(s.title); !ok && s.title != "" {
		return
	}
	for _, e := range s.history {
		if e.Kind == store.KindPrompt && e.Seq < seq {
			return // not its first prompt
		}
	}
	title := promptTitle(text)
	if title == "" {
		return
	}
	s.title, s.titled = title, true
	s.save()
	r.tell.changedLocked(s)
}

// run asks the session's worker (spawned when needed) for the reply to
// text, with the conversation so far, and ends the turn with its answer or
// its failure. It runs on a tracked goroutine of its own.
func (t *turn) run(ctx context.Context, text string) {
	r, s := t.r, t.s
	defer t.cancel()
	w, err := r.ensureWorker(ctx, s)
	if err != nil {
		t.finish("", true, err)
		return
	}
	r.mu.Lock()
	unloaded := s.unloaded
	r.mu.Unlock()
	if unloaded { // restored: the model gets the earlier conversation too
		if err := r.archive.load(ctx, s); err != nil {
			r.log.Warn("history load", "sid", s.id, "err", err)
		}
	}
	var files []workerFile
	if len(t.files) > 0 {
		if files, err = r.archive.workerFiles(ctx, s.owner, s.id, t.files); err != nil {
			t.finish("", true, err)
			return
		}
	}
	system := r.systemPrompt(ctx, s) // its owner's settings, read outside the lock
	r.mu.Lock()
	params := map[string]any{"text": text, "turn_id": t.id, "model": s.model}
	if system != "" {
		params["system"] = system
	}
	if len(files) > 0 {
		params["attachments"] = files
	}
	if s.agent == "" {
		params["history"] = s.modelHistory(t.promptSeq, r.cfg.AgentContext)
	} else { // an agent of its own keeps its history: the bridge loads it by this id
		params["agent_session_id"] = s.agentSession
	}
	r.mu.Unlock()
	raw, err := w.Call(ctx, "prompt", params, func(ev workers.Event) { t.onEvent(w, ev) })
	if err != nil {
		t.finish("", true, err)
		return
	}
	var res struct {
		Output      string       `json:"output"`
		Interrupted bool         `json:"interrupted"`
		Status      string       `json:"status"`
		Usage       *store.Usage `json:"usage"`
	}
	json.Unmarshal(raw, &res)
	r.mu.Lock()
	t.usage, t.status = res.Usage, res.Status
	r.mu.Unlock()
	t.finish(res.Output, res.Interrupted || res.Status == "interrupted", nil)
}

// checkpoint queues the text t streamed so far as its (interrupted)
// reply. It reads under the session's stream lock alone (1,200
// checkpoints a second of 300 streams on r.mu held up every other call;
// BENCHMARKS.md, issue 28): what it reads is the stream's, or set before
// the turn's first delta (seq, at, id), or changed under the stream lock
// too (the session's journal, see leaseLost). It queues after letting go
// of it: the journal's lock, which every session's checkpoints take, no
// longer holds up the session's deltas (75 % of a loaded gateway's mutex
// waiting was on the two together; BENCHMARKS.md, issue 43).
//
// Its put and the complete reply's are ordered by t.ckptMu: a checkpoint
// decides (t not done) and queues under it, and completeLocked sets done
// before it queues the reply under it. So a partial reply never replaces
// the complete one, whether its timer fired as the turn completed
// (TestLateCheckpointKeepsTheCompleteReply) or it decided just before
// (TestCheckpointRacingCompletion).
func (t *turn) checkpoint() {
	s := t.s
	t.ckptMu.Lock()
	defer t.ckptMu.Unlock()
	s.stream.Lock()
	t.ckptArmed = false
	if t.done || s.journal == nil { // a terminal-only session, or one whose lease was lost, stores nothing
		s.stream.Unlock()
		return
	}
	// A turn not done has no status of the worker's and has not failed
	// yet: its reply is interrupted (replyStatus).
	m := Message{Seq: t.seq, Role: store.RoleAssistant, Kind: store.KindReply, Text: t.text.String(), At: t.at,
		TurnID: t.id, Interrupted: true, Status: "interrupted", Partial: true}
	j, epoch := s.journal, s.epoch
	hook := t.ckptDecided
	s.stream.Unlock()
	if hook != nil {
		hook()
	}
	j.putEntry(s.sid, epoch, m)
}

// StatusStreaming is the status of a reply still being written, as
// session.resume and session.reopen show it (never stored: the store
// keeps it as interrupted until it completes).
const StatusStreaming = "streaming"

// historyLocked is the history of s as a viewer resuming it gets it: the
// entries in memory and, while a turn streams its reply, that reply with
// the text so far at its place, with status StatusStreaming; the turn's
// next message.delta events continue it and its message.complete ends it.
// r.mu must be held.
func (s *Session) historyLocked() []Message {
	h := slices.Clone(s.history)
	t := s.turn
	if t == nil {
		return h
	}
	s.stream.Lock()
	done, text := t.done, t.text.String()
	s.stream.Unlock()
	if done || t.seq == 0 {
		return h
	}
	m := Message{Seq: t.seq, Role: store.RoleAssistant, Kind: store.KindReply, Text: text, At: t.at, TurnID: t.id, Status: StatusStreaming}
	i := len(h)
	for i > 0 && h[i-1].Seq > m.Seq {
		i--
	}
	return slices.Insert(h, i, m)
}

// reply is the history entry of t's answer.
func (t *turn) reply(text string, interrupted bool, usage *store.Usage) Message {
	return Message{Seq: t.seq, Role: store.RoleAssistant, Kind: store.KindReply, Text: text, At: t.at,
		TurnID: t.id, Interrupted: interrupted, Usage: usage, Status: t.replyStatus(interrupted)}
}

// replyStatus is the status of t's reply: the worker's word, else error
// (the turn failed), interrupted or complete.
func (t *turn) replyStatus(interrupted bool) string {
	switch {
	case t.status != "":
		return t.status
	case t.failed:
		return "error"
	case interrupted:
		return "interrupted"
	}
	return "complete"
}

// finish ends t once: history, message.complete and, on failure, an
// error event and entry.
func (t *turn) finish(output string, interrupted bool, err error) {
	r, s := t.r, t.s
	r.mu.Lock()
	defer r.mu.Unlock()
	if !t.done {
		// A worker closed under the turn by an administrator or by
		// dashgate's shutdown did not fail: the turn was cut short, and
		// one notice says by whom (worker.exited's for a reap, see
		// workerGone; shutdownTurnNotice for a shutdown).
		by := closedBy(err)
		if by == "" && r.closing && crashed(err) {
			by = workers.ReasonShutdown // it went with dashgate, before its session was claimed
		}
		if by == workers.ReasonAdminReap || by == workers.ReasonShutdown {
			err, interrupted = nil, true
		}
		t.failed = err != nil && !errors.Is(err, context.Canceled)
		t.refused = t.failed && refused(err)
		t.completeLocked(output, interrupted)
		if by == workers.ReasonShutdown {
			r.noticeLocked(s, shutdownTurnNotice)
		}
		if t.failed && refused(err) {
			// The owner's account was refused when the worker was to start
			// (Prompt checked it, and it changed since): one notice.
			r.emitLocked(s, "notice", map[string]any{"text": err.Error()})
			r.appendLocked(s, Message{Role: store.RoleSystem, Kind: store.KindNotice, Text: err.Error()})
		} else if t.failed {
			code, msg := r.cfg.DescribeError(err)
			payload := map[string]any{"message": msg, "code": code}
			data := failureData(err)
			if data != nil {
				payload["data"] = data
			}
			r.emitLocked(s, "error", payload)
			r.appendLocked(s, Message{Role: store.RoleSystem, Kind: store.KindError, Text: msg, Code: code, TurnID: t.id, Data: data})
		}
	}
}

// completeLocked ends t: its reply is added and told (message.complete),
// what it still waited for is denied, and a detached session's grace ends.
// r.mu must be held.
func (t *turn) completeLocked(output string, interrupted bool) {
	r, s := t.r, t.s
	s.stream.Lock()
	t.done = true // no delta is relayed after this (onDelta)
	t.idle.Stop()
	if t.ckpt != nil {
		t.ckpt.Stop() // one that fired already finds t done (checkpoint)
		t.ckptArmed = false
	}
	text := t.text.String()
	s.stream.Unlock()
	close(t.finished)
	if s.turn == t {
		s.turn = nil
	}
	t.denyLocked(ByInterrupt) // none is left when the turn ended by itself
	if output == "" {
		output = text
	}
	reply := t.reply(output, interrupted, t.usage)
	if !t.failed || t.refused || output != "" || t.seq != 0 {
		// A turn that failed before any text is its error entry alone:
		// no empty reply beside it (nothing of one was stored either).
		// After any checkpoint's put (checkpoint): t is done, so none
		// comes after.
		t.ckptMu.Lock()
		r.appendLocked(s, reply)
		t.ckptMu.Unlock()
	}
	payload := map[string]any{"turn_id": t.id, "text": output, "interrupted": interrupted, "status": reply.Status}
	if t.usage != nil {
		payload["usage"] = t.usage
	}
	r.emitLocked(s, "message.complete", payload)
	if s.grace != nil { // the turn finished within its grace: the worker goes now
		if work := r.endGraceLocked(s); work != nil {
			r.goTracked(work)
		}
	}
}

// interruptTurnLocked ends the running turn as interrupted and cancels its
// call. r.mu must be held.
func (r *Registry) interruptTurnLocked(s *Session) {
	t := s.turn
	if t == nil || t.done {
		return
	}
	t.cancel()
	t.completeLocked("", true)
}

// Interrupt stops the running turn of sid: the worker is asked to cancel and
// is recycled when it does not answer within InterruptGrace. It returns
// "interrupted", or "idle" when no turn ran. It blocks until the turn ended
// or InterruptGrace plus a second passed.
func (r *Registry) Interrupt(v Viewer, sid string) (string, error) {
	s, err := r.use(v, sid)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	t := s.turn
	r.denyApprovalsLocked(s, ByInterrupt)
	// Running slash commands are cancelled too (the worker is asked to
	// stop them, as a prompt).
	stopped := len(s.execStops)
	for c := range s.execStops {
		(*c)()
	}
	r.mu.Unlock()
	if t == nil {
		if stopped > 0 {
			return "interrupted", nil
		}
		return "idle", nil
	}
	t.cancel()
	select {
	case <-t.finished:
	case <-time.After(r.cfg.InterruptGrace + time.Second):
		r.mu.Lock()
		if !t.done {
			t.completeLocked("", true)
		}
		r.mu.Unlock()
	}
	return "interrupted", nil
}

// Approval is a tool run a worker asked for, waiting for a viewer's
// answer (approval.request; session.resume lists the pending ones).
type Approval struct {
	RequestID string `json:"request_id"`
	TurnID    string `json:"turn_id"`
	Tool      string `json:"tool"`
	Command   string `json:"command"`
	// Options are an ACP agent's choices as its worker gave them
	// ([{"option_id","name","kind"}], kind allow_once, allow_always,
	// reject_once or reject_always); none for other workers.
	Options json.RawMessage `json:"options,omitempty"`
}

// Approval choices, and who resolved an approval (approval.resolved's by).
const (
	ChoiceOnce = "once"
	ChoiceDeny = "deny"
	// ChoiceAlways and ChoiceDenyAlways answer an agent's permission
	// request with its allow_always or reject_always option (ACP); a
	// worker without them takes them as once and deny.
	ChoiceAlways     = "always"
	ChoiceDenyAlways = "deny_always"

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
	plain    bool // its worker knows once and deny only (the built-in one, --worker-cmd's)
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

// onEvent handles an event the worker w streams for t. It runs on the
// worker's stdout goroutine: it takes the lock briefly and never blocks on
// I/O. A delta after the reply's first takes only the session's stream
// lock (onDelta).
func (t *turn) onEvent(w Worker, ev workers.Event) {
	var delta []byte // a delta's text, valid until onEvent returns (workers.Event)
	if ev.Name == "delta" {
		delta = ev.Delta
		if delta == nil { // an Event not made by a workers.Worker (a test's)
			delta = []byte(ev.Text)
		}
		if t.onDelta(delta) {
			return
		}
	}
	r, s := t.r, t.s
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.done {
		return // the turn ended (interrupted): the worker's cancel denies what it asks
	}
	defer t.idleLocked()
	switch ev.Name {
	case "delta": // the reply's first (onDelta relays the others)
		s.stream.Lock()
		t.appendStreamLocked(delta)
		var first Message
		if t.seq == 0 {
			// The reply takes its place where it starts: after its prompt,
			// or after the approvals and tool runs that came before its
			// text. Until it completes, the store holds it as interrupted
			// with what streamed so far, so a crash leaves exactly that.
			t.seq = s.nextSeq()
			first = t.reply(t.text.String(), true, nil)
		}
		s.stream.Unlock()
		if first.Seq != 0 {
			s.putEntry(first) // a terminal-only session stores nothing
		}
	case "approval":
		// Within a detached session's grace the request waits as any
		// does: a viewer back in time answers it; the grace's end denies it.
		var p struct {
			RequestID string          `json:"request_id"`
			Tool      string          `json:"tool"`
			Command   string          `json:"command"`
			Options   json.RawMessage `json:"options"`
		}
		if json.Unmarshal(ev.Line, &p) != nil || p.RequestID == "" {
			return
		}
		// A worker numbers its requests itself (a new worker starts again):
		// viewers get an id made unique by the turn's.
		id := publicID(t, p.RequestID)
		if t.approvals[id] != nil {
			return
		}
		a := &approval{Approval: Approval{RequestID: id, TurnID: t.id, Tool: p.Tool, Command: p.Command, Options: p.Options},
			w: w, workerID: p.RequestID, plain: s.agent == ""}
		a.timer = time.AfterFunc(r.cfg.ApprovalTimeout, func() { t.expireApproval(id) })
		if t.approvals == nil {
			t.approvals = map[string]*approval{}
		}
		t.approvals[id] = a
		r.emitLocked(s, "approval.request", a.Approval)
		data := map[string]any{"request_id": id, "tool": p.Tool}
		if len(p.Options) > 0 && string(p.Options) != "null" {
			data["options"] = p.Options // an ACP agent's own choices, for the card after a reload
		}
		r.appendLocked(s, Message{Role: store.RoleSystem, Kind: KindApprovalRequest, Text: p.Command, TurnID: t.id,
			Data: mustJSON(data)})
	case "tool_start":
		var p struct {
			ToolID  string `json:"tool_id"`
			Name    string `json:"name"`
			Command string `json:"command"`
			acpTool
		}
		if json.Unmarshal(ev.Line, &p) != nil {
			return
		}
		t.tools++
		tid := publicID(t, p.ToolID)
		payload := map[string]any{"turn_id": t.id, "tool_id": tid, "name": p.Name, "command": p.Command}
		p.acpTool.addTo(payload)
		r.emitLocked(s, "tool.start", payload)
		data := map[string]any{"tool_id": tid, "name": p.Name}
		p.acpTool.addTo(data) // an ACP agent's kind, files and content (a diff), for the card after a reload
		r.appendLocked(s, Message{Role: store.RoleTool, Kind: KindToolCall, Text: p.Command, TurnID: t.id,
			Data: mustJSON(data)})
	case "tool_update":
		var p struct {
			ToolID string `json:"tool_id"`
			Title  string `json:"title"`
			acpTool
		}
		if json.Unmarshal(ev.Line, &p) != nil {
			return
		}
		payload := map[string]any{"turn_id": t.id, "tool_id": publicID(t, p.ToolID)}
		if p.Title != "" {
			payload["title"] = p.Title
		}
		p.acpTool.addTo(payload)
		r.emitLocked(s, "tool.update", payload)
	case "thought":
		r.emitLocked(s, "message.thought", map[string]any{"turn_id": t.id, "text": ev.Text})
	case "notice":
		// The worker's word for the chat, kept in the history: a file it
		// could not take ("this agent cannot read PDFs: a.pdf not sent").
		if ev.Text != "" {
			r.noticeLocked(s, ev.Text)
		}
	case "plan":
		var p struct {
			Entries json.RawMessage `json:"entries"`
		}
		if json.Unmarshal(ev.Line, &p) != nil || len(p.Entries) == 0 {
			return
		}
		s.plan = p.Entries
		r.emitLocked(s, "plan.update", map[string]any{"turn_id": t.id, "entries": p.Entries})
	case "commands":
		t.agentCommandsLocked(ev.Line)
	case "agent_session":
		t.agentSessionLocked(ev.Line)
	case "tool_complete":
		var p struct {
			ToolID     string `json:"tool_id"`
			ExitCode   int    `json:"exit_code"`
			Output     string `json:"output"`
			Truncated  bool   `json:"truncated"`
			DurationMS int64  `json:"duration_ms"`
			Status     string `json:"status"` // an ACP agent's: completed or failed
		}
		if json.Unmarshal(ev.Line, &p) != nil {
			return
		}
		t.tools = max(t.tools-1, 0)
		tid := publicID(t, p.ToolID)
		payload := map[string]any{"turn_id": t.id, "tool_id": tid, "exit_code": p.ExitCode,
			"output": p.Output, "truncated": p.Truncated, "duration_ms": p.DurationMS}
		data := map[string]any{"tool_id": tid, "exit_code": p.ExitCode, "truncated": p.Truncated, "duration_ms": p.DurationMS}
		if p.Status != "" {
			payload["status"], data["status"] = p.Status, p.Status
		}
		r.emitLocked(s, "tool.complete", payload)
		r.appendLocked(s, Message{Role: store.RoleTool, Kind: KindToolResult, Text: p.Output, TurnID: t.id, Data: mustJSON(data)})
	}
}

// onDelta relays a delta of t's reply holding only t.s.stream, and
// reports whether it did: the reply's first delta, which takes an entry
// seq under r.mu, is onEvent's. A delta of a turn that ended is dropped.
func (t *turn) onDelta(text []byte) bool {
	s := t.s
	s.stream.Lock()
	defer s.stream.Unlock()
	if t.done {
		return true // the turn ended (interrupted)
	}
	if t.seq == 0 {
		return false
	}
	t.appendStreamLocked(text)
	if !t.paused {
		t.idle.Reset(t.r.cfg.WorkerTimeout)
	}
	return true
}

// appendStreamLocked adds a delta to t's reply: its text, the
// message.delta event, and the checkpoint that stores it (armed when
// none is pending). text is copied once, into t.text: the event's text
// is that copy's (a Builder never changes the bytes it wrote, so its
// String's tail stays the delta's text). t.s.stream must be held.
func (t *turn) appendStreamLocked(text []byte) {
	s := t.s
	t.text.Write(text)
	all := t.text.String()
	s.emitDeltaStreamLocked(t.id, all[len(all)-len(text):])
	if !t.ckptArmed && !s.terminalOnly {
		// One timer a turn, armed again after each checkpoint: a
		// time.AfterFunc each time was two allocations (issue 43).
		if t.ckpt == nil {
			t.ckpt = time.AfterFunc(checkpointEvery, t.checkpoint)
		} else {
			t.ckpt.Reset(checkpointEvery)
		}
		t.ckptArmed = true
	}
}

// idleLocked restarts t's silence timer after an event, or stops it while
// t waits for an approval or a tool runs (the tool has its own timeout;
// paused tells onDelta so). r.mu must be held, and t.s.stream not.
func (t *turn) idleLocked() {
	t.s.stream.Lock()
	defer t.s.stream.Unlock()
	if t.done {
		return
	}
	t.paused = len(t.approvals) > 0 || t.tools > 0
	if t.paused {
		t.idle.Stop()
		return
	}
	t.idle.Reset(t.r.cfg.WorkerTimeout)
}

// shutdownTurnNotice is what a session's history says when dashgate
// stopped while a reply was being written (the session suspended, or the
// worker went with dashgate): not a failure of the worker.
const shutdownTurnNotice = "dashgate stopped before the reply was finished"

// closedBy is the reason the worker of a failed call was closed with, when
// err says the call failed because the worker was closed (workers.Worker
// fails its calls with "worker closed (<reason>)"), else "".
func closedBy(err error) workers.Reason {
	var we *workers.Error
	if !errors.As(err, &we) || we.Failure != workers.FailCrashed {
		return ""
	}
	rest, ok := strings.CutPrefix(we.Message, "worker closed (")
	if !ok || !strings.HasSuffix(rest, ")") {
		return ""
	}
	return workers.Reason(strings.TrimSuffix(rest, ")"))
}

// crashed reports whether err says the worker went away under the call.
func crashed(err error) bool {
	var we *workers.Error
	return errors.As(err, &we) && we.Failure == workers.FailCrashed
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

// resolveLocked settles a pending approval of t once: the viewers get
// approval.resolved and the history an entry. r.mu must be held.
func (t *turn) resolveLocked(a *approval, choice, by string) {
	r, s := t.r, t.s
	delete(t.approvals, a.RequestID)
	a.timer.Stop()
	r.emitLocked(s, "approval.resolved", map[string]string{"request_id": a.RequestID, "choice": choice, "by": by})
	r.appendLocked(s, Message{Role: store.RoleSystem, Kind: KindApprovalResolved, Text: choice, TurnID: a.TurnID,
		Data: mustJSON(map[string]string{"request_id": a.RequestID, "choice": choice, "by": by})})
}

// denyApprovalsLocked denies every pending approval of s (its running
// turn's), by by. r.mu must be held.
func (r *Registry) denyApprovalsLocked(s *Session, by string) {
	if t := s.turn; t != nil {
		t.denyLocked(by)
	}
}

// denyLocked denies every pending approval of t, by by (the turn is
// ending: its worker is cancelled or closed, so it is not told). r.mu must
// be held.
func (t *turn) denyLocked(by string) {
	for _, a := range t.approvals {
		t.resolveLocked(a, ChoiceDeny, by)
	}
}

// answer tells the worker the choice for its approval.
func answer(ctx context.Context, a *approval, choice, by string) error {
	ctx, cancel := context.WithTimeout(ctx, approvalAnswerTimeout)
	defer cancel()
	if a.plain {
		switch choice {
		case ChoiceAlways:
			choice = ChoiceOnce
		case ChoiceDenyAlways:
			choice = ChoiceDeny
		}
	}
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
	t := s.turn
	var a *approval
	if t != nil {
		a = t.approvals[requestID]
	}
	if a == nil {
		r.mu.Unlock()
		return false, nil
	}
	t.resolveLocked(a, choice, ByViewer)
	t.idleLocked()
	r.mu.Unlock()
	if err := answer(ctx, a, choice, ByViewer); err != nil {
		// The worker is gone or stuck: its turn fails on its own.
		r.log.Warn("approval answer", "sid", sid, "request_id", requestID, "err", err)
	}
	return true, nil
}

// expireApproval denies an approval of t nobody answered within
// ApprovalTimeout.
func (t *turn) expireApproval(requestID string) {
	r := t.r
	r.mu.Lock()
	a := t.approvals[requestID]
	if a == nil {
		r.mu.Unlock()
		return
	}
	t.resolveLocked(a, ChoiceDeny, ByTimeout)
	t.idleLocked()
	r.mu.Unlock()
	r.goTracked(func() { answer(context.Background(), a, ChoiceDeny, ByTimeout) })
}

// pendingLocked lists the pending approvals of s. r.mu must be held.
func (s *Session) pendingLocked() []Approval {
	out := []Approval{}
	if s.turn == nil {
		return out
	}
	for _, a := range s.turn.approvals {
		out = append(out, a.Approval)
	}
	return out
}

// turn is a prompt being answered: its run in the worker, its streamed
// reply and checkpoints, the approvals it waits for, its end. Its fields
// are guarded by the registry's mutex, as its session's; text, ckpt and
// paused by its session's stream lock instead, and done and seq are
// changed under both (so either lock reads them).
type turn struct {
	r         *Registry
	s         *Session             // the session it answers in; s.turn is t while it runs
	approvals map[string]*approval // pending, by public request id
	id        string
	seq       uint64 // the entry seq of its reply, given at its first delta (0: none yet)
	promptSeq uint64 // the entry seq of its prompt
	at        time.Time
	text      strings.Builder // streamed so far: a Builder, so a long reply's deltas cost their own length, not the reply's (String shares its bytes)
	cancel    func()
	done      bool
	paused    bool          // waits for an approval or a tool run: deltas leave the idle timer stopped (idleLocked)
	finished  chan struct{} // closed when done is set
	ckpt      *time.Timer   // the checkpoint of the streamed text (nil until the reply's first delta), reused
	ckptArmed bool          // ckpt is pending
	// ckptMu orders a checkpoint's put before the complete reply's (see
	// checkpoint). Lock order: r.mu, ckptMu, s.stream.
	ckptMu sync.Mutex
	// ckptDecided, set by tests, runs between a checkpoint's decision and
	// its put.
	ckptDecided func()
	idle        *time.Timer           // ends the turn after WorkerTimeout of silence (see Prompt)
	tools       int                   // tool runs started and not complete
	usage       *store.Usage          // reported by the worker with its reply
	status      string                // the worker's status of its reply ("": derived)
	files       []store.AttachmentRef // the attachments its prompt sends
	failed      bool                  // the turn ended with an error
	refused     bool                  // ... the refusal of its owner's account (a notice, not an error entry)
}

// acpTool is what an ACP agent's worker adds to tool_start and
// tool_update (docs/PROTOCOL.md, issue 40): the tool's kind (read, edit,
// execute, …), its status (pending, in_progress, completed, failed), the
// files it touches ([{"path","line"}]) and its content ([{"type":"text",
// "text"} | {"type":"diff","path","old_text","new_text"} |
// {"type":"terminal","terminal_id"}]), passed to the viewers as they
// came.
type acpTool struct {
	Kind      string          `json:"kind"`
	Status    string          `json:"status"`
	Locations json.RawMessage `json:"locations"`
	Content   json.RawMessage `json:"content"`
}

// addTo puts the fields a worker gave into an event's payload.
func (a acpTool) addTo(payload map[string]any) {
	if a.Kind != "" {
		payload["kind"] = a.Kind
	}
	if a.Status != "" {
		payload["status"] = a.Status
	}
	if len(a.Locations) > 0 && string(a.Locations) != "null" {
		payload["locations"] = a.Locations
	}
	if len(a.Content) > 0 && string(a.Content) != "null" {
		payload["content"] = a.Content
	}
}

// agentCommandsLocked keeps the slash commands an ACP agent offers (the
// worker's commands event: {"commands":[{"name","description","hint"}]})
// and tells the viewers (commands.update); session.resume gives them
// again. r.mu must be held.
func (t *turn) agentCommandsLocked(line []byte) {
	r, s := t.r, t.s
	var p struct {
		Commands json.RawMessage `json:"commands"`
	}
	if json.Unmarshal(line, &p) != nil || len(p.Commands) == 0 || p.Commands[0] != '[' {
		return
	}
	s.commands = p.Commands
	r.emitLocked(s, "commands.update", map[string]any{"commands": p.Commands})
}

// agentSessionLocked keeps the id an ACP agent gave its conversation
// (the worker's agent_session event: {"agent_session_id","loaded",
// "notice"?}), stored with the session so that the next agent process
// loads it (session/load); a notice (the agent could not load the
// earlier conversation) is told once and kept in the history. r.mu must
// be held.
func (t *turn) agentSessionLocked(line []byte) {
	r, s := t.r, t.s
	var p struct {
		ID     string `json:"agent_session_id"`
		Notice string `json:"notice"`
	}
	if json.Unmarshal(line, &p) != nil {
		return
	}
	if p.ID != "" && p.ID != s.agentSession {
		s.agentSession = p.ID
		s.save()
	}
	if p.Notice != "" {
		r.noticeLocked(s, p.Notice)
	}
}
