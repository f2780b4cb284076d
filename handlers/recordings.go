package handlers

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/go-chi/chi/v5"

	"github.com/dashgate/dashgate/recordings"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/templates"
)

// RecordingStore is what the recording endpoints need of the recordings
// (recordings.Store has it). Errors: recordings.ErrNotFound for a file
// name that is not a recording's, or none of that owner's.
type RecordingStore interface {
	// List is owner's recordings, newest first.
	List(owner string) ([]recordings.Info, error)
	// ListAll is every owner's, newest first.
	ListAll() ([]recordings.Info, error)
	// OpenFile opens owner's recording file; the caller closes it.
	OpenFile(owner, file string) (io.ReadSeekCloser, recordings.Info, error)
}

// maxListed is the most recordings a page lists (the newest); it says how
// many more there are.
const maxListed = 200

// Recordings serves the terminal recordings of --record-terminals
// (docs/recordings.md): to their owner under /recordings (Routes), to
// admins under /admin/recordings (AdminRoutes, mounted by Admin). Only an
// owner's name and a file name the store accepts ever reach the file
// system; another user's recording answers exactly as a missing one (404
// "recording not found"). Auth is the web middleware's.
type Recordings struct {
	Store    RecordingStore
	Log      *slog.Logger
	BasePath func(*http.Request) string // the request's base path, "/..."
	// Title, when set, is the title of owner's session sid ("" when it
	// has none or is gone): the owner's list names each recording's
	// session by it (an admin's names none: titles are their owner's
	// words). Called once per session listed.
	Title func(ctx context.Context, owner, sid string) string
}

// Routes mounts the owner's endpoints (relative to /recordings):
//
//	GET /               their recordings: a page, or JSON {"recordings":[RecordingJSON]} for Accept: application/json
//	GET /{file}         the file, as a download (Content-Disposition: attachment)
//	GET /{file}/play    a page that plays it
func (h *Recordings) Routes(r chi.Router) {
	r.Get("/", h.ownList)
	r.Get("/{file}", h.ownFile)
	r.Get("/{file}/play", h.ownPlay)
}

// AdminRoutes mounts the admin's endpoints (relative to /admin/recordings),
// {user} being the owner's directory name (recordings.DirOf):
//
//	GET /                        every user's recordings, JSON {"recordings":[RecordingJSON]}
//	GET /{user}/{file}           the file, as a download
//	GET /{user}/{file}/play      a page that plays it
func (h *Recordings) AdminRoutes(r chi.Router) {
	r.Get("/", h.adminList)
	r.Get("/{user}/{file}", h.adminFile)
	r.Get("/{user}/{file}/play", h.adminPlay)
}

// RecordingJSON is a recording in the JSON lists: its owner ("" the
// anonymous user), file name, session, start (RFC 3339), size in bytes,
// whether its terminal still runs, and the URLs that play and download it.
type RecordingJSON struct {
	User      string `json:"user"`
	File      string `json:"file"`
	SessionID string `json:"session_id"`
	// Title is its session's title, in the owner's list only (omitted
	// when unknown: the session deleted).
	Title   string    `json:"title,omitempty"`
	Started time.Time `json:"started"`
	Size    int64     `json:"size"`
	Active  bool      `json:"active"`
	PlayURL string    `json:"play_url"`
	URL     string    `json:"url"`
}

// owner is whose recordings p may see as their own: false for the admin
// token's principal, which owns none (sessions.Principal.Owns).
func owner(p sessions.Principal) (string, bool) {
	if !p.Owns(p.User) {
		return "", false
	}
	return p.User, true
}

// ownURL and adminURL are a recording's download URLs.
func ownURL(base string, in recordings.Info) string {
	return base + "recordings/" + url.PathEscape(in.File)
}

func adminURL(base string, in recordings.Info) string {
	return base + "admin/recordings/" + url.PathEscape(in.Dir) + "/" + url.PathEscape(in.File)
}

func (h *Recordings) logger() *slog.Logger {
	if h.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Log
}

