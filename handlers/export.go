package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/store"
)

// Export serves GET /sessions/{id}/export?format=markdown|json: a whole
// conversation, live or closed, as a download for its owner (an admin
// reaps, never reads: another user's session is 404 as an unknown one).
//
//   - format=markdown (the default): text/markdown, a heading with the
//     title, then each entry under "### <who> · <time UTC>"; command
//     output and tool results in fenced blocks.
//   - format=json: application/json, a sessions.Transcript
//     ({"session_id","title","state","created_at","model","entries":[...]},
//     entries as session.history gives them).
//
// Errors: 400 for another format, 404 for a session the caller may not
// use, 503 when the store cannot be read (retrying may succeed).
type Export struct {
	Registry Transcripts
	Log      *slog.Logger
}

// Transcripts is what Export needs of the registry (sessions.Registry):
// a session's whole conversation, for p, who must own it (ErrNotFound
// otherwise, as for an unknown id).
type Transcripts interface {
	Transcript(ctx context.Context, p sessions.Principal, sid string) (sessions.Transcript, error)
}

func (h *Export) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	format := r.URL.Query().Get("format")
	if format == "" {
		format = "markdown"
	}
	if format != "markdown" && format != "json" {
		httpError(w, r, h.Log, errBadRequest{`format: want "markdown" or "json"`})
		return
	}
	t, err := h.Registry.Transcript(r.Context(), PrincipalFrom(r.Context()), chi.URLParam(r, "id"))
	var se *sessions.StoreError
	switch {
	case errors.As(err, &se):
		h.Log.Warn("export", "sid", chi.URLParam(r, "id"), "err", err)
		http.Error(w, "the conversation store cannot be read now; try again", http.StatusServiceUnavailable)
		return
	case err != nil:
		httpError(w, r, h.Log, err)
		return
	}
	name := fileName(t)
	w.Header().Set("Cache-Control", "no-store")
	if format == "json" {
		w.Header().Set("Content-Disposition", `attachment; filename="`+name+`.json"`)
		writeJSON(w, http.StatusOK, t)
		return
	}
	w.Header().Set("Content-Type", "text/markdown; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`.md"`)
	w.Write([]byte(Markdown(t)))
}

// unsafeName is what a download's file name keeps out.
var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// fileName is t's download name: its title's safe characters, or its id.
func fileName(t sessions.Transcript) string {
	n := strings.Trim(unsafeName.ReplaceAllString(t.Title, "-"), "-.")
	if len(n) > 60 {
		n = n[:60]
	}
	if n == "" {
		return "session-" + unsafeName.ReplaceAllString(t.ID, "")
	}
	return n
}

// Markdown renders t as a Markdown document (Export's format=markdown).
func Markdown(t sessions.Transcript) string {
	var b strings.Builder
	title := t.Title
	if title == "" {
		title = "session " + t.ID
	}
	fmt.Fprintf(&b, "# %s\n\n", oneLine(title))
	fmt.Fprintf(&b, "- session: `%s`\n- created: %s\n", t.ID, stamp(t.CreatedAt))
	if t.Model != "" {
		fmt.Fprintf(&b, "- model: %s\n", oneLine(t.Model))
	}
	fmt.Fprintf(&b, "- entries: %d\n", len(t.Entries))
	for _, e := range t.Entries {
		fmt.Fprintf(&b, "\n### %s · %s\n\n", who(e), stamp(e.At))
		switch e.Kind {
		case store.KindSlashOutput:
			b.WriteString(fence(e.Text))
		case store.KindSlash:
			fmt.Fprintf(&b, "`%s`\n", strings.ReplaceAll(e.Text, "`", "'"))
		case store.KindError:
			fmt.Fprintf(&b, "> **Error:** %s\n", quoteLines(e.Text))
		case store.KindNotice:
			fmt.Fprintf(&b, "> %s\n", quoteLines(e.Text))
		default:
			if e.Role == store.RoleTool {
				b.WriteString(fence(e.Text))
				if len(e.Data) > 0 {
					b.WriteString(fence(string(e.Data)))
				}
				break
			}
			b.WriteString(strings.TrimRight(e.Text, "\n") + "\n")
		}
		b.WriteString(attachmentList(t.ID, e.Attachments))
		if e.Status == "interrupted" || e.Interrupted {
			b.WriteString("\n_(interrupted)_\n")
		}
	}
	return b.String()
}

// attachmentList is the Markdown of an entry's attached files: one line
// each, its name, kind and size and the path it downloads from (relative
// to the dashboard: GET sessions/{id}/attachments/{aid}, its owner's);
// "" for none.
func attachmentList(sid string, files []store.AttachmentRef) string {
	if len(files) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nAttached:\n\n")
	for _, f := range files {
		fmt.Fprintf(&b, "- %s (%s, %s): `sessions/%s/attachments/%s`\n",
			strings.NewReplacer("[", "\\[", "]", "\\]", "*", "\\*", "_", "\\_", "`", "\\`").Replace(oneLine(f.Name)),
			f.Kind, sessions.FormatBytes(f.Size), sid, f.ID)
	}
	return b.String()
}

// who names an entry's author and kind for its heading.
func who(e store.Entry) string {
	switch {
	case e.Kind == store.KindPrompt:
		return "You"
	case e.Kind == store.KindSlash:
		return "You (command)"
	case e.Kind == store.KindReply:
		return "Assistant"
	case e.Kind == store.KindSlashOutput:
		return "Output"
	case e.Kind == store.KindError:
		return "Error"
	case e.Kind == store.KindNotice:
		return "Notice"
	default:
		return strings.ReplaceAll(e.Kind, "_", " ")
	}
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func quoteLines(s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n> ")
}

// fence puts s in a fenced block longer than any run of backticks in it.
func fence(s string) string {
	n := 3
	for run, i := 0, 0; i < len(s); i++ {
		if s[i] == '`' {
			run++
			n = max(n, run+1)
		} else {
			run = 0
		}
	}
	f := strings.Repeat("`", n)
	return f + "\n" + strings.TrimRight(s, "\n") + "\n" + f + "\n"
}
