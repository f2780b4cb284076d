package acpbridge

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	acp "github.com/coder/acp-go-sdk"
)

// MaxReadBytes bounds what fs/read_text_file reads of a file, bytes.
const MaxReadBytes = 10 << 20

// readTextFile is fs/read_text_file: the file's text, or from line (1-based)
// at most limit lines. It is a plain read: the bridge runs as the session's
// user and the kernel decides. A relative path is invalid params; a file
// (or the part asked) over MaxReadBytes is an error saying so.
func readTextFile(p acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	if !filepath.IsAbs(p.Path) {
		return acp.ReadTextFileResponse{}, acp.NewInvalidParams(map[string]any{"error": "path must be absolute: " + p.Path})
	}
	f, err := os.Open(p.Path)
	if err != nil {
		return acp.ReadTextFileResponse{}, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return acp.ReadTextFileResponse{}, fmt.Errorf("%s is a directory", p.Path)
	}
	tooBig := fmt.Errorf("%s is larger than %d MiB: read it in parts (line, limit)", p.Path, MaxReadBytes>>20)
	if p.Line == nil && p.Limit == nil {
		b, err := io.ReadAll(io.LimitReader(f, MaxReadBytes+1))
		if err != nil {
			return acp.ReadTextFileResponse{}, err
		}
		if len(b) > MaxReadBytes {
			return acp.ReadTextFileResponse{}, tooBig
		}
		return acp.ReadTextFileResponse{Content: string(b)}, nil
	}
	first := 1
	if p.Line != nil {
		first = max(*p.Line, 1)
	}
	limit := -1
	if p.Limit != nil {
		limit = max(*p.Limit, 0)
	}
	r := bufio.NewReader(f)
	var out strings.Builder
	for n := 1; limit != 0; n++ {
		line, err := r.ReadString('\n')
		if n >= first && line != "" {
			if out.Len()+len(line) > MaxReadBytes {
				return acp.ReadTextFileResponse{}, tooBig
			}
			out.WriteString(line)
			limit--
		}
		if n < first && len(line) > MaxReadBytes {
			return acp.ReadTextFileResponse{}, tooBig
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return acp.ReadTextFileResponse{}, err
		}
	}
	return acp.ReadTextFileResponse{Content: out.String()}, nil
}

// writeTextFile is fs/write_text_file: it creates or replaces the file
// (mode 0644 for a new one, less the umask; its parent directories 0755).
func writeTextFile(p acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	if !filepath.IsAbs(p.Path) {
		return acp.WriteTextFileResponse{}, acp.NewInvalidParams(map[string]any{"error": "path must be absolute: " + p.Path})
	}
	if err := os.MkdirAll(filepath.Dir(p.Path), 0o755); err != nil {
		return acp.WriteTextFileResponse{}, err
	}
	return acp.WriteTextFileResponse{}, os.WriteFile(p.Path, []byte(p.Content), 0o644)
}
