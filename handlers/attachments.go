package handlers

import (
	"bytes"
	"context"
	"log/slog"
	"mime"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/store"
)

// CodeAttachLimit answers a file, or a message's files, beyond the
// attachment limits (--attach-max-bytes, --attach-max-files,
// --attach-max-total; sessions.AttachLimitError): nothing was stored or
// sent. data: {"limit": the flag, "max", "name"?} (issue 42).
const CodeAttachLimit = 4013

// Attachments serves a session's attached files over HTTP (issue 42),
// for their owner only (an admin reaps, never reads: another user's file
// answers exactly as a missing one):
//
//   - POST /sessions/{id}/attachments?name=NAME, the file's bytes as the
//     body and its type as Content-Type: stores it into the live session
//     id, waiting for the prompt.submit that names it; 201
//     {"id","name","type","kind","size"}.
//   - DELETE /sessions/{id}/attachments/{aid}: takes back a file not sent
//     yet; 204.
//   - GET /sessions/{id}/attachments/{aid}: the file (live or closed
//     session); an image inline, anything else as a download.
//
// Errors are JSON {"code","message","data"?}, the codes of the chat
// socket's errors: 404 (4001), 413 (4013), 400 (-32602), 503 (5005,
// 4029), 500 (-32603, logged once).
type Attachments struct {
	Registry AttachmentFiles
	Log      *slog.Logger
}

// AttachmentFiles is what Attachments needs of the registry
// (sessions.Registry): each call authorizes p on the session first.
type AttachmentFiles interface {
	Attach(ctx context.Context, p sessions.Principal, sid string, f sessions.NewAttachment) (store.AttachmentRef, error)
	Unattach(ctx context.Context, p sessions.Principal, sid, id string) error
	Attachment(ctx context.Context, p sessions.Principal, sid, id string) (store.Attachment, error)
}

// Upload is POST /sessions/{id}/attachments.
func (h *Attachments) Upload(w http.ResponseWriter, r *http.Request) {
	ref, err := h.Registry.Attach(r.Context(), PrincipalFrom(r.Context()), chi.URLParam(r, "id"), sessions.NewAttachment{
		Name: r.URL.Query().Get("name"), Type: r.Header.Get("Content-Type"), Size: r.ContentLength, Body: r.Body,
	})
	if err != nil {
		h.fail(w, r, "upload", err)
		return
	}
	writeJSON(w, http.StatusCreated, ref)
}

// Remove is DELETE /sessions/{id}/attachments/{aid}.
func (h *Attachments) Remove(w http.ResponseWriter, r *http.Request) {
	if err := h.Registry.Unattach(r.Context(), PrincipalFrom(r.Context()), chi.URLParam(r, "id"), chi.URLParam(r, "aid")); err != nil {
		h.fail(w, r, "remove", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Download is GET /sessions/{id}/attachments/{aid}.
func (h *Attachments) Download(w http.ResponseWriter, r *http.Request) {
	a, err := h.Registry.Attachment(r.Context(), PrincipalFrom(r.Context()), chi.URLParam(r, "id"), chi.URLParam(r, "aid"))
	if err != nil {
		h.fail(w, r, "download", err)
		return
	}
	hd := w.Header()
	// The bytes are the user's: never a page of this origin, whatever
	// they hold (an HTML or SVG file is served as a download, sandboxed).
	hd.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Cache-Control", "private, no-cache")
	hd.Set("ETag", strconv.Quote(a.ID)) // an id names one content for good
	disposition := "attachment"
	if a.Kind == store.AttachImage {
		disposition = "inline" // the history's thumbnail
	}
	hd.Set("Content-Disposition", mime.FormatMediaType(disposition, map[string]string{"filename": a.Name}))
	hd.Set("Content-Type", a.Type)
	http.ServeContent(w, r, "", a.CreatedAt, bytes.NewReader(a.Data))
}

// fail answers a failed call as JSON with its code and the matching status.
func (h *Attachments) fail(w http.ResponseWriter, r *http.Request, what string, err error) {
	log := h.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := rpcError(log, "attachments."+what, err)
	status := http.StatusInternalServerError
	switch {
	case e.Code == CodeNotFound:
		status = http.StatusNotFound
	case e.Code == CodeAttachLimit:
		status = http.StatusRequestEntityTooLarge
	case e.Code == CodeInvalidParams:
		status = http.StatusBadRequest
	case e.Code == CodeStoreFailed || e.Code == CodeCapacity:
		status = http.StatusServiceUnavailable
	}
	body := map[string]any{"code": e.Code, "message": e.Message}
	if e.Data != nil {
		body["data"] = e.Data
	}
	writeJSON(w, status, body)
}

// attachLimits is gateway.ready's "attachments": the limits a page checks
// before it uploads.
func attachLimits(l sessions.AttachLimits) map[string]any {
	l = l.WithDefaults()
	return map[string]any{"max_bytes": l.MaxBytes, "max_files": l.MaxFiles, "max_total": l.MaxTotal}
}
