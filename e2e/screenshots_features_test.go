package e2e_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// TestScreenshotsFeatures makes the README's screenshots of issue 42's
// features from a real dashgate in headless Chromium, each in a viewport
// of a fixed size (1280x800 or, said where, less) cropped to what it shows:
// attachments.png (a prompt that carried a text file and an image, the
// answer of the agent over the model stand-in, and a file waiting as a
// chip for the next message), terminal-tabs.png (the terminal pane with
// three named tabs, each having run a command) and recording-playback.png
// (a recorded terminal paused in the asciinema player). It only runs when
// asked (scripts/screenshots.sh):
//
//	DASHGATE_SCREENSHOTS=1 go test -count=1 ./e2e/ -run 'TestScreenshots'
//
// DASHGATE_SCREENSHOTS=1 writes into docs/screenshots; any other value is
// the directory to write into (relative to the repository's root). Each
// subtest may be run alone (-run TestScreenshotsFeatures/attachments).
func TestScreenshotsFeatures(t *testing.T) {
	dir := os.Getenv("DASHGATE_SCREENSHOTS")
	if dir == "" {
		t.Skip("set DASHGATE_SCREENSHOTS=1 (or a directory) to make the README's screenshots (scripts/screenshots.sh)")
	}
	if dir == "1" {
		dir = screenshotDir
	}
	if !filepath.IsAbs(dir) {
		root, err := repoRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Run("attachments", func(t *testing.T) { shootAttachments(t, dir) })
	t.Run("terminal-tabs", func(t *testing.T) { shootTerminalTabs(t, dir) })
	t.Run("recording-playback", func(t *testing.T) { shootRecordingPlayback(t, dir) })
}

// shotTab opens a tab whose viewport is 1280x800 at scale 1, whatever the
// window around it: the screenshots do not depend on the machine.
func shotTab(t *testing.T, b *browser, name string) *tab {
	t.Helper()
	tb := b.newTab(t, name)
	setViewport(t, tb, 1280, 800)
	return tb
}

// setViewport gives tb's page a viewport of w x h CSS pixels at scale 1.
func setViewport(t *testing.T, tb *tab, w, h int64) {
	t.Helper()
	if _, err := chromedp.Call(tb.ctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
		Width: w, Height: h, DeviceScaleFactor: 1,
	}); err != nil {
		t.Fatal(err)
	}
}

// saveShot writes a PNG of the smallest box around the elements the CSS
// selectors name (each the first match; pad pixels more on each side, within
// the page) into dir/name.
func saveShot(t *testing.T, tb *tab, dir, name string, pad float64, selectors ...string) {
	t.Helper()
	sels, _ := json.Marshal(selectors)
	px := strconv.FormatFloat(pad, 'f', -1, 64)
	box := mustEval[string](tb, `JSON.stringify((() => {
		let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
		for (const s of `+string(sels)+`) {
			const e = document.querySelector(s);
			if (!e) throw new Error('no element ' + s);
			const r = e.getBoundingClientRect();
			x0 = Math.min(x0, r.left + scrollX); y0 = Math.min(y0, r.top + scrollY);
			x1 = Math.max(x1, r.right + scrollX); y1 = Math.max(y1, r.bottom + scrollY);
		}
		const w = document.documentElement.scrollWidth, h = document.documentElement.scrollHeight;
		return {x: Math.max(0, x0 - `+px+`), y: Math.max(0, y0 - `+px+`),
			x1: Math.min(w, x1 + `+px+`), y1: Math.min(h, y1 + `+px+`)};
	})())`)
	var r struct{ X, Y, X1, Y1 float64 }
	if err := json.Unmarshal([]byte(box), &r); err != nil {
		t.Fatalf("%s: the box %s: %v", name, box, err)
	}
	x, y := math.Floor(r.X), math.Floor(r.Y)
	clip := &page.Viewport{X: x, Y: y, Width: math.Ceil(r.X1) - x, Height: math.Ceil(r.Y1) - y, Scale: 1}
	res, err := chromedp.Call(tb.ctx, page.CaptureScreenshot, page.CaptureScreenshotParams{
		Format: page.CaptureScreenshotFormatPng, Clip: clip,
		CaptureBeyondViewport: ptrTo(true), FromSurface: ptrTo(true),
	})
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	img, err := png.Decode(bytes.NewReader(res.Data))
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", name, err)
	}
	if b := img.Bounds(); b.Dx() < 200 || b.Dy() < 100 {
		t.Fatalf("%s is only %v", name, b)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, res.Data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%dx%d, %d KiB)", path, img.Bounds().Dx(), img.Bounds().Dy(), len(res.Data)>>10)
}

