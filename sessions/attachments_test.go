package sessions

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

// upload attaches data as name into sid for p and fails t on error.
func upload(t *testing.T, r *Registry, p Principal, sid, name string, data []byte) store.AttachmentRef {
	t.Helper()
	ref, err := r.Attach(t.Context(), p, sid, NewAttachment{Name: name, Size: -1, Body: bytes.NewReader(data)})
	if err != nil {
		t.Fatalf("Attach(%s): %v", name, err)
	}
	return ref
}

// promptDone submits text with files and waits until its turn ended.
func promptDone(t *testing.T, h *harness, v Viewer, sid, text string, files ...string) {
	t.Helper()
	_, start, err := h.r.Prompt(v, sid, text, files...)
	if err != nil {
		t.Fatalf("Prompt: %v", err)
	}
	start()
	testkit.WaitFor(t, 15*time.Second, "turn done", func() bool { in, _ := h.r.Get(principalOf(v), sid); return !in.Running })
}

// TestAttachmentsReachTheWorker: files uploaded into a session go with
// the prompt that names them: the worker's params carry their bytes
// (base64 in JSON), the prompt's entry names them (resume, history), and
// a later prompt's history tells the model they were attached.
func TestAttachmentsReachTheWorker(t *testing.T) {
	h := newHarness(t, nil)
	v := viewerOf(alice)
	in, err := h.r.Create(v, NewSession{})
	if err != nil {
		t.Fatal(err)
	}
	png := append([]byte("\x89PNG\r\n\x1a\n"), 0, 1, 2, 3)
	img := upload(t, h.r, alice, in.ID, "chart.png", png)
	txt := upload(t, h.r, alice, in.ID, "../dir/notes.txt", []byte("line one\nline two\n"))
	if img.Kind != store.AttachImage || img.Type != "image/png" || txt.Kind != store.AttachText || txt.Name != "notes.txt" {
		t.Fatalf("refs = %+v, %+v; want an image/png image and a text notes.txt", img, txt)
	}
	promptDone(t, h, v, in.ID, "look at these", txt.ID, img.ID)

	w := h.sp.workers()[0]
	w.mu.Lock()
	params := w.prompts[0]
	w.mu.Unlock()
	b, _ := json.Marshal(params["attachments"])
	var got []struct {
		store.AttachmentRef
		Data []byte `json:"data"`
	}
	if err := json.Unmarshal(b, &got); err != nil || len(got) != 2 {
		t.Fatalf("the worker's attachments = %s (%v); want two", b, err)
	}
	if got[0].AttachmentRef != txt || string(got[0].Data) != "line one\nline two\n" || got[1].AttachmentRef != img || !bytes.Equal(got[1].Data, png) {
		t.Errorf("the worker got %+v; want notes.txt then chart.png with their bytes", got)
	}

	res, err := h.r.Resume(v, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(res.History, func(m Message) bool { return m.Kind == store.KindPrompt })
	if i < 0 || !slices.Equal(res.History[i].Attachments, []store.AttachmentRef{txt, img}) {
		t.Fatalf("resume's prompt entry = %+v; want it to name notes.txt and chart.png", res.History)
	}

	// The next prompt's history says what was attached to the first.
	promptDone(t, h, v, in.ID, "and now?")
	w.mu.Lock()
	hist, _ := json.Marshal(w.prompts[1]["history"])
	_, again := w.prompts[1]["attachments"]
	w.mu.Unlock()
	if !strings.Contains(string(hist), `look at these\n\n[attached: notes.txt, chart.png]`) || again {
		t.Errorf("the second prompt's history = %s (attachments sent again: %v); want the first prompt's note", hist, again)
	}
}

// TestAttachmentLimits: a file over MaxBytes (said or read), more waiting
// files than MaxFiles, more waiting bytes than MaxTotal, and a prompt
// over them are refused with an *AttachLimitError naming the flag;
// nothing of a refused prompt is recorded and its files keep waiting.
func TestAttachmentLimits(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Attach = AttachLimits{MaxBytes: 10, MaxFiles: 2, MaxTotal: 12} })
	v := viewerOf(alice)
	in, _ := h.r.Create(v, NewSession{})
	limit := func(err error) string {
		var le *AttachLimitError
		if !errors.As(err, &le) {
			return "none: " + errStr(err)
		}
		return le.Limit
	}
	_, err := h.r.Attach(t.Context(), alice, in.ID, NewAttachment{Name: "big", Size: 11, Body: strings.NewReader("01234567890")})
	if limit(err) != LimitAttachBytes || !strings.Contains(err.Error(), "big is 11 B: a file may be at most 10 B (--attach-max-bytes)") {
		t.Errorf("a file said to be over MaxBytes: %v", err)
	}
	_, err = h.r.Attach(t.Context(), alice, in.ID, NewAttachment{Name: "liar", Size: -1, Body: strings.NewReader("01234567890")})
	if limit(err) != LimitAttachBytes {
		t.Errorf("a file read over MaxBytes: %v", err)
	}
	a := upload(t, h.r, alice, in.ID, "a", []byte("0123456789"))
	_, err = h.r.Attach(t.Context(), alice, in.ID, NewAttachment{Name: "b", Size: -1, Body: strings.NewReader("0123456")})
	if limit(err) != LimitAttachTotal {
		t.Errorf("waiting bytes over MaxTotal: %v", err)
	}
	b := upload(t, h.r, alice, in.ID, "b", []byte("01"))
	_, err = h.r.Attach(t.Context(), alice, in.ID, NewAttachment{Name: "c", Size: -1, Body: strings.NewReader("x")})
	if limit(err) != LimitAttachFiles {
		t.Errorf("waiting files over MaxFiles: %v", err)
	}

	// An unknown id, or another session's file: nothing recorded.
	other, _ := h.r.Create(v, NewSession{})
	c := upload(t, h.r, alice, other.ID, "c", []byte("c"))
	for _, id := range []string{"nope", c.ID} {
		_, _, err := h.r.Prompt(v, in.ID, "hi", a.ID, id)
		var ue *UnknownAttachmentError
		if !errors.As(err, &ue) || ue.ID != id {
			t.Errorf("a prompt naming %s: %v; want an *UnknownAttachmentError", id, err)
		}
	}
	if hist := h.historyOf(in.ID); len(hist) != 0 {
		t.Fatalf("refused prompts recorded %+v", hist)
	}
	// Both waiting files go with the prompt (an id twice counts once).
	promptDone(t, h, v, in.ID, "both", a.ID, b.ID, a.ID)
	// Files sent before may be sent again (a regenerate), within the
	// limits: three files, or 13 bytes, are refused, and a refused
	// prompt's new file keeps waiting.
	d := upload(t, h.r, alice, in.ID, "d", []byte("012"))
	if _, _, err := h.r.Prompt(v, in.ID, "again", a.ID, b.ID, d.ID); limit(err) != LimitAttachFiles {
		t.Errorf("a prompt of three files: %v", err)
	}
	if _, _, err := h.r.Prompt(v, in.ID, "too much", a.ID, d.ID); limit(err) != LimitAttachTotal {
		t.Errorf("a prompt of 13 bytes: %v", err)
	}
	promptDone(t, h, v, in.ID, "regenerate", b.ID, d.ID)
	if n := len(h.historyOf(in.ID)); n != 4 {
		t.Errorf("history holds %d entries; want the two prompts and their replies", n)
	}
}

