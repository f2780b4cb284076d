package sessions

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dashgate/dashgate/workers"
)

// constsOfType returns the string values of the constants of type typ
// declared in the non-test Go files of dir.
func constsOfType(t *testing.T, dir, typ string) []string {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		{
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					if typeName(vs.Type) != typ {
						continue
					}
					for _, v := range vs.Values {
						if lit, ok := v.(*ast.BasicLit); ok {
							s, _ := strconv.Unquote(lit.Value)
							out = append(out, s)
						}
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// typeName is a type expression's name as written: "Reason",
// "workers.Reason"; "" for any other expression (or none).
func typeName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		if pkg, ok := e.X.(*ast.Ident); ok {
			return pkg.Name + "." + e.Sel.Name
		}
	}
	return ""
}

// TestReasonTable fails when a reason is declared without its row in the
// table of reasons.go (and so without its metric label, which the metrics
// take from that table), or without its line in docs/PROTOCOL.md.
func TestReasonTable(t *testing.T) {
	t.Parallel()
	protocol, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	var ends, works []string
	for _, r := range EndReasons {
		ends = append(ends, string(r))
	}
	for _, r := range WorkerReasons {
		works = append(works, string(r))
	}
	slices.Sort(ends)
	slices.Sort(works)
	if got := constsOfType(t, ".", "EndReason"); !slices.Equal(got, ends) {
		t.Errorf("EndReason constants %v, but EndReasons lists %v", got, ends)
	}
	// A worker reason only the registry closes for is declared here
	// (ReasonReclaimed), the others in package workers.
	got := append(constsOfType(t, "../workers", "Reason"), constsOfType(t, ".", "workers.Reason")...)
	slices.Sort(got)
	if !slices.Equal(got, works) {
		t.Errorf("workers.Reason constants %v, but WorkerReasons lists %v", got, works)
	}
	for _, r := range append(ends, works...) {
		if !strings.Contains(string(protocol), "`"+r+"`") {
			t.Errorf("reason %q is not in docs/PROTOCOL.md", r)
		}
	}
	// Every translation lands in the table.
	for _, r := range WorkerReasons {
		if got := terminalEndReason(r); !slices.Contains(EndReasons, got) {
			t.Errorf("terminalEndReason(%s) = %q, not an end reason", r, got)
		}
	}
	for _, r := range EndReasons {
		if got := childReason(r); !slices.Contains(WorkerReasons, got) {
			t.Errorf("childReason(%s) = %q, not a worker reason", r, got)
		}
	}
	causes := []error{nil, errors.New("eof"), ErrViewerWriteTimeout, ErrViewerSlow, ErrViewerPingTimeout,
		ErrViewerShutdown, &ExitError{Code: 3}, ErrTakenOver}
	for _, c := range causes {
		if got := ViewerEndReason(c); !slices.Contains(WorkerReasons, got) {
			t.Errorf("ViewerEndReason(%v) = %q, not a worker reason", c, got)
		}
	}
}

func TestTranslations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"shutdown closes children with shutdown", childReason(EndShutdown), workers.ReasonShutdown},
		{"an admin reap closes children with session_closed", childReason(EndAdminReap), workers.ReasonSessionClosed},
		{"terminal program reaped by an admin", terminalEndReason(workers.ReasonAdminReap), EndAdminReap},
		{"terminal program exited", terminalEndReason(workers.ReasonExited), EndPTYExit},
		{"terminal socket gone", terminalEndReason(workers.ReasonDetach), EndCloseOnDisconnect},
		{"parked terminal expired", terminalEndReason(workers.ReasonKeepaliveExpired), EndCloseOnDisconnect},
		{"terminal closed by its user", terminalEndReason(workers.ReasonTerminalClosed), EndClientClose},
		{"slow consumer", ViewerEndReason(ErrViewerSlow), workers.ReasonWriteTimeout},
		{"write timeout", ViewerEndReason(ErrViewerWriteTimeout), workers.ReasonWriteTimeout},
		{"ping timeout", ViewerEndReason(ErrViewerPingTimeout), workers.ReasonPingTimeout},
		{"server shutdown", ViewerEndReason(ErrViewerShutdown), workers.ReasonShutdown},
		{"program exit", ViewerEndReason(&ExitError{Code: 1}), workers.ReasonExited},
		{"takeover", ViewerEndReason(ErrTakenOver), workers.ReasonSuperseded},
		{"plain close", ViewerEndReason(errors.New("closed")), workers.ReasonDetach},
		{"spawn raced a detach", spawnRaceReason(true), workers.ReasonDetach},
		{"spawn raced a close", spawnRaceReason(false), workers.ReasonSessionClosed},
		{"a reclaimed worker's notice, as the dashboard's", workerNotice(workers.CloseResult{Reason: ReasonReclaimed}), "worker ended (reclaimed)"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

// TestViewerCapFreedByCloseElsewhere is the slot-leak repro: a socket at
// its cap gets 4029 (naming the limit); once its sessions are reaped by an
// administrator, it may create again.
func TestViewerCapFreedByCloseElsewhere(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.MaxViewed = 3 })
	v := &recViewer{}
	var ids []string
	for range 3 {
		in, err := h.r.Create(v, NewSession{Title: ""})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
	}
	_, err := h.r.Create(v, NewSession{Title: ""})
	var vc *ViewerCapacityError
	if !errors.Is(err, ErrViewerCapacity) || !errors.As(err, &vc) || vc.Limit != 3 || !strings.Contains(err.Error(), "(3)") {
		t.Fatalf("Create at the cap: %v", err)
	}
	// Another viewer's sessions can still be resumed by v? No: v is full.
	other, _ := h.r.Create(&recViewer{}, NewSession{Title: ""})
	if _, err := h.r.Resume(v, other.ID); !errors.Is(err, ErrViewerCapacity) {
		t.Fatalf("Resume at the cap: %v", err)
	}
	for _, id := range ids {
		if closed, err := h.r.Close(anon, id, EndAdminReap); !closed || err != nil {
			t.Fatalf("admin reap: %v %v", closed, err)
		}
	}
	if _, err := h.r.Create(v, NewSession{Title: ""}); err != nil {
		t.Fatalf("Create after the reaps: %v", err)
	}
	if _, err := h.r.Resume(v, other.ID); err != nil {
		t.Fatalf("Resume after the reaps: %v", err)
	}
}

