package workers

import (
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// TestCloseRecordLogAttrs: Spec.LogAttrs reach the "worker closed" record
// of a child that ends by itself at once (nobody could add them after the
// start in time), and AddCloseAttr replaces a key given before instead of
// logging it twice.
func TestCloseRecordLogAttrs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		replace bool // AddCloseAttr("user", "bob") after the start
		want    string
	}{
		{name: "from the spec", want: "alice"},
		{name: "replaced", replace: true, want: "bob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, lb := newTestManager(t, Config{})
			spec := helperSpec(t, "proto")
			if !tc.replace {
				spec = helperSpec(t, "exit")
			}
			spec.LogAttrs = []any{"user", "alice"}
			p, err := m.Start(spec)
			if err != nil {
				t.Fatal(err)
			}
			if tc.replace {
				p.AddCloseAttr("user", "bob")
				p.Close(ReasonDetach)
			}
			testkit.WaitFor(t, 5*time.Second, "the child closed", func() bool {
				select {
				case <-p.Closed():
					return true
				default:
					return false
				}
			})
			rec := oneCloseRecord(t, lb)
			if rec["user"] != tc.want {
				t.Fatalf("record %v: user %v, want %q", rec, rec["user"], tc.want)
			}
			raw := lb.String()
			if n := strings.Count(raw, `"user"`); n != 1 {
				t.Fatalf("the record names user %d times: %s", n, raw)
			}
		})
	}
}
