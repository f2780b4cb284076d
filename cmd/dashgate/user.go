package main

import (
	"fmt"
	"io"
)

// userMain runs `dashgate user add|list|remove` (a stub until the users
// file lands).
func userMain(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "dashgate user: not built yet")
	return 2
}
