package e2e_test

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// dropFile drops a file named name holding text on the terminal, as a
// drag from the desktop does (a DataTransfer with the File).
func dropFile(tb *tab, name, text string) {
	tb.Do("drop "+name+" on the terminal", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => {
		const dt = new DataTransfer();
		dt.items.add(new File([%s], %s, {type: 'text/plain'}));
		const el = document.querySelector('[data-testid="terminal"]');
		for (const type of ['dragenter', 'dragover', 'drop']) {
			el.dispatchEvent(new DragEvent(type, {dataTransfer: dt, bubbles: true, cancelable: true}));
		}
	})()`, js(text), js(name))))
}

const transferText = `document.querySelector('[data-testid="terminal-transfer-text"]').textContent`

// A file dropped on alice's terminal lands in her shell's directory as
// hers; a name that would leave it and a directory she may not write are
// refused, nothing written; Download gives her own file and refuses what
// her account cannot read (issue 42).
func TestTerminalFilesAsUnixAccount(t *testing.T) {
	alice := makeUnixUser(t, "alice")
	u := startUnixUsers(t, []string{alice.Name}, nil)
	b := newBrowser(t)
	tb := b.newTab(t, alice.Name)
	tb.Do("open alice's dashboard", chromedp.Navigate(u.URL("/?token="+url.QueryEscape(u.tokens[alice.Name]))))
	waitDashboard(t, tb)
	sid := currentSession(t, tb)

	drop := filepath.Join(alice.Home, "drop")
	typeInTerminal(t, tb, "mkdir -p ~/drop && cd ~/drop && pwd")
	if _, err := waitTerminalOutput(t, tb, "mkdir -p ~/drop && cd ~/drop && pwd", exactly(drop), 15*time.Second); err != nil {
		t.Fatal(err)
	}
	const body = "hello from the browser\n"
	dropFile(tb, "hello.txt", body)
	tb.mustWaitJS(15*time.Second, "the upload said done", transferText+` === `+js("Uploaded "+filepath.Join(drop, "hello.txt")+" (23 B)."), transferText)
	got, err := os.ReadFile(filepath.Join(drop, "hello.txt"))
	if err != nil || string(got) != body {
		t.Fatalf("alice's uploaded file: %q, %v; want %q", got, err, body)
	}
	st, _ := os.Stat(filepath.Join(drop, "hello.txt"))
	if sys := st.Sys().(*syscall.Stat_t); int(sys.Uid) != int(alice.UID) {
		t.Errorf("the uploaded file is uid %d's, want alice's %d", sys.Uid, alice.UID)
	}

	// The same name again: kept, not replaced.
	dropFile(tb, "hello.txt", "other")
	tb.mustWaitJS(15*time.Second, "a second hello.txt refused", transferText+`.includes('already exists')`, transferText)
	if got, _ := os.ReadFile(filepath.Join(drop, "hello.txt")); string(got) != body {
		t.Errorf("a refused upload replaced the file: %q", got)
	}

	// A directory alice may not write: the kernel's refusal, nothing there.
	typeInTerminal(t, tb, "cd /etc && pwd")
	if _, err := waitTerminalOutput(t, tb, "cd /etc && pwd", exactly("/etc"), 15*time.Second); err != nil {
		t.Fatal(err)
	}
	dropFile(tb, "dashgate-upload-test.txt", "x")
	tb.mustWaitJS(15*time.Second, "the upload into /etc refused", transferText+`.includes('permission denied')`, transferText)
	if _, err := os.Stat("/etc/dashgate-upload-test.txt"); err == nil {
		os.Remove("/etc/dashgate-upload-test.txt")
		t.Errorf("alice's upload into /etc was written")
	}

	// A name that would leave the directory: 400 before anything runs.
	req, err := http.NewRequest(http.MethodPost, u.URL("/sessions/"+sid+"/terminal/files?name=..%2Fescape.txt"), strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+u.tokens[alice.Name])
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Errorf("upload named ../escape.txt: %s, want 400", res.Status)
	}

	// Download: her file by its absolute path; /etc/shadow refused.
	download := func(path string) {
		tb.Do("download "+path, chromedp.Click(chromedp.CSS(byTestID("terminal-download-open"))),
			chromedp.SetValue(chromedp.CSS(byTestID("terminal-download-path")), path),
			chromedp.Click(chromedp.CSS(byTestID("terminal-download-go"))))
	}
	download(filepath.Join(drop, "hello.txt"))
	tb.mustWaitJS(15*time.Second, "her file downloaded", transferText+` === 'Downloaded hello.txt (23 B).'`, transferText)
	tb.Do("close the download row", chromedp.Evaluate[chromedp.Void](`document.querySelector('[data-testid="terminal-download"]').hidden || document.querySelector('[data-testid="terminal-download-close"]').click()`))
	download("/etc/shadow")
	tb.mustWaitJS(15*time.Second, "/etc/shadow refused", transferText+`.startsWith('Not downloaded: ') && `+transferText+`.includes('permission denied')`, transferText)
}
