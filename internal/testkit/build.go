package testkit

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

var build struct {
	mu  sync.Mutex
	dir string // temp dir holding the binary; "" before the first Build
	bin string
}

// Build compiles ./cmd/dashgate of the module the working directory is in
// (`go env GOMOD`), with -race when the calling binary has the race
// detector (a race in dashgate then makes it exit 66), into a temporary
// directory, and returns the binary's path. It builds once per process:
// later calls return the same path. RemoveBuild deletes it.
func Build(ctx context.Context) (string, error) {
	build.mu.Lock()
	defer build.mu.Unlock()
	if build.bin != "" {
		return build.bin, nil
	}
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("find the module root (go env GOMOD = %q): %v", gomod, err)
	}
	dir, err := os.MkdirTemp("", "dashgate-testkit-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "dashgate")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/dashgate")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = filepath.Dir(gomod)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, log.Bytes())
	}
	build.dir, build.bin = dir, bin
	return bin, nil
}

// RemoveBuild deletes the binary of Build, if any; a later Build builds
// again.
func RemoveBuild() {
	build.mu.Lock()
	defer build.mu.Unlock()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	build.dir, build.bin = "", ""
}
