package handlers

import (
	"context"
	"encoding/json"
	"time"

	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/store"
)

// chatMethod runs one method of the chat socket c (PROTOCOL.md §2 and §7):
// it decodes and checks its own params, then returns its result and what
// runs once the answer is sent (nil: nothing), or an error: an *RPCError
// for bad input, else the registry's, which rpcError maps.
type chatMethod func(c *chatConn, ctx context.Context, params json.RawMessage) (result any, after func(), err error)

// chatMethods routes a request to its method by name; a name not in it
// answers -32601 (chatConn.call). It holds exactly the methods
// docs/PROTOCOL.md documents (TestChatMethodsDocumented).
var chatMethods = map[string]chatMethod{
	"agent.list":        (*chatConn).agentList,
	"approval.respond":  (*chatConn).approvalRespond,
	"model.list":        (*chatConn).modelList,
	"prompt.submit":     (*chatConn).promptSubmit,
	"session.close":     (*chatConn).sessionClose,
	"session.configure": (*chatConn).sessionConfigure,
	"session.create":    (*chatConn).sessionCreate,
	"session.delete":    (*chatConn).sessionDelete,
	"session.detach":    (*chatConn).sessionDetach,
	"session.history":   (*chatConn).sessionHistory,
	"session.interrupt": (*chatConn).sessionInterrupt,
	"session.list":      (*chatConn).sessionList,
	"session.reopen":    (*chatConn).sessionReopen,
	"session.rename":    (*chatConn).sessionRename,
	"session.resume":    (*chatConn).sessionResume,
	"session.search":    (*chatConn).sessionSearch,
	"settings.get":      (*chatConn).settingsGet,
	"settings.set":      (*chatConn).settingsSet,
	"slash.exec":        (*chatConn).slashExec,
	"terminal.close":    (*chatConn).terminalClose,
}

// methodParams is a method's parameter type: check refuses, in order, what
// decoding let through, and fills in the defaults it resolves.
type methodParams interface{ check() *RPCError }

// readParams decodes raw into p (decodeParams), then checks it.
func readParams(raw json.RawMessage, p methodParams) error {
	if e := decodeParams(raw, p); e != nil {
		return e
	}
	if e := p.check(); e != nil {
		return e
	}
	return nil
}

// sessionParams are the params of the methods that take a session id only.
type sessionParams struct {
	SessionID string `json:"session_id"`
}

func (p *sessionParams) check() *RPCError { return requireSession(p.SessionID) }

type createParams struct {
	Title             string `json:"title"`
	CloseOnDisconnect bool   `json:"close_on_disconnect"`
	Agent             string `json:"agent"` // a name agent.list gives; "": the default one
}

func (p *createParams) check() *RPCError { return checkTitle(p.Title) }

// sessionCreate makes a session owned by the socket's principal and
// attaches it to the socket: {"session_id","created_at","model","agent"?}.
// What it does not name takes the principal's defaults (userDefaults).
func (c *chatConn) sessionCreate(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p createParams
	if err := readParams(raw, &p); err != nil {
		return nil, nil, err
	}
	o := sessions.NewSession{Title: p.Title, CloseOnDisconnect: p.CloseOnDisconnect, Agent: p.Agent}
	o.Agent, o.Model = c.userDefaults(ctx, o.Agent) // settings.go
	in, err := c.h.Registry.Create(c, o)
	if err != nil {
		return nil, nil, err
	}
	out := map[string]any{"session_id": in.ID, "created_at": in.CreatedAt.UTC().Format(time.RFC3339Nano), "model": in.Model}
	if in.Agent != "" { // an ACP agent's session, as session.resume says it
		out["agent"] = in.Agent
	}
	return out, nil, nil
}

// sessionResume attaches a live session to the socket and answers its
// state and last history (resumeResult).
func (c *chatConn) sessionResume(_ context.Context, raw json.RawMessage) (any, func(), error) {
	var p sessionParams
	if err := readParams(raw, &p); err != nil {
		return nil, nil, err
	}
	res, err := c.h.Registry.Resume(c, p.SessionID)
	if err != nil {
		return nil, nil, err
	}
	return resumeResult(res), nil, nil
}

// sessionReopen makes a closed session live again, attached to the socket
// (a live one is resumed), and answers as session.resume.
func (c *chatConn) sessionReopen(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p sessionParams
	if err := readParams(raw, &p); err != nil {
		return nil, nil, err
	}
	res, err := c.h.Registry.Reopen(ctx, c, p.SessionID)
	if err != nil {
		return nil, nil, err
	}
	return resumeResult(res), nil, nil
}