func ptrTo[T any](v T) *T { return &v }

// shootAttachments: the agent (the model stand-in answering) gets a prompt
// with a text file and an image picked with Attach; the shot is the chat
// pane with the prompt's file link and thumbnail, the answer, and one more
// file waiting as a chip under the input.
func shootAttachments(t *testing.T, dir string) {
	m := newModelServer(t)
	d := startAgent(t, m, t.TempDir(), "--llm-image-models", "fake-*")
	b := newBrowser(t)
	tb := shotTab(t, b, "dashboard")
	openDashboard(t, d, tb)

	files := t.TempDir()
	notes := "Release checklist\n- tag v1.4.0\n- update the changelog\n- announce on the list\n"
	if err := os.WriteFile(filepath.Join(files, "checklist.md"), []byte(notes), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(files, "build.log"), []byte("ok  \tgithub.com/dashgate/dashgate/...\t12.3s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(files, "sunset.png"), sunset(240, 150), 0o600); err != nil {
		t.Fatal(err)
	}
	input := chromedp.CSS(`[data-testid="attach-input"]`)
	tb.Do("pick a text file and an image", chromedp.SetUploadFiles(input, []string{filepath.Join(files, "checklist.md"), filepath.Join(files, "sunset.png")}))
	tb.mustWaitJS(20*time.Second, "two chips uploaded", readyChips("checklist.md", "sunset.png")+` === 2`, chipsState)

	answer := "The checklist has three steps left: **tag v1.4.0**, update the changelog and announce it on the list.\n\n" +
		"The picture is a sunset: a yellow sun low over dark hills under an orange-to-violet sky."
	m.then(reply(answer))
	sendChat(t, tb, "What is left on this checklist, and what is in the picture?")
	tb.mustWaitJS(20*time.Second, "the answer shown", `[...document.querySelectorAll('[data-testid="chat-log"] [data-testid="chat-message"][data-role="assistant"]')].some(e => e.textContent.includes('a sunset') && e.dataset.streaming !== 'true')`, dashboardState)
	if reqs := m.got(); len(reqs) != 1 {
		t.Fatalf("the model server got %d requests, want 1", len(reqs))
	} else if msgs := reqs[0].Messages; len(msgs) == 0 {
		t.Fatal("the model server got no messages")
	} else if parts, _ := msgs[len(msgs)-1].Content.([]any); len(parts) != 2 {
		t.Fatalf("the model server got the user message %#v; want the text with the file and the image", msgs[len(msgs)-1].Content)
	}
	tb.mustWaitJS(20*time.Second, "the prompt's file link and loaded thumbnail",
		promptFiles+` === `+js(`["text:checklist.md","image:sunset.png:thumb=240"]`), chipsState)

	// One more file picked for the next message: the chip under the input.
	tb.Do("pick a file for the next message", chromedp.SetUploadFiles(input, []string{filepath.Join(files, "build.log")}))
	tb.mustWaitJS(20*time.Second, "its chip uploaded", readyChips("build.log")+` === 1`, chipsState)
	tb.Do("type the next message", chromedp.SendKeys(chromedp.CSS(`[data-testid="chat-input"]`), "Did the build pass?"))
	tb.Do("blur the input", chromedp.Evaluate[chromedp.Void](`document.activeElement.blur()`))
	saveShot(t, tb, dir, "attachments.png", 0, `.chat-pane`)
}

// sunset is a small picture to attach: a sky from orange to violet, a sun
// and dark hills.
func sunset(w, h int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		f := float64(y) / float64(h)
		sky := color.RGBA{uint8(250 - 130*f), uint8(150 - 110*f), uint8(60 + 100*f), 255}
		for x := range w {
			c := sky
			dx, dy := float64(x-w/2), float64(y-h*3/5)
			if dx*dx+dy*dy < float64(h*h)/25 {
				c = color.RGBA{255, 220, 90, 255}
			}
			if float64(y) > float64(h)*0.72+10*math.Sin(float64(x)/25) {
				c = color.RGBA{40, 30, 60, 255}
			}
			img.Set(x, y, c)
		}
	}
	var b bytes.Buffer
	png.Encode(&b, img)
	return b.Bytes()
}

