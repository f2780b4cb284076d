package handlers

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/dashgate/dashgate/accounts"
	"github.com/dashgate/dashgate/sessions"
)

// TerminalRefusal serves GET /terminal/refusal?session_id=ID: why that
// session's terminal is refused before its program starts, for a page
// whose /ws/pty upgrade was refused (a browser's WebSocket hides the 403
// and its sentence). 200 with JSON {"refusal": "sentence"} ("" when
// nothing refuses it now: capacity or a spawn failure may have, and a
// retry may succeed); 404 for a session the caller may not use, as for an
// unknown one. It starts nothing.
type TerminalRefusal struct {
	Registry interface {
		TerminalRefusal(p sessions.Principal, sid string) error
	}
	Log *slog.Logger
}

func (h *TerminalRefusal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	err := h.Registry.TerminalRefusal(PrincipalFrom(r.Context()), r.URL.Query().Get("session_id"))
	refusal := ""
	switch {
	case errors.Is(err, accounts.ErrRefused):
		refusal = refusalOf(err)
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
	json.NewEncoder(w).Encode(map[string]string{"refusal": refusal})
}
