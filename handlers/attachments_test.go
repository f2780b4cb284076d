package handlers_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/sessions"
)

// attachServer serves Attachments over e's registry as web does, for the
// principal the X-Test-User header names ("" the anonymous user, whose
// sessions e.chat() makes).
func attachServer(t *testing.T, e *env) *httptest.Server {
	r := chi.NewRouter()
	a := &handlers.Attachments{Registry: e.reg, Log: e.log}
	as := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			p := sessions.Principal{User: r.Header.Get("X-Test-User")}
			h(w, r.WithContext(handlers.WithPrincipal(r.Context(), p)))
		}
	}
	r.Post("/sessions/{id}/attachments", as(a.Upload))
	r.Delete("/sessions/{id}/attachments/{aid}", as(a.Remove))
	r.Get("/sessions/{id}/attachments/{aid}", as(a.Download))
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv
}

type httpAnswer struct {
	code int
	hdr  http.Header
	body []byte
}

func (a httpAnswer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("answer %d is not JSON: %q", a.code, a.body)
	}
	return m
}

func do(t *testing.T, method, u, user, typ string, body []byte) httpAnswer {
	t.Helper()
	req, _ := http.NewRequest(method, u, bytes.NewReader(body))
	if user != "" {
		req.Header.Set("X-Test-User", user)
	}
	if typ != "" {
		req.Header.Set("Content-Type", typ)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return httpAnswer{res.StatusCode, res.Header, b}
}

func uploadURL(srv *httptest.Server, sid, name string) string {
	return srv.URL + "/sessions/" + sid + "/attachments?name=" + url.QueryEscape(name)
}

// TestAttachmentsOverHTTP (issue 42): a file uploaded by POST goes with
// the prompt.submit that names it (the echo worker, which reads none,
// says so in a notice per file, kept in the history after the prompt);
// GET serves it back to its owner only (an image inline, anything else
// as a sandboxed download); another user gets exactly a missing file's
// answer; a file not sent is taken back by DELETE; gateway.ready tells
// the limits.
func TestAttachmentsOverHTTP(t *testing.T) {
	t.Parallel()
	e := storeEnv(t, openStore(t))
	srv := attachServer(t, e)
	cc := e.chat()
	sid := cc.create()

	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{0, 0xff}, 100)...)
	up := do(t, "POST", uploadURL(srv, sid, "photo one.png"), "", "image/png", png)
	if up.code != http.StatusCreated {
		t.Fatalf("upload: %d %s", up.code, up.body)
	}
	img := up.json(t)
	if img["name"] != "photo one.png" || img["kind"] != "image" || img["type"] != "image/png" || img["size"] != float64(len(png)) || img["id"] == "" {
		t.Fatalf("upload answered %v", img)
	}
	html := do(t, "POST", uploadURL(srv, sid, "page.html"), "", "text/html", []byte("<script>alert(1)</script>")).json(t)
	if html["kind"] != "text" || html["type"] != "text/html" {
		t.Fatalf("an HTML file: %v", html)
	}
	gone := do(t, "POST", uploadURL(srv, sid, "oops.txt"), "", "", []byte("not this one")).json(t)
	if del := do(t, "DELETE", srv.URL+"/sessions/"+sid+"/attachments/"+gone["id"].(string), "", "", nil); del.code != http.StatusNoContent {
		t.Fatalf("DELETE of a file not sent: %d %s", del.code, del.body)
	}

	res := cc.call("prompt.submit", map[string]any{"session_id": sid, "text": "what is in these?", "attachments": []string{img["id"].(string), html["id"].(string)}})
	cc.waitEvent("message.complete", sid)
	hist := cc.call("session.history", map[string]any{"session_id": sid})["entries"].([]any)
	var kinds, notices []string
	var files []any
	for _, x := range hist {
		m := x.(map[string]any)
		kinds = append(kinds, m["kind"].(string))
		if m["kind"] == "notice" {
			notices = append(notices, m["text"].(string))
		}
		if m["kind"] == "prompt" {
			files, _ = m["attachments"].([]any)
		}
	}
	if !slices.Equal(kinds, []string{"prompt", "notice", "notice", "reply"}) ||
		!slices.Equal(notices, []string{"this agent cannot read images: photo one.png not sent", "this agent cannot read text files: page.html not sent"}) {
		t.Errorf("after prompt %v the history is %v, notices %q", res, kinds, notices)
	}
	if len(files) != 2 || files[0].(map[string]any)["id"] != img["id"] || files[1].(map[string]any)["name"] != "page.html" {
		t.Errorf("the prompt entry's attachments: %v", files)
	}

	fileURL := func(m map[string]any) string {
		return srv.URL + "/sessions/" + sid + "/attachments/" + m["id"].(string)
	}
	got := do(t, "GET", fileURL(img), "", "", nil)
	if got.code != 200 || !bytes.Equal(got.body, png) || got.hdr.Get("Content-Type") != "image/png" ||
		got.hdr.Get("Content-Disposition") != `inline; filename="photo one.png"` || got.hdr.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("GET of the image: %d %v (%d bytes)", got.code, got.hdr, len(got.body))
	}
	got = do(t, "GET", fileURL(html), "", "", nil)
	if got.code != 200 || got.hdr.Get("Content-Disposition") != `attachment; filename=page.html` ||
		!strings.Contains(got.hdr.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("GET of the HTML file: %d %v", got.code, got.hdr)
	}

	// Another user: exactly as a file or session that does not exist.
	missing := do(t, "GET", srv.URL+"/sessions/"+sid+"/attachments/0123456789abcdef01234567", "bob", "", nil)
	for what, a := range map[string]httpAnswer{
		"bob's GET":         do(t, "GET", fileURL(img), "bob", "", nil),
		"bob's DELETE":      do(t, "DELETE", fileURL(img), "bob", "", nil),
		"bob's upload":      do(t, "POST", uploadURL(srv, sid, "x.txt"), "bob", "", []byte("x")),
		"a missing session": do(t, "GET", srv.URL+"/sessions/0000000000000000deadbeef/attachments/"+img["id"].(string), "bob", "", nil),
	} {
		if a.code != http.StatusNotFound || !bytes.Equal(a.body, missing.body) {
			t.Errorf("%s: %d %s; a missing file: %d %s", what, a.code, a.body, missing.code, missing.body)
		}
	}
	if m := missing.json(t); m["code"] != float64(handlers.CodeNotFound) {
		t.Errorf("404 body %v", m)
	}
	// A file sent is part of the conversation: DELETE does not take it.
	if del := do(t, "DELETE", fileURL(img), "", "", nil); del.code != http.StatusNotFound {
		t.Errorf("DELETE of a sent file: %d", del.code)
	}

	// session.search finds the prompt by a file's name.
	hits := cc.call("session.search", map[string]any{"query": "photo one"})["hits"].([]any)
	if !slices.ContainsFunc(hits, func(h any) bool {
		m := h.(map[string]any)
		return m["kind"] == "prompt" && m["seq"] == float64(1) && strings.Contains(m["snippet"].(string), "photo one.png")
	}) {
		t.Errorf("search by the file's name: %v; want the prompt", hits)
	}

	// Exported with the conversation: the Markdown lists each file under
	// its prompt, the JSON's prompt entry names them.
	exp := exportServer(t, e)
	_, _, md := exportGet(t, exp.URL+"/sessions/"+sid+"/export", "")
	for _, want := range []string{
		"what is in these?\n\nAttached:\n\n",
		"- photo one.png (image, 208 B): `sessions/" + sid + "/attachments/" + img["id"].(string) + "`\n",
		"- page.html (text, 25 B): `sessions/" + sid + "/attachments/" + html["id"].(string) + "`\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the Markdown export lacks %q:\n%s", want, md)
		}
	}
	_, _, js := exportGet(t, exp.URL+"/sessions/"+sid+"/export?format=json", "")
	var tr sessions.Transcript
	if err := json.Unmarshal([]byte(js), &tr); err != nil || len(tr.Entries) == 0 || len(tr.Entries[0].Attachments) != 2 ||
		tr.Entries[0].Attachments[0].Name != "photo one.png" || tr.Entries[0].Attachments[1].Kind != "text" {
		t.Errorf("the JSON export's prompt: %v (%v)", js, err)
	}

	// Deleted with its session.
	cc.call("session.delete", map[string]any{"session_id": sid})
	if got := do(t, "GET", fileURL(img), "", "", nil); got.code != http.StatusNotFound {
		t.Errorf("GET after session.delete: %d", got.code)
	}
}