// sessionDelete closes a live session, then deletes it and its history:
// {"deleted":true}.
func (c *chatConn) sessionDelete(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p sessionParams
	if err := readParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if err := c.h.Registry.Delete(ctx, c.who, p.SessionID); err != nil {
		return nil, nil, err
	}
	return map[string]any{"deleted": true}, nil, nil
}

type renameParams struct {
	SessionID string `json:"session_id"`
	Title     string `json:"title"`
}

func (p *renameParams) check() *RPCError {
	if e := requireSession(p.SessionID); e != nil {
		return e
	}
	return checkTitle(p.Title)
}

// sessionRename sets the title of a live or closed session:
// {"renamed":true,"title"}.
func (c *chatConn) sessionRename(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p renameParams
	if err := readParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if err := c.h.Registry.Rename(ctx, c.who, p.SessionID, p.Title); err != nil {
		return nil, nil, err
	}
	return map[string]any{"renamed": true, "title": p.Title}, nil, nil
}

type historyParams struct {
	SessionID string `json:"session_id"`
	BeforeSeq uint64 `json:"before_seq"`
	Limit     *int   `json:"limit"`
	limit     int    // Limit checked, or its default
}

func (p *historyParams) check() *RPCError {
	if e := requireSession(p.SessionID); e != nil {
		return e
	}
	var e *RPCError
	p.limit, e = checkLimit(p.Limit, 200, MaxHistoryPage)
	return e
}

// sessionHistory pages a live or closed session's entries older than
// before_seq: {"entries","more"}.
func (c *chatConn) sessionHistory(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p historyParams
	if err := readParams(raw, &p); err != nil {
		return nil, nil, err
	}
	entries, more, err := c.h.Registry.History(ctx, c.who, p.SessionID, p.BeforeSeq, p.limit)
	if err != nil {
		return nil, nil, err
	}
	if entries == nil {
		entries = []sessions.Message{}
	}
	return map[string]any{"entries": entries, "more": more}, nil, nil
}

type approvalParams struct {
	SessionID string `json:"session_id"`
	RequestID string `json:"request_id"`
	Choice    string `json:"choice"`
}

func (p *approvalParams) check() *RPCError {
	if e := requireSession(p.SessionID); e != nil {
		return e
	}
	if p.RequestID == "" {
		return invalidParams("invalid params: request_id is required")
	}
	switch p.Choice {
	case sessions.ChoiceOnce, sessions.ChoiceDeny, sessions.ChoiceAlways, sessions.ChoiceDenyAlways:
	default:
		return invalidParams(`invalid params: choice must be "once", "always", "deny" or "deny_always"`)
	}
	return nil
}

// approvalRespond answers a tool's pending approval: {"resolved"}, false
// when another viewer or an event resolved it first.
func (c *chatConn) approvalRespond(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p approvalParams
	if err := readParams(raw, &p); err != nil {
		return nil, nil, err
	}
	resolved, err := c.h.Registry.RespondApproval(ctx, c, p.SessionID, p.RequestID, p.Choice)
	if err != nil {
		return nil, nil, err
	}
	return map[string]any{"resolved": resolved}, nil, nil
}

type configureParams struct {
	SessionID string `json:"session_id"`
	Model     string `json:"model"`
}

func (p *configureParams) check() *RPCError {
	if e := requireSession(p.SessionID); e != nil {
		return e
	}
	if len(p.Model) > MaxModel {
		return invalidParams("invalid params: model is over 200 bytes")
	}
	return nil
}

// sessionConfigure sets the model of a session's next prompts (the socket
// becomes a viewer): {"model"}.
func (c *chatConn) sessionConfigure(_ context.Context, raw json.RawMessage) (any, func(), error) {
	var p configureParams
	if err := readParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if err := c.h.Registry.Configure(c, p.SessionID, p.Model); err != nil {
		return nil, nil, err
	}
	return map[string]any{"model": p.Model}, nil, nil
}

// agentList lists the agents a session may talk to: {"agents":
// [{"name","kind","default"}]}, the built-in worker first. It reads no
// params.
func (c *chatConn) agentList(context.Context, json.RawMessage) (any, func(), error) {
	return map[string]any{"agents": c.h.agents()}, nil, nil
}

// modelList lists the model server's models (Chat.Models): {"models",
// "default"}, none without one. It reads no params.
func (c *chatConn) modelList(ctx context.Context, _ json.RawMessage) (any, func(), error) {
	models, def := []string{}, ""
	if c.h.Models != nil {
		m, d, err := c.h.Models(ctx)
		if err != nil {
			return nil, nil, err
		}
		models, def = append(models, m...), d
	}
	return map[string]any{"models": models, "default": def}, nil, nil
}

