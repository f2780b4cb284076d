package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/dashgate/dashgate/accounts"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers/files"
)

// TerminalFiles copies files into and out of a session's terminal (issue
// 42), as the session owner's Unix account (workers/files: the kernel
// decides what they may touch):
//
//   - POST /sessions/{id}/terminal/files?name=NAME[&terminal=ID]: the
//     request body becomes the new file NAME in the current directory of
//     the shell of the session's terminal ID ("" its first; its home when
//     that terminal does not run). 201 with JSON
//     {"path", "size"}. 400 for a name that is not one file name, 403 when
//     the account may not write there (the kernel's sentence), 404 for a
//     session the caller may not use or a directory that is gone, 409 when
//     NAME exists (never replaced), 413 beyond MaxUpload bytes (nothing
//     is left behind).
//   - GET /sessions/{id}/terminal/files?path=PATH[&terminal=ID]: the regular file PATH
//     (absolute, or relative to that directory) as a download
//     (Content-Disposition: attachment). 400 without a path or for a
//     directory, 403 when the account may not read it, 404 when it does
//     not exist.
//
// Each copy logs one INFO "terminal file" record (sid, user, op put or
// get, path, bytes).
type TerminalFiles struct {
	Registry interface {
		TerminalDir(p sessions.Principal, sid, terminal string) (string, *accounts.Account, error)
	}
	Self      string // the dashgate binary, which runs the helper
	MaxUpload int64  // bytes an upload may hold
	Log       *slog.Logger
}

func (h *TerminalFiles) logger() *slog.Logger {
	if h.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Log
}

// terminalDir is the Registry's TerminalDir for the request's ?terminal=
// (issue 42: "" the session's first; a malformed one is a 400).
func (h *TerminalFiles) terminalDir(r *http.Request, p sessions.Principal, sid string) (string, *accounts.Account, error) {
	dir, acct, err := h.Registry.TerminalDir(p, sid, r.URL.Query().Get("terminal"))
	if errors.Is(err, sessions.ErrTerminalID) {
		err = errBadRequest{err.Error()}
	}
	return dir, acct, err
}

// Upload serves the POST.
func (h *TerminalFiles) Upload(w http.ResponseWriter, r *http.Request) {
	p, sid := PrincipalFrom(r.Context()), chi.URLParam(r, "id")
	name := r.URL.Query().Get("name")
	if err := files.CheckName(name); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.ContentLength > h.MaxUpload {
		http.Error(w, fmt.Sprintf("%s is larger than %d bytes: not uploaded", name, h.MaxUpload), http.StatusRequestEntityTooLarge)
		return
	}
	dir, acct, err := h.terminalDir(r, p, sid)
	if err != nil {
		httpError(w, r, h.logger(), err)
		return
	}
	body := http.MaxBytesReader(w, r.Body, h.MaxUpload+1) // the helper stops at MaxUpload+1
	at, n, err := files.Helper{Self: h.Self, Account: acct}.Put(r.Context(), dir, name, body, h.MaxUpload)
	if err != nil {
		h.fileError(w, r, err)
		return
	}
	h.logger().Info("terminal file", "sid", sid, "user", p.User, "op", "put", "path", at, "bytes", n)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]any{"path": at, "size": n})
}

// Download serves the GET.
func (h *TerminalFiles) Download(w http.ResponseWriter, r *http.Request) {
	p, sid := PrincipalFrom(r.Context()), chi.URLParam(r, "id")
	want := r.URL.Query().Get("path")
	if want == "" {
		http.Error(w, "name a file: ?path=", http.StatusBadRequest)
		return
	}
	dir, acct, err := h.terminalDir(r, p, sid)
	if err != nil {
		httpError(w, r, h.logger(), err)
		return
	}
	var sent int64
	at, err := files.Helper{Self: h.Self, Account: acct}.Get(r.Context(), dir, want, func(at string, size int64) io.Writer {
		hd := w.Header()
		hd.Set("Content-Type", "application/octet-stream")
		hd.Set("Content-Length", strconv.FormatInt(size, 10))
		hd.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(at)}))
		hd.Set("Cache-Control", "no-store")
		sent = size
		return w
	})
	if err != nil {
		if sent > 0 || w.Header().Get("Content-Length") != "" {
			// The headers went out with the first bytes: the download is
			// cut short, which the browser shows as failed.
			h.logger().Warn("terminal file cut short", "sid", sid, "user", p.User, "op", "get", "path", want, "err", err)
			return
		}
		h.fileError(w, r, err)
		return
	}
	h.logger().Info("terminal file", "sid", sid, "user", p.User, "op", "get", "path", at, "bytes", sent)
}

// fileError answers a failed copy: the helper's refusals with their
// status and sentence, anything else as httpError does.
func (h *TerminalFiles) fileError(w http.ResponseWriter, r *http.Request, err error) {
	var fe *files.Error
	if !errors.As(err, &fe) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("larger than %d bytes: not uploaded", h.MaxUpload), http.StatusRequestEntityTooLarge)
			return
		}
		if r.Context().Err() != nil {
			return // the browser went: nobody reads an answer
		}
		httpError(w, r, h.logger(), err)
		return
	}
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, files.ErrBadName), errors.Is(err, files.ErrNotFile):
		code = http.StatusBadRequest
	case errors.Is(err, files.ErrDenied):
		code = http.StatusForbidden
	case errors.Is(err, files.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, files.ErrExists):
		code = http.StatusConflict
	case errors.Is(err, files.ErrTooLarge):
		code = http.StatusRequestEntityTooLarge
	}
	http.Error(w, fe.Msg, code)
}