// TestAttachmentLimitsOverHTTP: beyond --attach-max-bytes the upload
// answers 413 with code 4013 naming the flag; beyond --attach-max-files
// or --attach-max-total prompt.submit answers 4013; an unknown id
// answers -32602; gateway.ready carries the limits.
func TestAttachmentLimitsOverHTTP(t *testing.T) {
	t.Parallel()
	lim := sessions.AttachLimits{MaxBytes: 100, MaxFiles: 2, MaxTotal: 150}
	e := newEnv(t, envOpts{
		reg:  func(c *sessions.Config) { c.Attach = lim },
		chat: func(c *handlers.Chat) { c.Attach = lim },
	})
	srv := attachServer(t, e)
	cc := e.chat()
	ready, _ := cc.WaitEvent(t.Context(), "gateway.ready", "")
	if l, _ := ready["payload"].(map[string]any)["attachments"].(map[string]any); l["max_bytes"] != float64(100) || l["max_files"] != float64(2) || l["max_total"] != float64(150) {
		t.Errorf("gateway.ready: %v", ready)
	}
	sid := cc.create()
	big := do(t, "POST", uploadURL(srv, sid, "big.bin"), "", "", bytes.Repeat([]byte("x"), 101))
	if big.code != http.StatusRequestEntityTooLarge {
		t.Fatalf("an upload over the limit: %d %s", big.code, big.body)
	}
	m := big.json(t)
	data, _ := m["data"].(map[string]any)
	if m["code"] != float64(handlers.CodeAttachLimit) || m["message"] != "big.bin is 101 B: a file may be at most 100 B (--attach-max-bytes)" ||
		data["limit"] != "--attach-max-bytes" || data["max"] != float64(100) || data["name"] != "big.bin" {
		t.Errorf("the refusal: %s", big.body)
	}
	a := do(t, "POST", uploadURL(srv, sid, "a"), "", "", bytes.Repeat([]byte("a"), 100)).json(t)
	b := do(t, "POST", uploadURL(srv, sid, "b"), "", "", bytes.Repeat([]byte("b"), 50)).json(t)
	if over := do(t, "POST", uploadURL(srv, sid, "c"), "", "", []byte("c")); over.code != http.StatusRequestEntityTooLarge ||
		over.json(t)["data"].(map[string]any)["limit"] != "--attach-max-files" {
		t.Errorf("a third waiting file: %d %s", over.code, over.body)
	}
	cc.call("prompt.submit", map[string]any{"session_id": sid, "text": "both", "attachments": []string{a["id"].(string), b["id"].(string)}})
	cc.waitEvent("message.complete", sid)
	c := do(t, "POST", uploadURL(srv, sid, "c"), "", "", bytes.Repeat([]byte("c"), 60)).json(t)
	id := func(m map[string]any) string { return m["id"].(string) }
	for _, tc := range []struct {
		name  string
		files []string
		code  int
		limit string
	}{
		{"three files", []string{id(a), id(b), id(c)}, handlers.CodeAttachLimit, "--attach-max-files"},
		{"160 bytes", []string{id(a), id(c)}, handlers.CodeAttachLimit, "--attach-max-total"},
		{"an unknown id", []string{"nope"}, handlers.CodeInvalidParams, ""},
		{"an empty id", []string{""}, handlers.CodeInvalidParams, ""},
	} {
		r := cc.callRaw("prompt.submit", map[string]any{"session_id": sid, "text": "x", "attachments": tc.files})
		if errCode(r) != tc.code {
			t.Errorf("%s: %v; want code %d", tc.name, r, tc.code)
			continue
		}
		if tc.limit != "" {
			var d map[string]any
			json.Unmarshal(r["error"].(map[string]any)["data"].(json.RawMessage), &d)
			if d["limit"] != tc.limit {
				t.Errorf("%s: data %v; want limit %s", tc.name, d, tc.limit)
			}
		}
	}
	// Within the limits, a file sent before goes again (a regenerate).
	cc.call("prompt.submit", map[string]any{"session_id": sid, "text": "again", "attachments": []string{id(b), id(c)}})
	cc.waitEvent("message.complete", sid)
}

