package sessions

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/dashgate/dashgate/store"
)

// settingsDown is a store whose Settings fails while down is set.
type settingsDown struct {
	store.Store
	down atomic.Bool
}

func (d *settingsDown) Settings(ctx context.Context, owner string) (store.Settings, error) {
	if d.down.Load() {
		return store.Settings{}, errors.New("settings table unreachable")
	}
	return d.Store.Settings(ctx, owner)
}

// TestSystemPromptReachesWorker: each prompt carries its owner's system
// prompt as the store has it then (system; none when it is ""): a change
// applies to the next prompt; another user's session gets theirs; while
// the store cannot say, the last one read is sent and a WARN says why.
func TestSystemPromptReachesWorker(t *testing.T) {
	t.Parallel()
	st := &settingsDown{Store: store.NewMemory()}
	h := newHarness(t, func(c *Config) { c.Store = st })
	set := func(p Principal, prompt string) {
		t.Helper()
		if _, err := h.r.PutSettings(t.Context(), p, store.SettingsPatch{SystemPrompt: &prompt}); err != nil {
			t.Fatal(err)
		}
	}
	type sent struct {
		system string
		has    bool
	}
	seen := map[*fakeWorker]int{} // prompts of each worker already looked at
	prompt := func(p Principal, sid string) sent {
		t.Helper()
		_, start, err := h.r.Prompt(&recViewer{p: p}, sid, "hello")
		if err != nil {
			t.Fatal(err)
		}
		start()
		h.r.Wait()
		var got []map[string]any // the prompts workers got since the last call
		for _, w := range h.sp.workers() {
			w.mu.Lock()
			got = append(got, w.prompts[seen[w]:]...)
			seen[w] = len(w.prompts)
			w.mu.Unlock()
		}
		if len(got) != 1 {
			t.Fatalf("%d prompts reached the workers; want 1", len(got))
		}
		s, ok := got[0]["system"].(string)
		return sent{s, ok}
	}
	alices, err := h.r.Create(&recViewer{p: alice}, NewSession{})
	if err != nil {
		t.Fatal(err)
	}
	bobs, err := h.r.Create(&recViewer{p: bob}, NewSession{})
	if err != nil {
		t.Fatal(err)
	}
	if got := prompt(alice, alices.ID); got.has {
		t.Fatalf("a prompt of a user without a system prompt carries system %q", got.system)
	}
	set(alice, "Answer in French.")
	set(bob, "Answer in Welsh.")
	for _, c := range []struct {
		p    Principal
		sid  string
		want string
	}{{alice, alices.ID, "Answer in French."}, {bob, bobs.ID, "Answer in Welsh."}} {
		if got := prompt(c.p, c.sid); got != (sent{c.want, true}) {
			t.Fatalf("%s's prompt carries system %+v; want %q", c.p.User, got, c.want)
		}
	}
	set(alice, "Answer in Latin.")
	if got := prompt(alice, alices.ID); got != (sent{"Answer in Latin.", true}) {
		t.Fatalf("after a change, the next prompt carries system %+v; want the new one", got)
	}
	st.down.Store(true)
	if got := prompt(alice, alices.ID); got != (sent{"Answer in Latin.", true}) {
		t.Fatalf("with the store down, the prompt carries system %+v; want the last one read", got)
	}
	if recs := h.logs.Records("settings read"); len(recs) != 1 || recs[0]["level"] != "WARN" || recs[0]["sid"] != alices.ID {
		t.Fatalf("settings read records %v; want one WARN naming the session", recs)
	}
	st.down.Store(false)
	set(alice, "")
	if got := prompt(alice, alices.ID); got.has {
		t.Fatalf("after the system prompt was emptied, the prompt carries system %q", got.system)
	}
}

// TestNewSessionModel: a session made with a model (a user's default)
// has it: in its info, its stored row and its prompts, as one
// session.configure set.
func TestNewSessionModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	v := &recViewer{p: alice}
	in, err := h.r.Create(v, NewSession{Model: "qwen3:8b"})
	if err != nil {
		t.Fatal(err)
	}
	if in.Model != "qwen3:8b" {
		t.Fatalf("Create's info: model %q", in.Model)
	}
	_, start, err := h.r.Prompt(v, in.ID, "hello")
	if err != nil {
		t.Fatal(err)
	}
	start()
	h.r.Wait()
	if p := h.sp.workers()[0].prompts[0]; p["model"] != "qwen3:8b" {
		t.Fatalf("the prompt's model %v", p["model"])
	}
	if err := h.r.FlushStore(t.Context()); err != nil {
		t.Fatal(err)
	}
	if row, err := h.r.cfg.Store.Get(t.Context(), "alice", in.ID); err != nil || row.Model != "qwen3:8b" {
		t.Fatalf("stored row %+v, %v", row, err)
	}
}