// shootTerminalTabs: the terminal pane's first tab and two more opened
// with +, each renamed and each having run a command; the shot is the
// terminal pane, its last tab shown.
func shootTerminalTabs(t *testing.T, dir string) {
	d := startDashgate(t)
	b := newBrowser(t)
	// A lower window than the others: the pane is shown whole, without a
	// tall empty terminal below the output.
	tb := shotTab(t, b, "dashboard")
	setViewport(t, tb, 1280, 440)
	openDashboard(t, d, tb)
	tb.mustWaitJS(20*time.Second, "one tab, its terminal up", tabsReady(1), tabsState)

	for i, c := range []struct{ name, cmd, want string }{
		{"shell", `echo "$((6*7)) is the answer"`, "42 is the answer"},
		{"build", `for s in fetch compile test; do echo "$s: ok"; done`, "test: ok"},
		{"logs", `printf 'GET /items/%s 200\n' 1 2 3`, "GET /items/3 200"},
	} {
		if i > 0 {
			tb.Do("press +", chromedp.Click(chromedp.CSS(byTestID("terminal-tab-new"))))
			tb.mustWaitJS(20*time.Second, fmt.Sprintf("%d tabs, each terminal up, the new one shown", i+1),
				tabsReady(i+1)+fmt.Sprintf(` && window.dashgate.terminalTabs()[%d].active`, i), tabsState)
		}
		id := termTabs(tb)[i].ID
		tb.Do("double-click the tab", chromedp.DoubleClick(chromedp.CSS(fmt.Sprintf(`[data-testid="terminal-tab"][data-terminal-id=%q] [data-testid="terminal-tab-select"]`, id))))
		tb.mustWaitJS(20*time.Second, "the rename field", visible(byTestID("terminal-tab-rename")), tabsState)
		// Typed as keys that carry their text (typeKeys): SendKeys's Enter
		// would also reach the terminal focused after the rename, as a
		// keypress, and print an empty prompt there.
		tb.Do("name it "+c.name, chromedp.Focus(chromedp.CSS(byTestID("terminal-tab-rename"))), typeKeys(c.name+"\r"))
		tb.mustWaitJS(20*time.Second, "the tab is called "+c.name, fmt.Sprintf(`window.dashgate.terminalTabs()[%d].name === %s`, i, js(c.name)), tabsState)
		typeInTerminal(t, tb, c.cmd)
		tb.mustWaitJS(20*time.Second, "the output in tab "+c.name, tabHas(id, c.want), tabsState)
	}
	tb.Do("blur the terminal", chromedp.Evaluate[chromedp.Void](`document.activeElement.blur()`))
	saveShot(t, tb, dir, "terminal-tabs.png", 0, `.terminal-pane`)
}