// TestIllegalMoveIsLoud: an illegal state move panics in a test binary and
// logs at ERROR.
func TestIllegalMoveIsLoud(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	in, _ := h.r.Create(&recViewer{}, NewSession{Title: ""})
	h.r.mu.Lock()
	s := h.r.sessions[in.ID]
	func() {
		defer func() {
			if p := recover(); p == nil || !errors.Is(p.(error), ErrIllegalTransition) {
				t.Errorf("illegal move did not panic: %v", p)
			}
		}()
		h.r.setState(s, StateClosed) // attached -> closed skips closing
	}()
	h.r.mu.Unlock()
	if recs := h.logs.Records("session state"); len(recs) != 1 || recs[0]["level"] != "ERROR" {
		t.Fatalf("records: %v", recs)
	}
}

// gatedWorker is a fake worker whose Close blocks until gate closes.
type gatedWorker struct {
	*fakeWorker
	gate chan struct{}
}

func (w gatedWorker) Close(r workers.Reason) workers.CloseResult {
	<-w.gate
	return w.fakeWorker.Close(r)
}

type gatedSpawner struct {
	*fakeSpawner
	gate chan struct{}
}

func (s gatedSpawner) SpawnWorker(req SpawnRequest) (Worker, error) {
	w, err := s.fakeSpawner.SpawnWorker(req)
	if err != nil {
		return nil, err
	}
	return gatedWorker{w.(*fakeWorker), s.gate}, nil
}

// TestShutdownTeardownIsTracked: when Shutdown's context ends first, its
// teardowns go on and Wait joins them.
func TestShutdownTeardownIsTracked(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		h := newHarness(t, func(c *Config) { c.Spawner = gatedSpawner{&fakeSpawner{}, gate} })
		v := &recViewer{}
		in, _ := h.r.Create(v, NewSession{Title: ""})
		if _, err := h.r.Exec(t.Context(), v, in.ID, "/x"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := h.r.Shutdown(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Shutdown = %v", err)
		}
		waited := make(chan struct{})
		go func() { h.r.Wait(); close(waited) }()
		synctest.Wait()
		select {
		case <-waited:
			t.Fatal("Wait returned while Shutdown's teardown was still closing a worker")
		default:
		}
		close(gate)
		<-waited
		h.wantOneClose(in.ID, EndShutdown)
	})
}

// TestInterruptGraceReachesWorker: the registry's InterruptGrace is the
// cancel grace its workers are spawned with.
func TestInterruptGraceReachesWorker(t *testing.T) {
	t.Parallel()
	var got atomic.Int64
	sp := &graceSpawner{fakeSpawner: &fakeSpawner{}, got: &got}
	h := newHarness(t, func(c *Config) { c.Spawner = sp; c.InterruptGrace = 1234 * time.Millisecond })
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	if _, err := h.r.Exec(t.Context(), v, in.ID, "/x"); err != nil {
		t.Fatal(err)
	}
	if d := time.Duration(got.Load()); d != 1234*time.Millisecond {
		t.Fatalf("worker spawned with cancel grace %v, want 1.234s", d)
	}
}

type graceSpawner struct {
	*fakeSpawner
	got *atomic.Int64
}

func (s *graceSpawner) SpawnWorker(req SpawnRequest) (Worker, error) {
	s.got.Store(int64(req.CancelGrace))
	return s.fakeSpawner.SpawnWorker(req)
}

// TestEventEncodedOnce: the copies of one event delivered to several
// viewers share one encoding.
func TestEventEncodedOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	a, b := &recViewer{}, &recViewer{}
	in, _ := h.r.Create(a, NewSession{Title: ""})
	h.r.Resume(b, in.ID)
	h.r.Close(anon, in.ID, EndClientClose)
	ea, eb := a.ofType("session.closed"), b.ofType("session.closed")
	if len(ea) != 1 || len(eb) != 1 {
		t.Fatalf("events: %v %v", ea, eb)
	}
	n := 0
	enc := func(Event) []byte { n++; return []byte("x") }
	ea[0].Encode(enc)
	eb[0].Encode(enc)
	if n != 1 {
		t.Fatalf("encoded %d times for two viewers, want 1", n)
	}
}
