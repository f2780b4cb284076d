package cluster_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/dashgate/dashgate/internal/testkit"
)

func TestMain(m *testing.M) {
	testkit.VerifyNoLeaks(m, goleak.Cleanup(func(code int) {
		// The server is a child process, not a goroutine: stopped here,
		// and StopPostgres fails when any of its processes is left.
		if err := testkit.StopPostgres(); err != nil {
			fmt.Fprintln(os.Stderr, "stop PostgreSQL:", err)
			code = max(code, 1)
		}
		os.Exit(code)
	}))
}
