package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/dashgate/dashgate/internal/testkit"
)

// browser is one headless Chromium with a fresh profile, owned by one test.
// Its first tab stays on about:blank (cancelling it would end the browser);
// the test works in tabs from newTab.
type browser struct {
	t      *testing.T
	ctx    context.Context // the first tab: the browser's root context
	cancel context.CancelFunc
	dir    string // --user-data-dir
	output testkit.LogBuffer
	once   sync.Once // close runs once (a test may close the browser before its cleanup)
}

// newBrowser starts Chromium and registers its shutdown (and, on failure,
// the browser's own output as an artifact).
func newBrowser(t *testing.T) *browser {
	t.Helper()
	requireChromium(t)
	b := &browser{t: t, dir: t.TempDir()}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		// Not asked for by the brief, but keep timers of a tab that is not
		// in front running at full speed (the admin test has two tabs), and
		// keep Chromium off the network and away from the small /dev/shm of
		// containers.
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("no-proxy-server", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.UserDataDir(b.dir),
		chromedp.WindowSize(1280, 800),
		chromedp.CombinedOutput(&b.output),
		chromedp.Env(testkit.CleanEnv()...),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	b.ctx = ctx
	b.cancel = func() { cancel(); cancelAlloc() }
	t.Cleanup(b.close)
	// The first Do on the root context starts the browser, bound to ctx.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v\n%s", err, b.output.String())
	}
	return b
}

// close stops the browser gracefully, then makes sure none of its processes
// remain (a profile given with --user-data-dir is not cleaned up by chromedp).
// Later calls do nothing.
func (b *browser) close() { b.once.Do(b.closeNow) }

func (b *browser) closeNow() {
	t := b.t
	if t.Failed() {
		writeArtifact(t, "chromium-output.log", []byte(b.output.String()))
	}
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Cancel(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("closing chromium: %v", err)
	}
	b.cancel()
	// Chromium's helpers may outlive its main process for a moment; they
	// are reparented to us (a subreaper): wait for them, reaping.
	want := "--user-data-dir=" + b.dir
	ours := func() []testkit.Proc {
		all, _ := testkit.Procs()
		var out []testkit.Proc
		for _, p := range all {
			if cl, err := testkit.Cmdline(p.PID); err == nil && !p.Dead() && strings.Contains(cl, want) {
				out = append(out, p)
			}
		}
		return out
	}
	if !testkit.Until(5*time.Second, func() bool { testkit.ReapZombieChildren(); return len(ours()) == 0 }) {
		for _, p := range ours() {
			t.Logf("chromium process %d still running after the browser closed; killing it", p.PID)
			syscall.Kill(p.PID, syscall.SIGKILL)
		}
		testkit.Until(2*time.Second, func() bool { testkit.ReapZombieChildren(); return len(ours()) == 0 })
	}
}

// tab is one page of the browser.
type tab struct {
	t       *testing.T
	name    string
	ctx     context.Context
	cancel  context.CancelFunc
	closed  bool
	console testkit.LogBuffer
}

// newTab opens a tab. On failure, its screenshot and console are saved as
// artifacts (before the tab closes: cleanups run last-in first-out).
// listeners also get the tab's events (the rules of chromedp.WithListener
// hold for them).
func (b *browser) newTab(t *testing.T, name string, listeners ...func(ev any)) *tab {
	t.Helper()
	tb := &tab{t: t, name: name}
	opts := []chromedp.ContextOption{chromedp.WithListener(tb.listen)}
	for _, fn := range listeners {
		opts = append(opts, chromedp.WithListener(fn))
	}
	tb.ctx, tb.cancel = chromedp.NewContext(b.ctx, opts...)
	if err := chromedp.Do(tb.ctx); err != nil {
		t.Fatalf("open tab %s: %v", name, err)
	}
	// The suite's colours are the dark theme's, as a dark system shows it
	// (headless Chromium reports light); TestThemeFollowsSystemAndIsRemembered
	// emulates each scheme itself.
	emulateScheme(t, tb, "dark")
	t.Cleanup(func() {
		if tb.closed {
			return
		}
		if t.Failed() {
			tb.saveArtifacts()
		}
		tb.cancel()
	})
	return tb
}

