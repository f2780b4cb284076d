package main

import "github.com/dashgate/dashgate/workers/acpbridge"

// runACP is `dashgate acp -- <agent program> [args...]` (args after
// "acp"): the chat worker that bridges dashgate's worker protocol to an
// Agent Client Protocol agent it starts as its child (workers/acpbridge).
// It returns the exit code.
func runACP(args []string) int {
	return acpbridge.Main(args, version)
}
