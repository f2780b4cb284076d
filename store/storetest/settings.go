package storetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dashgate/dashgate/store"
)

// The settings cases of the conformance table (issue 42).

func ptr[T any](v T) *T { return &v }

// settingsOf reads owner's settings, failing t on an error.
func settingsOf(t *testing.T, st store.Store, owner string) store.Settings {
	t.Helper()
	got, err := st.Settings(t.Context(), owner)
	if err != nil {
		t.Fatalf("Settings(%q): %v", owner, err)
	}
	return got
}

// putSettings writes p for owner and checks that what it returns is
// what a read gives then, and want.
func putSettings(t *testing.T, st store.Store, owner string, p store.SettingsPatch, want store.Settings) {
	t.Helper()
	got, err := st.PutSettings(t.Context(), owner, p)
	if err != nil {
		t.Fatalf("PutSettings(%q): %v", owner, err)
	}
	if got != want {
		t.Fatalf("PutSettings(%q) returned\n %+v\nwant\n %+v", owner, got, want)
	}
	if read := settingsOf(t, st, owner); read != want {
		t.Fatalf("Settings(%q) after PutSettings:\n %+v\nwant\n %+v", owner, read, want)
	}
}

// testSettings: a user who chose nothing reads the zero Settings; a
// write sets the fields it names and keeps the others, "" and 0 go back
// to the default; every owner (the anonymous user "" too) has a row of
// their own; text round-trips whole (8 KiB, new lines, quotes, JSON's
// own characters, non-ASCII); an empty patch changes nothing; deleting
// and pruning sessions leaves settings alone.
func testSettings(t *testing.T, st store.Store) {
	if got := settingsOf(t, st, "ann"); got != (store.Settings{}) {
		t.Fatalf("settings of a user who chose nothing: %+v; want the zero Settings", got)
	}
	ann := store.Settings{DefaultAgent: "claude", Theme: "dark"}
	putSettings(t, st, "ann", store.SettingsPatch{DefaultAgent: ptr("claude"), Theme: ptr("dark")}, ann)

	prompt := strings.Repeat("Answer in French, \"briefly\" — {ok}: \\n is not a new line,\nthis is.\t🦭 ", 8<<10/80)
	family := `"Fira Code", 'DejaVu Sans Mono', monospace`
	p := store.SettingsPatch{DefaultModel: ptr("qwen3:8b"), SystemPrompt: ptr(prompt), TerminalFontSize: ptr(17), TerminalFontFamily: ptr(family)}
	ann = store.Settings{DefaultAgent: "claude", DefaultModel: "qwen3:8b", SystemPrompt: prompt, Theme: "dark", TerminalFontSize: 17, TerminalFontFamily: family}
	putSettings(t, st, "ann", p, ann)
	if *p.SystemPrompt != prompt || *p.TerminalFontFamily != family {
		t.Errorf("PutSettings changed its patch's strings")
	}

	ann.DefaultAgent, ann.TerminalFontSize = "", 0
	putSettings(t, st, "ann", store.SettingsPatch{DefaultAgent: ptr(""), TerminalFontSize: ptr(0)}, ann)
	putSettings(t, st, "ann", store.SettingsPatch{}, ann)

	if got := settingsOf(t, st, "bob"); got != (store.Settings{}) {
		t.Errorf("bob's settings after ann's writes: %+v; want none", got)
	}
	anon := store.Settings{Theme: "light"}
	putSettings(t, st, "", store.SettingsPatch{Theme: ptr("light")}, anon)
	putSettings(t, st, "carol", store.SettingsPatch{}, store.Settings{})
	if got := settingsOf(t, st, "ann"); got != ann {
		t.Errorf("ann's settings after the anonymous user's:\n %+v\nwant\n %+v", got, ann)
	}

	apply(t, st, store.Batch{Sessions: []store.Session{closedAt("c1", "ann", t0), closedAt("c2", "", t0)}})
	if _, err := st.Delete(t.Context(), "ann", "c1"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Prune(t.Context(), at(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if a, n := settingsOf(t, st, "ann"), settingsOf(t, st, ""); a != ann || n != anon {
		t.Errorf("settings after their owners' sessions went: ann %+v, anonymous %+v; want %+v, %+v", a, n, ann, anon)
	}
}

// SettingsRace: two writers (on stores a and b, which may be two nodes
// on one database) set different fields of one user's settings at the
// same time, round after round: each round ends with both fields as
// written. A write that read the row to rewrite it whole would, now and
// then, put back the other's field as it was.
func SettingsRace(t *testing.T, a, b store.Store) {
	ctx := t.Context()
	for round := range 40 {
		theme := []string{"light", "dark"}[round%2]
		size := 8 + round%24
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		wg.Go(func() {
			_, err := a.PutSettings(ctx, "ann", store.SettingsPatch{Theme: ptr(theme)})
			errs <- err
		})
		wg.Go(func() {
			_, err := b.PutSettings(ctx, "ann", store.SettingsPatch{TerminalFontSize: ptr(size), SystemPrompt: ptr(fmt.Sprint("round ", round))})
			errs <- err
		})
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: PutSettings: %v", round, err)
			}
		}
		want := store.Settings{Theme: theme, TerminalFontSize: size, SystemPrompt: fmt.Sprint("round ", round)}
		for _, st := range []store.Store{a, b} {
			if got := settingsOf(t, st, "ann"); got != want {
				t.Fatalf("round %d: settings %+v; want %+v", round, got, want)
			}
		}
	}
}
