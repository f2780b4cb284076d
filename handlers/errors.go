package handlers

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/dashgate/dashgate/accounts"
	"github.com/dashgate/dashgate/recordings"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers"
)

// CodeLeaseUnproven answers a call that would start new work (a prompt, a
// slash command, a terminal) for a session this node of a cluster cannot
// prove it still holds: the store was unreachable for a whole lease
// (sessions.ErrLeaseUnproven). Nothing was done; the same call works once
// the store is back.
const CodeLeaseUnproven = 5006

// CodeHeldElsewhere answers session.resume (or session.reopen) of the
// caller's session that another node of the cluster holds under a live
// lease (sessions.HeldElsewhereError): its node died and the lease has
// not lapsed yet, or it lives and this request reached another node.
// data: {"node", "retry_in_ms"}: ask again then (issue 41).
const CodeHeldElsewhere = 4010

// The error edges: one function per transport turns the errors of the
// registry and the worker manager into that transport's codes, and logs an
// internal error (one it has no code for) once, at ERROR, since only then is
// something lost that nobody else reports. Handlers return errors to these
// and never log them themselves.

// rpcError maps err to its JSON-RPC error object (PROTOCOL.md §2): an
// *RPCError as is, the sessions and workers sentinels to 4001, 4009, 4029
// and 5004 (an account refusal too: data.failure "spawn", its reason as
// the message), sessions.ErrLeaseUnproven to 5006, anything else to
// -32603 "internal error", logged on log with the method.
func rpcError(log *slog.Logger, method string, err error) *RPCError {
	var rpc *RPCError
	var we *workers.Error
	var vc *sessions.ViewerCapacityError
	var uc *sessions.UserCapacityError
	var sc *sessions.CapacityError
	var wc *workers.CapacityError
	var se *sessions.StoreError
	var ua *sessions.UnknownAgentError
	var he *sessions.HeldElsewhereError
	var al *sessions.AttachLimitError
	var uf *sessions.UnknownAttachmentError
	switch {
	case errors.As(err, &rpc):
		return rpc
	case errors.As(err, &al):
		data := map[string]any{"limit": al.Limit, "max": al.Max}
		if al.Name != "" {
			data["name"] = al.Name
		}
		return &RPCError{Code: CodeAttachLimit, Message: al.Error(), Data: data}
	case errors.As(err, &uf):
		return invalidParams(uf.Error())
	case errors.As(err, &he):
		return &RPCError{Code: CodeHeldElsewhere, Message: he.Error(),
			Data: map[string]any{"node": he.Node, "retry_in_ms": he.RetryIn.Milliseconds()}}
	case errors.As(err, &ua):
		return invalidParams(ua.Error())
	case errors.Is(err, sessions.ErrNotFound):
		return &RPCError{Code: CodeNotFound, Message: "session not found or already closed"}
	case errors.Is(err, sessions.ErrBusy):
		return &RPCError{Code: CodeBusy, Message: "a turn is already running in this session"}
	case errors.Is(err, sessions.ErrLeaseUnproven):
		// Nothing is lost and nothing was done: the registry logged the
		// lapse once (WARN "leases unproven").
		return &RPCError{Code: CodeLeaseUnproven, Message: sessions.ErrLeaseUnproven.Error()}
	case errors.As(err, &vc):
		return &RPCError{Code: CodeCapacity, Message: vc.Error()}
	case errors.As(err, &uc):
		// As a viewer's cap: the message names the limit, whatever wraps it.
		return capacityError(uc.Error(), uc.Limit, uc.Max)
	case errors.As(err, &sc):
		return capacityError(sc.Error(), sc.Limit, sc.Max)
	case errors.As(err, &wc):
		return capacityError(wc.Error(), "--max-workers", wc.Max)
	case errors.Is(err, sessions.ErrCapacity), errors.Is(err, sessions.ErrShuttingDown):
		return &RPCError{Code: CodeCapacity, Message: err.Error()}
	case errors.Is(err, workers.ErrCapacity):
		return &RPCError{Code: CodeCapacity, Message: "worker capacity reached"}
	case errors.Is(err, accounts.ErrRefused):
		// The owner has no Unix account to run as (--unix-users): the
		// worker could not start, as a spawn failure, and the message is
		// the refusal's reason (the registry logged it at WARN).
		return &RPCError{Code: CodeWorkerFailed, Message: refusalOf(err),
			Data: map[string]any{"failure": workers.FailSpawn, "stderr_tail": []string{}}}
	case errors.As(err, &we):
		tail := we.StderrTail
		if tail == nil {
			tail = []string{}
		}
		data := map[string]any{"failure": we.Failure, "stderr_tail": tail}
		if we.RetryAfter > 0 {
			data["retry_after"] = we.RetryAfter
		}
		msg := we.Error()
		if we.Failure == workers.FailProtocol {
			// The sentence a person reads; the protocol's words are details.
			data["detail"] = msg
			msg = "the worker sent something dashgate cannot read, so it was stopped; try again"
		}
		return &RPCError{Code: CodeWorkerFailed, Message: msg, Data: data}
	case errors.As(err, &se):
		// Nothing is lost (the registry keeps its writes queued); the
		// journal logs write failures, a failed read is worth a warning.
		log.Warn("conversation store", "method", method, "err", err)
		return &RPCError{Code: CodeStoreFailed, Message: "the conversation store is unavailable; try again"}
	case errors.Is(err, context.Canceled):
		// The socket went while the call waited: nobody reads the reply.
		return &RPCError{Code: CodeInternal, Message: "request cancelled"}
	}
	log.Error("internal error", "method", method, "code", CodeInternal, "err", err)
	return &RPCError{Code: CodeInternal, Message: "internal error"}
}

