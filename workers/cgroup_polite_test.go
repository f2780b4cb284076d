package workers

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// TestCgroupCloseSignalsWhatLeftPolitely: a close in cgroup mode looks for
// what left the cgroup once the cgroup is empty (one read of /proc per
// close), and sends what it finds there the same polite signal as the
// members: a terminal's escapee that ends on SIGHUP, and ignores SIGTERM,
// is ended by the SIGHUP, without escalation to SIGKILL.
func TestCgroupCloseSignalsWhatLeftPolitely(t *testing.T) {
	// Not parallel: it runs a reaper (see startReaper).
	m, _, cg := newCgroupManager(t, CgroupOptions{})
	startReaper(t, m)
	d := t.TempDir()
	script := `( setsid sh -c 'trap "echo >\"$D/hup\"; exit 0" HUP; trap "" TERM; echo $$ >"$R/cgroup.procs" || exit 1; sleep 300 & s=$!; printf %s $$ >"$D/polite.tmp" && mv "$D/polite.tmp" "$D/polite"; wait $s' </dev/null >/dev/null 2>&1 & )
exec sleep 300`
	p, err := m.Start(Spec{Kind: KindPTY, SessionID: "s-polite", Path: "/bin/sh", Args: []string{"-c", script},
		Env: []string{"D=" + d, "R=" + cg.Mount, "PATH=" + os.Getenv("PATH")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.PTY().Close() })
	pid := readPidFile(t, filepath.Join(d, "polite"))
	killOnCleanup(t, pid)
	testkit.WaitFor(t, 10*time.Second, "the escapee adopted", func() bool {
		st, ok := readStat(pid)
		return ok && st.ppid == os.Getpid()
	})

	res := p.Close(ReasonSessionClosed)

	if !testkit.Gone(pid) {
		t.Errorf("escapee %d alive after Close", pid)
	}
	if _, err := os.Stat(filepath.Join(d, "hup")); err != nil {
		t.Errorf("the escapee got no SIGHUP: %v", err)
	}
	if res.Escalation != EscalationTerm || !slices.Equal(res.Signals, []string{"SIGHUP"}) || res.Descendants < 1 {
		t.Errorf("result %+v: want escalation term by SIGHUP alone, descendants >= 1", res)
	}
}
