package e2e_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Files into the chat (issue 42), in Chromium, against the agent and the
// model stand-in (agent_test.go's modelServer).

// chipsState describes the attachment tray and the prompts' files for
// failure messages.
const chipsState = `JSON.stringify({
	chips: [...document.querySelectorAll('[data-testid="attach-chip"]')].map(c => c.dataset.state + ':' + c.textContent),
	error: document.querySelector('[data-testid="attach-error"]')?.textContent,
	files: [...document.querySelectorAll('[data-testid="chat-log"] [data-testid="attachment"]')].map(a => a.dataset.kind + ':' + a.textContent),
	entries: window.dashgate && window.dashgate.entries(),
})`

// readyChips is the count of uploaded chips whose name is one of names.
func readyChips(names ...string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('[data-testid="attach-chip"][data-state="ready"]')].filter(c => %s.includes(c.querySelector('.attach-name').textContent)).length`,
		js(strings.Join(names, "\x00"))+`.split('\x00')`)
}

// promptFiles is what the prompt entries of the chat log show of their
// files: "kind:name" each, and whether each image's thumbnail loaded.
const promptFiles = `JSON.stringify([...document.querySelectorAll('[data-testid="chat-log"] [data-testid="entry"][data-kind="prompt"] [data-testid="attachment"]')].map(a =>
	a.dataset.kind + ':' + a.querySelector('.attachment-name').textContent +
	(a.querySelector('[data-testid="attachment-thumb"]') ? ':thumb=' + a.querySelector('[data-testid="attachment-thumb"]').naturalWidth : '')))`

// TestChatAttachments: a text file and an image picked with the file
// input show as chips under the input, go with the prompt (the model
// server gets the text inlined with its name and the image as an
// image_url data URL), and show in the history as a link and a
// thumbnail, after a reload too (and the chips of files not sent yet come
// back after a reload); search finds the prompt by a file's
// name; a file over --attach-max-bytes is refused before it is sent, in
// the server's words; a dropped and a pasted file become chips, and a
// removed chip's upload is taken back; the files go with their session.
func TestChatAttachments(t *testing.T) {
	m := newModelServer(t)
	dir := t.TempDir()
	d := startAgent(t, m, dir, "--llm-image-models", "fake-*", "--attach-max-bytes", "64KiB")
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	sid := openDashboard(t, d, tb)

	files := t.TempDir()
	notes := "alpha beta\n```go\nx := 1\n```\n"
	img := image.NewRGBA(image.Rect(0, 0, 3, 2))
	img.Set(1, 1, color.RGBA{200, 10, 10, 255})
	var pic bytes.Buffer
	png.Encode(&pic, img)
	for name, data := range map[string][]byte{
		"notes.txt":   []byte(notes),
		"pixel.png":   pic.Bytes(),
		"too-big.bin": bytes.Repeat([]byte{0, 1}, 50<<10), // 100 KiB
	} {
		if err := os.WriteFile(filepath.Join(files, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	input := chromedp.CSS(`[data-testid="attach-input"]`)

	// Picked: two chips, uploaded.
	tb.Do("pick two files", chromedp.SetUploadFiles(input, []string{filepath.Join(files, "notes.txt"), filepath.Join(files, "pixel.png")}))
	tb.mustWaitJS(15*time.Second, "two chips uploaded", readyChips("notes.txt", "pixel.png")+` === 2`, chipsState)
	// Not sent yet, they count against the limits: a reload shows them
	// again, ready to send or take back (a new-user trial found them
	// gone from the page and still counted).
	tb.Do("reload with the files waiting", chromedp.Reload())
	waitDashboard(t, tb)
	tb.mustWaitJS(15*time.Second, "the two chips back after the reload", readyChips("notes.txt", "pixel.png")+` === 2 && `+
		`document.querySelectorAll('[data-testid="attach-chip"]').length === 2`, chipsState)

	// Over the limit: refused before anything is sent, as the server says it.
	tb.Do("pick a file over the limit", chromedp.SetUploadFiles(input, []string{filepath.Join(files, "too-big.bin")}))
	const refusal = "too-big.bin is 100 KiB: a file may be at most 64 KiB (--attach-max-bytes)"
	tb.mustWaitJS(15*time.Second, "the refusal", `document.querySelector('[data-testid="attach-error"]').textContent === `+js(refusal)+
		` && document.querySelector('[data-testid="attach-error"]').checkVisibility()`, chipsState)
	if n := mustEval[int](tb, `document.querySelectorAll('[data-testid="attach-chip"]').length`); n != 2 {
		t.Errorf("%d chips after the refused file; want the two", n)
	}

	// Sent with the prompt: the model server gets both.
	m.then(reply("I see a note and a picture."))
	sendChat(t, tb, "what are these?")
	waitAssistant(t, tb, "I see a note and a picture.", 1)
	reqs := m.got()
	if len(reqs) != 1 {
		t.Fatalf("the model server got %d requests", len(reqs))
	}
	msgs := reqs[0].Messages
	parts, _ := msgs[len(msgs)-1].Content.([]any)
	wantText := "what are these?\n\nnotes.txt:\n````\nalpha beta\n```go\nx := 1\n```\n````"
	wantURL := "data:image/png;base64," + base64.StdEncoding.EncodeToString(pic.Bytes())
	if len(parts) != 2 || parts[0].(map[string]any)["text"] != wantText ||
		parts[1].(map[string]any)["image_url"].(map[string]any)["url"] != wantURL {
		t.Fatalf("the model server got the user message %#v;\nwant the text %q and the image %q", msgs[len(msgs)-1].Content, wantText, wantURL[:60]+"…")
	}
	tb.mustWaitJS(15*time.Second, "the chips gone once sent", `document.querySelectorAll('[data-testid="attach-chip"]').length === 0 && document.querySelector('[data-testid="attach-chips"]').hidden`, chipsState)

	// In the history: a link and a thumbnail, live and after a reload.
	want := `["text:notes.txt","image:pixel.png:thumb=3"]`
	tb.mustWaitJS(15*time.Second, "the prompt's files shown", promptFiles+` === `+js(want), chipsState)
	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	tb.mustWaitJS(15*time.Second, "the prompt's files after a reload", promptFiles+` === `+js(want), chipsState)
	href := mustEval[string](tb, `document.querySelector('[data-testid="attachment"][data-kind="text"]').href`)
	if got := mustEval[string](tb, `fetch(`+js(href)+`).then(r => r.status + ' ' + r.headers.get('content-disposition')).then(s => s)`); got != `200 attachment; filename=notes.txt` {
		t.Errorf("the text file's link answers %q", got)
	}
	if got := mustEval[string](tb, `fetch(`+js(href)+`).then(r => r.text())`); got != notes {
		t.Errorf("the text file's link gives %q", got)
	}

	// Search finds the prompt by a file's name.
	tb.Do("search pixel", chromedp.SendKeys(chromedp.CSS(`[data-testid="search-input"]`), "pixel\r"))
	tb.mustWaitJS(15*time.Second, "a search hit", `[...document.querySelectorAll('[data-testid="search-hit"]')].some(h => h.textContent.includes('pixel.png'))`,
		`document.querySelector('[data-testid="search-results"]').outerHTML`)

	// Dropped and pasted files become chips; a removed one is taken back.
	tb.Do("drop a file and paste an image", chromedp.Evaluate[chromedp.Void](`(() => {
		const drop = new DataTransfer();
		drop.items.add(new File(['dropped words'], 'dropped.txt', {type: 'text/plain'}));
		const pane = document.querySelector('.chat-pane');
		pane.dispatchEvent(new DragEvent('dragenter', {dataTransfer: drop, bubbles: true, cancelable: true}));
		pane.dispatchEvent(new DragEvent('drop', {dataTransfer: drop, bubbles: true, cancelable: true}));
		const paste = new DataTransfer();
		paste.items.add(new File([Uint8Array.from(atob(`+js(base64.StdEncoding.EncodeToString(pic.Bytes()))+`), c => c.charCodeAt(0))], 'image.png', {type: 'image/png'}));
		document.querySelector('[data-testid="chat-input"]').dispatchEvent(new ClipboardEvent('paste', {clipboardData: paste, bubbles: true, cancelable: true}));
	})()`))
	// The pasted image is named for when it was pasted (browsers call
	// every pasted image image.png).
	tb.mustWaitJS(15*time.Second, "the dropped and the pasted file uploaded", readyChips("dropped.txt")+` === 1 && `+
		`[...document.querySelectorAll('[data-testid="attach-chip"][data-state="ready"] .attach-name')].some(n => /^pasted-\d{8}-\d{6}\.png$/.test(n.textContent))`, chipsState)
	if mustEval[bool](tb, `document.querySelector('.chat-pane').classList.contains('drop-target')`) {
		t.Errorf("the chat pane is still marked as a drop target after the drop")
	}
	dropped := mustEval[string](tb, `[...document.querySelectorAll('[data-testid="attach-chip"]')].find(c => c.textContent.includes('dropped.txt')).dataset.id`)
	droppedURL := "sessions/" + sid + "/attachments/" + dropped
	if got := mustEval[int](tb, `fetch(`+js(droppedURL)+`).then(r => r.status)`); got != 200 {
		t.Fatalf("the dropped file's upload answers %d", got)
	}
	tb.Do("remove the dropped file's chip", chromedp.Click(chromedp.CSS(`[data-testid="attach-chip"][data-id=`+js(dropped)+`] [data-testid="attach-remove"]`)))
	tb.mustWaitJS(15*time.Second, "the removed file deleted", `fetch(`+js(droppedURL)+`).then(r => r.status === 404)`, chipsState)

	// The session's files go with it.
	pixel := mustEval[string](tb, `document.querySelector('[data-testid="attachment"][data-kind="image"]').href`)
	if _, err := eval[any](tb, `window.dashgate.call('session.delete', {session_id: `+js(sid)+`})`); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{href, pixel} {
		if got := mustEval[int](tb, `fetch(`+js(u)+`).then(r => r.status)`); got != 404 {
			t.Errorf("%s after session.delete answers %d; want 404", u, got)
		}
	}
}

// TestChatAttachmentsToACPAgent: files picked in the dashboard reach an
// ACP agent (the test agent behind dashgate's bridge, advertising image
// and embeddedContext) as an embedded text resource and an image block;
// a PDF, which it cannot take, is said in the chat before its reply,
// after a reload too.
func TestChatAttachmentsToACPAgent(t *testing.T) {
	agent := buildAgent(t, "github.com/dashgate/dashgate/internal/testkit/acpagent")
	d := startDashgate(t, "--agent", "caps=env ACPTEST_CAPS=image,embedded "+agent)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)

	files := t.TempDir()
	img := image.NewRGBA(image.Rect(0, 0, 2, 2))
	var pic bytes.Buffer
	png.Encode(&pic, img)
	for name, data := range map[string][]byte{
		"notes.md":   []byte("# Notes\n"),
		"pixel.png":  pic.Bytes(),
		"report.pdf": []byte("%PDF-1.7\n%fake\n"),
	} {
		if err := os.WriteFile(filepath.Join(files, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tb.Do("pick three files", chromedp.SetUploadFiles(chromedp.CSS(`[data-testid="attach-input"]`),
		[]string{filepath.Join(files, "notes.md"), filepath.Join(files, "pixel.png"), filepath.Join(files, "report.pdf")}))
	tb.mustWaitJS(15*time.Second, "three chips uploaded", readyChips("notes.md", "pixel.png", "report.pdf")+` === 3`, chipsState)
	sendChat(t, tb, "blocks")

	id := func(kind string) string {
		return mustEval[string](tb, `document.querySelector('[data-testid="chat-log"] [data-testid="attachment"][data-kind=`+js(kind)+`]')?.dataset.id ?? ''`)
	}
	tb.mustWaitJS(15*time.Second, "the prompt's files shown", `document.querySelectorAll('[data-testid="chat-log"] [data-testid="attachment"]').length === 3`, chipsState)
	want := "text(blocks) | resource(attachment://" + id("text") + "/notes.md,text/markdown,# Notes\n) | image(image/png," +
		fmt.Sprint(base64.StdEncoding.EncodedLen(pic.Len())) + ")"
	const notice = "this agent cannot read PDFs: report.pdf not sent"
	check := func(when string) {
		t.Helper()
		tb.mustWaitJS(30*time.Second, when+": the agent's reply", `[...document.querySelectorAll('`+replyEntry+` .msg:not([data-streaming="true"])')].some(m => m.textContent.includes('resource(attachment://'))`, chipsState)
		got := mustEval[string](tb, `[...document.querySelectorAll('`+replyEntry+` .msg')].map(m => m.textContent).join('\n')`)
		if strings.TrimSpace(got) != strings.TrimSpace(want) {
			t.Errorf("%s: the agent says its prompt held\n %q\nwant\n %q", when, got, want)
		}
		order := mustEval[[]string](tb, `[...document.querySelectorAll('[data-testid="chat-log"] [data-testid="entry"]')].map(e => e.dataset.kind + (e.dataset.kind === 'notice' ? ':' + e.textContent : ''))`)
		i := slices.IndexFunc(order, func(s string) bool { return strings.HasPrefix(s, "notice:") && strings.Contains(s, notice) })
		r := slices.Index(order, "reply")
		if i < 0 || r < 0 || i > r {
			t.Errorf("%s: the entries are %q; want the notice %q before the reply", when, order, notice)
		}
	}
	check("live")
	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	check("after a reload")
}