// capacityError is 4029 for a cap that was met, with the message naming
// it and data {"limit": the flag, "max": its value} (PROTOCOL.md §2).
func capacityError(msg, limit string, max int) *RPCError {
	return &RPCError{Code: CodeCapacity, Message: msg, Data: map[string]any{"limit": limit, "max": max}}
}

// DescribeError is the code and message of err's JSON-RPC error without
// logging it: what a failed command's history entry keeps
// (sessions.Config.DescribeError).
func DescribeError(err error) (int, string) {
	e := rpcError(slog.New(slog.DiscardHandler), "", err)
	return e.Code, e.Message
}

// httpError answers a plain HTTP request (the /ws/pty handshake, /admin)
// that failed with err: 400 for an errBadRequest, 404 for
// sessions.ErrNotFound, 503 for the
// capacity and shutdown sentinels (a *sessions.UserCapacityError among
// them, its message naming the per-user limit) and
// sessions.ErrLeaseUnproven (a terminal this node cannot prove its hold
// for), 403 with the reason for
// an account refusal (accounts.ErrRefused: the owner has no Unix account
// to run as), 500 "internal error" for anything else,
// logged on log with the method and path.
func httpError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var bad errBadRequest
	switch {
	case errors.As(err, &bad):
		http.Error(w, bad.msg, http.StatusBadRequest)
	case errors.Is(err, sessions.ErrNotFound):
		http.Error(w, sessions.ErrNotFound.Error(), http.StatusNotFound)
	case errors.Is(err, recordings.ErrNotFound): // also another user's
		http.Error(w, recordings.ErrNotFound.Error(), http.StatusNotFound)
	case errors.Is(err, sessions.ErrCapacity), errors.Is(err, workers.ErrCapacity), errors.Is(err, sessions.ErrShuttingDown),
		errors.Is(err, sessions.ErrLeaseUnproven):
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	case errors.Is(err, accounts.ErrRefused):
		http.Error(w, refusalOf(err), http.StatusForbidden)
	default:
		log.Error("internal error", "method", r.Method, "path", r.URL.Path, "status", http.StatusInternalServerError, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
	}
}

// errBadRequest is an input error of an HTTP request; httpError answers it
// with 400 and its message.
type errBadRequest struct{ msg string }

func (e errBadRequest) Error() string { return e.msg }

// refusalOf is the sentence of an account refusal: the
// *accounts.RefusedError's own, however it is wrapped.
func refusalOf(err error) string {
	var re *accounts.RefusedError
	if errors.As(err, &re) {
		return re.Error()
	}
	return err.Error()
}