// listen records the page's console and uncaught exceptions. It runs in the
// tab's event loop: no command, return fast.
func (tb *tab) listen(ev any) {
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		var parts []string
		for _, a := range ev.Args {
			switch {
			case len(a.Value) > 0:
				parts = append(parts, string(a.Value))
			case a.Description != "":
				parts = append(parts, a.Description)
			default:
				parts = append(parts, string(a.Type))
			}
		}
		fmt.Fprintf(&tb.console, "%s console.%s: %s\n", time.Now().Format("15:04:05.000"), ev.Type, strings.Join(parts, " "))
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		text := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			text += " " + d.Exception.Description
		}
		fmt.Fprintf(&tb.console, "%s exception: %s (%s:%d)\n", time.Now().Format("15:04:05.000"), text, d.URL, d.LineNumber+1)
	}
}

func (tb *tab) saveArtifacts() {
	ctx, cancel := context.WithTimeout(tb.ctx, 10*time.Second)
	defer cancel()
	if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		writeArtifact(tb.t, tb.name+".png", png)
	} else {
		tb.t.Logf("screenshot of tab %s: %v", tb.name, err)
	}
	if s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.dashgate ? window.dashgate.terminalText() : ''`)); err == nil && s != "" {
		writeArtifact(tb.t, tb.name+".terminal.txt", []byte(s+"\n"))
	}
	if c := tb.console.String(); c != "" {
		writeArtifact(tb.t, tb.name+".console.log", []byte(c))
	}
}

// Close closes the tab now, as a person closing it would (its sockets go
// away with it).
func (tb *tab) Close() {
	tb.t.Helper()
	if tb.closed {
		return
	}
	if tb.t.Failed() {
		tb.saveArtifacts()
	}
	tb.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- chromedp.Cancel(tb.ctx) }()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			tb.t.Fatalf("close tab %s: %v", tb.name, err)
		}
	case <-ctx.Done():
		tb.t.Fatalf("close tab %s: not closed within 10s", tb.name)
	}
}

// Do runs actions in the tab, bounded by 20 s; it fails the test on error.
func (tb *tab) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		tb.t.Fatalf("%s (tab %s): %v", what, tb.name, err)
	}
}

// eval evaluates a JavaScript expression in the tab.
func eval[T any](tb *tab, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(tb.ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}

// mustEval is eval that fails the test on error.
func mustEval[T any](tb *tab, expr string) T {
	tb.t.Helper()
	v, err := eval[T](tb, expr)
	if err != nil {
		tb.t.Fatalf("evaluate %s (tab %s): %v", expr, tb.name, err)
	}
	return v
}

// waitJS polls the boolean expression until it is true or
// timeout passes. Evaluation errors (a navigation in progress, the page not
// ready) count as false. On timeout it returns an error naming what, the
// last evaluation error and the value of diag (a JavaScript expression
// describing the state, may be "").
func (tb *tab) waitJS(timeout time.Duration, what, expr, diag string) error {
	var lastErr error
	ok := testkit.Until(timeout, func() bool {
		v, err := eval[bool](tb, expr)
		lastErr = err
		return err == nil && v
	})
	if ok {
		return nil
	}
	msg := fmt.Sprintf("%s: not true within %v: %s", what, timeout, expr)
	if lastErr != nil {
		msg += fmt.Sprintf(" (last error: %v)", lastErr)
	}
	if diag != "" {
		if s, err := eval[string](tb, diag); err == nil {
			msg += "\nstate: " + s
		}
	}
	return fmt.Errorf("%w: %s", errTimeout, msg)
}

// mustWaitJS is waitJS that fails the test.
func (tb *tab) mustWaitJS(timeout time.Duration, what, expr, diag string) {
	tb.t.Helper()
	if err := tb.waitJS(timeout, what, expr, diag); err != nil {
		tb.t.Fatal(err)
	}
}