type searchParams struct {
	Query string `json:"query"`
	Limit *int   `json:"limit"`
	limit int    // Limit checked, or its default
}

func (p *searchParams) check() *RPCError {
	if len(p.Query) > MaxQuery {
		return invalidParams("invalid params: query is over 1 KiB")
	}
	var e *RPCError
	p.limit, e = checkLimit(p.Limit, 20, MaxSearchHits)
	return e
}

// sessionSearch finds the entries of the principal's live and closed
// sessions that hold every word of the query: {"hits"}.
func (c *chatConn) sessionSearch(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p searchParams
	if err := readParams(raw, &p); err != nil {
		return nil, nil, err
	}
	hits, err := c.h.Registry.Search(ctx, c.who, p.Query, p.limit)
	if err != nil {
		return nil, nil, err
	}
	if hits == nil {
		hits = []store.Hit{}
	}
	return map[string]any{"hits": hits}, nil, nil
}

// terminalParams are terminal.close's.
type terminalParams struct {
	SessionID string `json:"session_id"`
	Terminal  string `json:"terminal"` // "" the session's first (sessions.DefaultTerminal)
}

func (p *terminalParams) check() *RPCError {
	if e := requireSession(p.SessionID); e != nil {
		return e
	}
	if _, err := sessions.TerminalID(p.Terminal); err != nil {
		return invalidParams("invalid params: " + err.Error())
	}
	return nil
}

// terminalClose ends one of a session's terminals (issue 42; the session
// and its other terminals stay), answering once its program is reaped:
// {"closed"}, false when the session runs no such terminal.
func (c *chatConn) terminalClose(_ context.Context, raw json.RawMessage) (any, func(), error) {
	var p terminalParams
	if err := readParams(raw, &p); err != nil {
		return nil, nil, err
	}
	closed, err := c.h.Registry.CloseTerminal(c.who, p.SessionID, p.Terminal)
	if err != nil {
		return nil, nil, err
	}
	return map[string]any{"closed": closed}, nil, nil
}

// sessionClose closes a session for every viewer (end_reason
// client_close): {"closed"}, false when it had closed already.
func (c *chatConn) sessionClose(_ context.Context, raw json.RawMessage) (any, func(), error) {
	var p sessionParams
	if err := readParams(raw, &p); err != nil {
		return nil, nil, err
	}
	closed, err := c.h.Registry.Close(c.who, p.SessionID, sessions.EndClientClose)
	if err != nil {
		return nil, nil, err
	}
	return map[string]any{"closed": closed}, nil, nil
}

// sessionDetach stops the socket viewing a session: {"detached"}, false
// when it was not viewing it.
func (c *chatConn) sessionDetach(_ context.Context, raw json.RawMessage) (any, func(), error) {
	var p sessionParams
	if err := readParams(raw, &p); err != nil {
		return nil, nil, err
	}
	was, err := c.h.Registry.Leave(c, p.SessionID)
	if err != nil {
		return nil, nil, err
	}
	return map[string]any{"detached": was}, nil, nil
}

// listParams are session.list's. Its closed page's limit and before are
// checked only with include_closed, after the live list is read (which
// in a cluster adopts the sessions another node let go), as they always
// were.
type listParams struct {
	IncludeClosed bool   `json:"include_closed"`
	Limit         *int   `json:"limit"`
	Before        string `json:"before"`
}

func (p *listParams) check() *RPCError { return nil }

// closedPage checks the closed page's limit and before.
func (p *listParams) closedPage() (limit int, before time.Time, e *RPCError) {
	limit, e = checkLimit(p.Limit, 50, MaxListPage)
	if e != nil {
		return 0, time.Time{}, e
	}
	if p.Before != "" {
		t, err := time.Parse(time.RFC3339Nano, p.Before)
		if err != nil {
			return 0, time.Time{}, invalidParams("invalid params: before must be an RFC 3339 time (a closed_at of the previous page)")
		}
		before = t
	}
	return limit, before, nil
}