// TestLargeAttachmentReachesTheWorker: a prompt whose files make its line
// longer than a worker reads by default (1 MiB) reaches it whole, since
// the worker is told the longest line it may get (DASHGATE_MAX_LINE): the
// echo worker answers, with its notice for the file, and no error.
func TestLargeAttachmentReachesTheWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{reg: func(c *sessions.Config) {
		sp := c.Spawner.(sessions.ProcSpawner)
		sp.MaxLine = c.Attach.MaxLine(c.AgentContext)
		c.Spawner = sp
	}})
	srv := attachServer(t, e)
	cc := e.chat()
	sid := cc.create()
	big := do(t, "POST", uploadURL(srv, sid, "big.txt"), "", "text/plain", bytes.Repeat([]byte("0123456789abcdef\n"), 3<<20/17))
	if big.code != http.StatusCreated {
		t.Fatalf("upload: %d %s", big.code, big.body)
	}
	cc.call("prompt.submit", map[string]any{"session_id": sid, "text": "read it", "attachments": []string{big.json(t)["id"].(string)}})
	done := cc.waitEvent("message.complete", sid)
	if p := done["payload"].(map[string]any); p["status"] != "complete" {
		t.Fatalf("the turn ended %v", p)
	}
	if n := cc.waitEvent("notice", sid)["payload"].(map[string]any)["text"]; n != "this agent cannot read text files: big.txt not sent" {
		t.Errorf("notice %q", n)
	}
}