// shootRecordingPlayback: with --record-terminals, a few commands typed in
// the dashboard's terminal, the terminal closed with its session, its
// recording opened from the owner's /recordings and played to its end,
// then paused just before it with the control bar shown; the shot is the
// player page's header, the recording's line and the player.
func shootRecordingPlayback(t *testing.T, dir string) {
	d := startDashgate(t, "--record-terminals")
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	// A low window, so the recorded terminal has few rows (about 20) and
	// its playback is not a tall, mostly empty picture.
	setViewport(t, tb, 1280, 400)
	sid := openDashboard(t, d, tb)
	tb.mustWaitJS(20*time.Second, "the terminal says it is recorded",
		`document.querySelector('[data-testid="terminal-recorded"]')?.checkVisibility() === true`, dashboardState)

	for _, c := range []struct{ cmd, want string }{
		{`echo "hello from a recorded terminal"`, "hello from a recorded terminal"},
		{`for i in 1 2 3; do echo "step $i of 3"; done`, "step 3 of 3"},
		{`printf 'total: %d\n' $((6*7))`, "total: 42"},
	} {
		typeInTerminal(t, tb, c.cmd)
		if _, err := waitTerminalOutput(t, tb, c.cmd, exactly(c.want), 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// Closed with its session (not by exit: its last frame is the prompt).
	tb.Do("close the session", chromedp.Click(chromedp.CSS(`[data-testid="session-item"][data-session-id=`+js(sid)+`] [data-testid="session-close"]`)))
	closed, ok := d.waitLog(20*time.Second, func(r logRecord) bool {
		return r.Msg() == "worker closed" && r.Str("kind") == "pty" && r.Str("sid") == sid
	})
	if !ok || closed.Str("recording") == "" {
		t.Fatalf("no worker closed record naming the recording of %s's terminal:\n%s", sid, d.logText())
	}
	file := filepath.Base(closed.Str("recording"))

	// The player fits the terminal to the page's width: a page narrower
	// than the dashboard keeps its font at a usual size.
	setViewport(t, tb, 960, 800)
	tb.Do("open your recordings", chromedp.Navigate(d.URL("/recordings")))
	tb.mustWaitJS(20*time.Second, "the owner's list has it", exists(recordingRow(file)), recordingsState)
	tb.Do("play it", chromedp.Click(chromedp.CSS(recordingRow(file)+` [data-testid="recording-play"]`)))
	tb.mustWaitJS(30*time.Second, "the player played it to its end",
		`document.querySelector('[data-testid="player"]')?.dataset.state === 'ended' && `+playerShows(`total: 42`), recordingsState)
	if got := mustEval[string](tb, `document.querySelector('[data-testid="player"]').innerText`); !strings.Contains(got, "hello from a recorded terminal") {
		t.Fatalf("the player shows %q", got)
	}
	// Paused a moment before the end, as a person watching it would leave
	// it: the control bar then shows the time and the progress (at the
	// end it shows 0 and an empty bar).
	tb.Do("seek to just before the end and pause", chromedp.Evaluate[chromedp.Void](`(async () => {
		const p = window.dashgatePlayer;
		await p.seek((await p.getDuration()) * 0.99);
		await p.pause();
	})()`))
	tb.mustWaitJS(20*time.Second, "the output drawn after the seek", playerShows(`total: 42`), recordingsState)
	// The control bar (time, progress) shows while the mouse moves over
	// the player and fades a moment after: move it, wait for the bar, take
	// the shot, and take it again should the bar have faded meanwhile (a
	// loaded machine).
	const hud = `!!document.querySelector('.ap-wrapper.ap-hud')`
	for try := 1; ; try++ {
		hoverPlayer(t, tb, try)
		tb.mustWaitJS(20*time.Second, "the player's control bar shown", hud, recordingsState)
		saveShot(t, tb, dir, "recording-playback.png", 12, `.recordings-head`, `[data-testid="player-meta"]`, `[data-testid="player"]`)
		if mustEval[bool](tb, hud) {
			break
		}
		if try == 3 {
			t.Fatal("the player's control bar faded before each of 3 screenshots")
		}
	}
}

// hoverPlayer moves the mouse to a point over the player (a different one
// each try: a move to where the mouse already is may not count).
func hoverPlayer(t *testing.T, tb *tab, try int) {
	t.Helper()
	box := mustEval[string](tb, `JSON.stringify(document.querySelector('[data-testid="player"]').getBoundingClientRect())`)
	var r struct{ X, Y, Width, Height float64 }
	if err := json.Unmarshal([]byte(box), &r); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(tb.ctx, input.DispatchMouseEvent, input.DispatchMouseEventParams{
		Type: input.DispatchMouseEventTypeMouseMoved, X: r.X + r.Width/2 + float64(try*7), Y: r.Y + r.Height/3,
	}); err != nil {
		t.Fatal(err)
	}
}