// sessionList lists the principal's live sessions, then, with
// include_closed, a page of its closed ones, newest first: {"sessions"}
// (and "more" with include_closed). An admin's are its own too: admins
// list everyone's on /admin, which shows no other user's title.
func (c *chatConn) sessionList(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p listParams
	if err := readParams(raw, &p); err != nil {
		return nil, nil, err
	}
	// A user's own list, an admin user's too: listed as the owner (not
	// as an admin, whose list is everyone's and adopts nothing), a node of
	// a cluster adopts the sessions a dead node let go before it lists.
	owner := c.who
	if owner != sessions.AdminPrincipal {
		owner.Admin = false
	}
	live := c.h.Registry.List(owner)
	list := make([]any, 0, len(live))
	for _, in := range live {
		if c.who.Owns(in.Owner) {
			list = append(list, in)
		}
	}
	if !p.IncludeClosed {
		return map[string]any{"sessions": list}, nil, nil
	}
	limit, before, e := p.closedPage()
	if e != nil {
		return nil, nil, e
	}
	closed, more, err := c.h.Registry.ListClosed(ctx, c.who, before, limit)
	if err != nil {
		return nil, nil, err
	}
	for _, row := range closed {
		list = append(list, closedInfo(row))
	}
	return map[string]any{"sessions": list, "more": more}, nil, nil
}

// sessionInterrupt cancels a session's running turn (the socket becomes
// a viewer): {"status"}, "interrupted" or "idle".
func (c *chatConn) sessionInterrupt(_ context.Context, raw json.RawMessage) (any, func(), error) {
	var p sessionParams
	if err := readParams(raw, &p); err != nil {
		return nil, nil, err
	}
	status, err := c.h.Registry.Interrupt(c, p.SessionID)
	if err != nil {
		return nil, nil, err
	}
	return map[string]any{"status": status}, nil, nil
}

type slashParams struct {
	SessionID string `json:"session_id"`
	Command   string `json:"command"`
}

func (p *slashParams) check() *RPCError {
	if e := requireSession(p.SessionID); e != nil {
		return e
	}
	return checkCommand(p.Command)
}

// slashExec runs a slash command in the session's worker (spawned when
// it has none; the socket becomes a viewer): {"output"}.
func (c *chatConn) slashExec(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p slashParams
	if err := readParams(raw, &p); err != nil {
		return nil, nil, err
	}
	out, err := c.h.Registry.Exec(ctx, c, p.SessionID, p.Command)
	if err != nil {
		return nil, nil, err
	}
	return map[string]any{"output": out}, nil, nil
}

type promptParams struct {
	SessionID   string   `json:"session_id"`
	Text        string   `json:"text"`
	Attachments []string `json:"attachments"` // ids of files uploaded into the session (issue 42)
}

func (p *promptParams) check() *RPCError {
	if e := requireSession(p.SessionID); e != nil {
		return e
	}
	for _, id := range p.Attachments {
		if id == "" {
			return invalidParams("invalid params: an attachment id is empty")
		}
	}
	return checkPrompt(p.Text)
}

// promptSubmit starts a turn (the socket becomes a viewer):
// {"status":"streaming","turn_id"}. The turn's events start after the
// answer is sent (the after func), so the answer precedes them.
func (c *chatConn) promptSubmit(_ context.Context, raw json.RawMessage) (any, func(), error) {
	var p promptParams
	if err := readParams(raw, &p); err != nil {
		return nil, nil, err
	}
	turnID, start, err := c.h.Registry.Prompt(c, p.SessionID, p.Text, p.Attachments...)
	if err != nil {
		return nil, nil, err
	}
	return map[string]any{"status": "streaming", "turn_id": turnID}, start, nil
}

// resumeResult is the result of session.resume and session.reopen.
func resumeResult(res sessions.ResumeResult) map[string]any {
	hist := res.History
	if hist == nil {
		hist = []sessions.Message{}
	}
	pending := res.PendingApprovals
	if pending == nil {
		pending = []sessions.Approval{}
	}
	out := map[string]any{"session_id": res.ID, "state": res.State, "history": hist, "running": res.Running,
		"title": res.Title, "model": res.Model, "pending_approvals": pending}
	if res.Agent != "" { // an ACP agent's session (issue 40)
		out["agent"] = res.Agent
	}
	if res.Plan != nil {
		out["plan"] = res.Plan
	}
	if res.Commands != nil {
		out["commands"] = res.Commands
	}
	// Its running terminals (issue 42), so a page rebuilds its tabs.
	terms := res.Terminals
	if terms == nil {
		terms = []sessions.TerminalInfo{}
	}
	out["terminals"] = terms
	// Its files uploaded and not sent yet (issue 42): the page's chips.
	files := res.PendingAttachments
	if files == nil {
		files = []store.AttachmentRef{}
	}
	out["pending_attachments"] = files
	return out
}

// closedInfo is a closed session as session.list shows it.
func closedInfo(row store.Session) map[string]any {
	return map[string]any{
		"session_id": row.ID, "title": row.Title, "state": "closed", "viewers": 0, "running": false,
		"created_at": row.CreatedAt, "last_active": row.LastActive,
		"end_reason": row.EndReason, "closed_at": row.ClosedAt,
	}
}