func errStr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestUnattachAndDelete: a waiting file can be taken back (deleted), a
// sent one cannot; every file goes when its session is deleted.
func TestUnattachAndDelete(t *testing.T) {
	h := newHarness(t, nil)
	v := viewerOf(alice)
	in, _ := h.r.Create(v, NewSession{})
	sent := upload(t, h.r, alice, in.ID, "sent.txt", []byte("s"))
	back := upload(t, h.r, alice, in.ID, "back.txt", []byte("b"))
	promptDone(t, h, v, in.ID, "one", sent.ID)
	if err := h.r.Unattach(t.Context(), alice, in.ID, sent.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Unattach of a sent file: %v; want ErrNotFound", err)
	}
	if err := h.r.Unattach(t.Context(), alice, in.ID, back.ID); err != nil {
		t.Fatalf("Unattach: %v", err)
	}
	if _, err := h.r.Attachment(t.Context(), alice, in.ID, back.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("a file taken back is still there: %v", err)
	}
	if _, _, err := h.r.Prompt(v, in.ID, "two", back.ID); err == nil {
		t.Errorf("a prompt sent a file taken back")
	}
	a, err := h.r.Attachment(t.Context(), alice, in.ID, sent.ID)
	if err != nil || string(a.Data) != "s" {
		t.Fatalf("Attachment = %q, %v", a.Data, err)
	}
	if err := h.r.Delete(t.Context(), alice, in.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.r.Attachment(t.Context(), alice, in.ID, sent.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("a deleted session's file: %v; want ErrNotFound", err)
	}
	if _, err := h.r.Attach(t.Context(), alice, in.ID, NewAttachment{Name: "x", Body: strings.NewReader("x")}); !errors.Is(err, ErrNotFound) {
		t.Errorf("an upload into a deleted session: %v; want ErrNotFound", err)
	}
}

// TestWorkerNotice: a worker's notice event (a file it could not take) is
// told to the viewers and kept in the history, before the reply.
func TestWorkerNotice(t *testing.T) {
	h := newHarness(t, nil)
	h.sp.events = make(chan workers.Event, 1)
	h.sp.acked = make(chan struct{}, 1)
	v := viewerOf(alice)
	in, _ := h.r.Create(v, NewSession{})
	_, start, err := h.r.Prompt(v, in.ID, "read this")
	if err != nil {
		t.Fatal(err)
	}
	start()
	h.sp.events <- workers.Event{Name: "notice", Text: "this agent cannot read PDFs: a.pdf not sent"}
	<-h.sp.acked
	close(h.sp.events)
	testkit.WaitFor(t, 15*time.Second, "turn done", func() bool { in, _ := h.r.Get(alice, in.ID); return !in.Running })
	if evs := v.ofType("notice"); len(evs) != 1 || evs[0].Payload.(map[string]any)["text"] != "this agent cannot read PDFs: a.pdf not sent" {
		t.Errorf("notice events = %v", evs)
	}
	hist := h.historyOf(in.ID)
	if len(hist) < 2 || hist[1].Kind != store.KindNotice || hist[1].Text != "this agent cannot read PDFs: a.pdf not sent" {
		t.Errorf("history = %+v; want the prompt, then the notice", hist)
	}
}