func (h *Recordings) ownList(w http.ResponseWriter, r *http.Request) {
	var list []recordings.Info
	var err error
	var titles map[string]string
	if user, ok := owner(PrincipalFrom(r.Context())); ok {
		list, err = h.Store.List(user)
		titles = h.titles(r.Context(), user, list)
	}
	h.list(w, r, list, err, ownURL, false, titles)
}

// titles is the title of each session of list (owner's), by session id:
// at most maxListed lookups (Title), the newest recordings' sessions.
func (h *Recordings) titles(ctx context.Context, owner string, list []recordings.Info) map[string]string {
	if h.Title == nil {
		return nil
	}
	out := map[string]string{}
	for i, in := range list {
		if i == maxListed {
			break
		}
		if _, ok := out[in.SessionID]; !ok {
			out[in.SessionID] = h.Title(ctx, owner, in.SessionID)
		}
	}
	return out
}

func (h *Recordings) adminList(w http.ResponseWriter, r *http.Request) {
	list, err := h.Store.ListAll()
	h.list(w, r, list, err, adminURL, true, nil)
}

// list answers a list: JSON when asked for (or for the admin), else the
// owner's page. A list read in part still answers what it has; the
// failure is logged once (WARN) and the page says so.
// titles names each session (the owner's list; nil for the admin's).
func (h *Recordings) list(w http.ResponseWriter, r *http.Request, list []recordings.Info, err error, urlOf func(string, recordings.Info) string, admin bool, titles map[string]string) {
	base := h.BasePath(r)
	if err != nil {
		h.logger().Warn("list recordings", "err", err)
	}
	w.Header().Set("Cache-Control", "no-store")
	if admin || strings.Contains(r.Header.Get("Accept"), "application/json") {
		out := make([]RecordingJSON, 0, len(list))
		for _, in := range list {
			u := urlOf(base, in)
			out = append(out, RecordingJSON{User: in.User, File: in.File, SessionID: in.SessionID, Title: titles[in.SessionID], Started: in.Started,
				Size: in.Size, Active: in.Active, URL: u, PlayURL: u + "/play"})
		}
		writeJSON(w, http.StatusOK, map[string]any{"recordings": out})
		return
	}
	v := templates.RecordingsView{BasePath: base}
	v.Rows, v.More = recordingRows(base, list, urlOf, time.Now())
	for i := range v.Rows {
		v.Rows[i].Title = titles[v.Rows[i].SessionID]
	}
	if err != nil {
		v.Error = "Some recordings could not be read; those found are listed."
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	templates.RecordingsPage(v).Render(r.Context(), w)
}

// recordingRows is the newest maxListed of list as rows, and how many
// more there are.
func recordingRows(base string, list []recordings.Info, urlOf func(string, recordings.Info) string, now time.Time) ([]templates.RecordingRow, int) {
	more := max(0, len(list)-maxListed)
	list = list[:len(list)-more]
	rows := make([]templates.RecordingRow, 0, len(list))
	for _, in := range list {
		rows = append(rows, recordingRow(base, in, urlOf, now))
	}
	return rows, more
}

func recordingRow(base string, in recordings.Info, urlOf func(string, recordings.Info) string, now time.Time) templates.RecordingRow {
	u := urlOf(base, in)
	return templates.RecordingRow{User: in.User, File: in.File, SessionID: in.SessionID,
		Started: humanAgo(now, in.Started), StartedExact: in.Started.UTC().Format(time.RFC3339Nano),
		Size: humanize.IBytes(uint64(in.Size)), SizeExact: fmt.Sprintf("%d bytes", in.Size),
		Active: in.Active, PlayURL: u + "/play", DownloadURL: u}
}

// adminRows is the admin page's list (AdminView.Recordings).
func (h *Recordings) adminRows(base string, now time.Time) (rows []templates.RecordingRow, more int, errText string) {
	list, err := h.Store.ListAll()
	if err != nil {
		h.logger().Warn("list recordings", "err", err)
		errText = "Some recordings could not be read; those found are listed."
	}
	rows, more = recordingRows(base, list, adminURL, now)
	return rows, more, errText
}

// open opens owner's recording named by the path's {file}: nothing else
// of the request reaches the store.
func (h *Recordings) open(r *http.Request, user string) (io.ReadSeekCloser, recordings.Info, error) {
	return h.Store.OpenFile(user, chi.URLParam(r, "file"))
}

// adminUser is the owner named by the path's {user} (a directory name
// recordings.DirOf makes; any other is not found).
func adminUser(r *http.Request) (string, error) {
	user, ok := recordings.UserOf(chi.URLParam(r, "user"))
	if !ok {
		return "", recordings.ErrNotFound
	}
	return user, nil
}

func (h *Recordings) ownFile(w http.ResponseWriter, r *http.Request) {
	user, ok := owner(PrincipalFrom(r.Context()))
	if !ok {
		httpError(w, r, h.logger(), recordings.ErrNotFound)
		return
	}
	h.download(w, r, user)
}

func (h *Recordings) adminFile(w http.ResponseWriter, r *http.Request) {
	user, err := adminUser(r)
	if err != nil {
		httpError(w, r, h.logger(), err)
		return
	}
	h.download(w, r, user)
}

// download answers the file (ranges and conditional requests as
// http.ServeContent does), as an attachment named as it is.
func (h *Recordings) download(w http.ResponseWriter, r *http.Request, user string) {
	f, in, err := h.open(r, user)
	if err != nil {
		httpError(w, r, h.logger(), err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/x-asciicast")
	w.Header().Set("Content-Disposition", mimeAttachment(in.File))
	w.Header().Set("Cache-Control", "private, no-cache")
	http.ServeContent(w, r, in.File, in.Modified, f)
}

// mimeAttachment is the Content-Disposition of a download named name (a
// recording's file name: letters, digits, '-', '.', ':').
func mimeAttachment(name string) string {
	return `attachment; filename="` + name + `"`
}

func (h *Recordings) ownPlay(w http.ResponseWriter, r *http.Request) {
	user, ok := owner(PrincipalFrom(r.Context()))
	if !ok {
		httpError(w, r, h.logger(), recordings.ErrNotFound)
		return
	}
	base := h.BasePath(r)
	h.play(w, r, user, ownURL, base+"recordings", "your recordings")
}

func (h *Recordings) adminPlay(w http.ResponseWriter, r *http.Request) {
	user, err := adminUser(r)
	if err != nil {
		httpError(w, r, h.logger(), err)
		return
	}
	base := h.BasePath(r)
	h.play(w, r, user, adminURL, base+"admin", "admin")
}

// playerCSP is the player page's Content-Security-Policy: the server's
// (default-src 'self', ...) with script-src 'self' 'wasm-unsafe-eval': the
// player's terminal emulator is WebAssembly (compiled from bytes in its
// bundle). No inline script or style, no eval of JavaScript.
func playerCSP(server string) string {
	return strings.Replace(server, "default-src 'self';", "default-src 'self'; script-src 'self' 'wasm-unsafe-eval';", 1)
}

// play answers the page that plays user's recording.
func (h *Recordings) play(w http.ResponseWriter, r *http.Request, user string, urlOf func(string, recordings.Info) string, back, backLabel string) {
	f, in, err := h.open(r, user)
	if err != nil {
		httpError(w, r, h.logger(), err)
		return
	}
	f.Close()
	base := h.BasePath(r)
	row := recordingRow(base, in, urlOf, time.Now())
	if csp := w.Header().Get("Content-Security-Policy"); csp != "" {
		w.Header().Set("Content-Security-Policy", playerCSP(csp))
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	templates.RecordingPlayer(templates.PlayerView{BasePath: base, Row: row, CastURL: row.DownloadURL,
		BackURL: back, BackLabel: backLabel}).Render(r.Context(), w)
}
