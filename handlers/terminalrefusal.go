package handlers

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/dashgate/dashgate/accounts"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers"
)

// TerminalRefusal serves GET /terminal/refusal?session_id=ID: why that
// session's terminal is refused before its program starts, for a page
// whose /ws/pty upgrade was refused (a browser's WebSocket hides the 403
// or 503 and its sentence). 200 with JSON {"refusal": "sentence",
// "retrying": "sentence"}: refusal is the owner's account refusal, which
// no retry mends; retrying the cap the session's last terminal start met
// (its message naming the flag, as the 503's), which a retry may get past
// once room is made; each "" when there is none (a spawn failure is not
// kept: a retry may succeed). 404 for a session the caller may not use,
// as for an unknown one. It starts nothing.
type TerminalRefusal struct {
	Registry interface {
		TerminalRefusal(p sessions.Principal, sid string) error
	}
	Log *slog.Logger
}

func (h *TerminalRefusal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	err := h.Registry.TerminalRefusal(PrincipalFrom(r.Context()), r.URL.Query().Get("session_id"))
	refusal, retrying := "", ""
	switch {
	case errors.Is(err, accounts.ErrRefused):
		refusal = refusalOf(err)
	case errors.Is(err, sessions.ErrCapacity), errors.Is(err, workers.ErrCapacity):
		retrying = err.Error()
	case err != nil:
		log := h.Log
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		httpError(w, r, log, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(map[string]string{"refusal": refusal, "retrying": retrying})
}
