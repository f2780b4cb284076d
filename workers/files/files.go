// Package files copies a file into or out of a session's terminal: an
// upload into the shell's current directory, a download of a file the
// user names (issue 42). The copy is done by a short helper process,
// `dashgate file put|get`, started as the session owner's Unix account
// (Account; dashgate's own user without one): the kernel itself decides
// what the user may read and write, so no path dashgate is given can
// reach beyond what the user could touch from their own shell, and a
// file they upload is theirs. dashgate waits for the helper
// (workers.Run); it dies with dashgate (Pdeathsig) and with the request
// (its context).
//
// The helper's side is Main; the gateway's, Put and Get.
package files

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/accounts"
	"github.com/dashgate/dashgate/workers"
)

// Errors of Put and Get, matched with errors.Is; the error's text is the
// sentence for the person (it names the file).
var (
	ErrBadName  = errors.New("not a file name")
	ErrExists   = errors.New("file exists")
	ErrDenied   = errors.New("permission denied")
	ErrNotFound = errors.New("no such file")
	ErrNotFile  = errors.New("not a regular file")
	ErrTooLarge = errors.New("file too large")
)

// The helper's exit codes, one per error above; anything else is a
// failure of its own (its stderr says).
var exitErrors = map[int]error{3: ErrBadName, 4: ErrExists, 5: ErrDenied, 6: ErrNotFound, 7: ErrNotFile, 8: ErrTooLarge}

// Error is a refused copy: Kind (one of the Err values) and the helper's
// sentence.
type Error struct {
	Kind error
	Msg  string
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Kind }

// Helper is how to start the helper: Self, the dashgate binary (it must be
// executable by every account it runs as), and Account, whom it runs as
// (nil: dashgate's own user).
type Helper struct {
	Self    string
	Account *accounts.Account
}

func (h Helper) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, h.Self, append([]string{"file"}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
	cmd.Dir = "/"
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if a := h.Account; a != nil {
		attr.Credential = &syscall.Credential{Uid: a.UID, Gid: a.GID, Groups: slices.Clone(a.Groups)}
		cmd.Env = append(cmd.Env, "HOME="+a.Home, "USER="+a.Name)
	}
	cmd.SysProcAttr = attr
	return cmd
}

// Put writes body as the new file name in dir, at most max bytes (a
// larger body leaves nothing behind), and returns its path and size. It
// never replaces a file (ErrExists). Errors: an *Error (ErrBadName,
// ErrExists, ErrDenied, ErrNotFound for dir, ErrTooLarge), ctx's, or the
// helper's failure.
func (h Helper) Put(ctx context.Context, dir, name string, body io.Reader, max int64) (path string, n int64, err error) {
	if err := CheckName(name); err != nil {
		return "", 0, err
	}
	var out, stderr strings.Builder
	cmd := h.command(ctx, "put", dir, name, strconv.FormatInt(max, 10))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = body, &out, &stderr
	if err := workers.Run(cmd); err != nil {
		return "", 0, h.failure(ctx, err, stderr.String())
	}
	path, size, ok := strings.Cut(strings.TrimSpace(out.String()), "\t")
	if n, err = strconv.ParseInt(size, 10, 64); !ok || err != nil {
		return "", 0, fmt.Errorf("file helper answered %q", out.String())
	}
	return path, n, nil
}

// Get streams the regular file at path (absolute, or relative to dir) to
// the writer open returns, once its size is known; open is not called
// when the file cannot be read. It returns the file's absolute path.
// Errors: an *Error (ErrDenied, ErrNotFound, ErrNotFile), ctx's, the
// writer's, or the helper's failure (after open was called, some bytes
// may have been written).
func (h Helper) Get(ctx context.Context, dir, path string, open func(path string, size int64) io.Writer) (string, error) {
	if !strings.HasPrefix(path, "/") {
		path = strings.TrimSuffix(dir, "/") + "/" + path
	}
	cmd := h.command(ctx, "get", path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	done := make(chan error, 1)
	go func() { done <- workers.Run(cmd) }()
	br := bufio.NewReader(stdout)
	head, herr := br.ReadString('\n') // "<size>\t<path>\n", then the bytes
	var copyErr error
	if herr == nil {
		size, abs, _ := strings.Cut(strings.TrimSuffix(head, "\n"), "\t")
		n, perr := strconv.ParseInt(size, 10, 64)
		if perr != nil {
			copyErr = fmt.Errorf("file helper answered %q", head)
		} else {
			path = abs
			_, copyErr = io.CopyN(open(abs, n), br, n)
		}
	}
	io.Copy(io.Discard, br) // the helper never blocks on a pipe nobody reads
	if err := <-done; err != nil {
		return "", h.failure(ctx, err, stderr.String())
	}
	if copyErr != nil {
		return "", copyErr
	}
	if herr != nil {
		return "", fmt.Errorf("file helper: %w", herr)
	}
	return path, nil
}

// failure is the error of a helper that ended with err and said msg.
func (h Helper) failure(ctx context.Context, err error, msg string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	msg = strings.TrimSpace(msg)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if kind, ok := exitErrors[ee.ExitCode()]; ok {
			return &Error{Kind: kind, Msg: msg}
		}
	}
	if msg != "" {
		return fmt.Errorf("file helper: %w: %s", err, msg)
	}
	return fmt.Errorf("file helper: %w", err)
}

// CheckName reports whether name is one file name: not empty, "." or
// "..", without "/" or NUL, at most 255 bytes (an *Error of ErrBadName).
func CheckName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || len(name) > 255 {
		return &Error{Kind: ErrBadName, Msg: fmt.Sprintf("%q is not a file name (no /, not . or .., at most 255 bytes)", name)}
	}
	return nil
}

// Main is the helper, `dashgate file put DIR NAME MAX` (standard input
// into the new file DIR/NAME, at most MAX bytes; it prints "PATH\tSIZE")
// or `dashgate file get PATH` (it prints "SIZE\tPATH\n", then the file's
// bytes). It runs as the account whose file it is; a refusal exits with
// the code of its error (exitErrors) and says why on stderr. It returns
// the exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, format+"\n", a...)
		return code
	}
	switch {
	case len(args) == 4 && args[0] == "put":
		dir, name := args[1], args[2]
		max, err := strconv.ParseInt(args[3], 10, 64)
		if err != nil || max < 0 {
			return fail(2, "dashgate file put: bad size %q", args[3])
		}
		if err := CheckName(name); err != nil {
			return fail(3, "%s", err)
		}
		return put(dir, name, max, stdin, stdout, fail)
	case len(args) == 2 && args[0] == "get":
		return get(args[1], stdout, fail)
	}
	return fail(2, "usage: dashgate file put DIR NAME MAX | dashgate file get PATH")
}

func put(dir, name string, max int64, stdin io.Reader, stdout io.Writer, fail func(int, string, ...any) int) int {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(codeOf(err), "cannot open the directory %s: %s", dir, errText(err))
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o666) // the umask applies
	if err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fail(4, "%s already exists in %s: it was not replaced", name, dir)
		}
		return fail(codeOf(err), "cannot create %s in %s: %s", name, dir, errText(err))
	}
	f := os.NewFile(uintptr(fd), name)
	n, err := io.Copy(f, io.LimitReader(stdin, max+1))
	if err == nil {
		err = f.Close()
	} else {
		f.Close()
	}
	switch {
	case err != nil:
		unix.Unlinkat(dfd, name, 0)
		return fail(1, "writing %s in %s: %s", name, dir, errText(err))
	case n > max:
		unix.Unlinkat(dfd, name, 0)
		return fail(8, "%s is larger than %d bytes: not uploaded", name, max)
	}
	path := strings.TrimSuffix(dir, "/") + "/" + name
	fmt.Fprintf(stdout, "%s\t%d\n", path, n)
	return 0
}

func get(path string, stdout io.Writer, fail func(int, string, ...any) int) int {
	f, err := os.Open(path)
	if err != nil {
		return fail(codeOf(err), "cannot read %s: %s", path, errText(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fail(1, "cannot read %s: %s", path, errText(err))
	}
	if !st.Mode().IsRegular() {
		return fail(7, "%s is not a regular file", path)
	}
	w := bufio.NewWriterSize(stdout, 64<<10)
	fmt.Fprintf(w, "%d\t%s\n", st.Size(), path)
	if _, err := io.CopyN(w, f, st.Size()); err != nil {
		return fail(1, "reading %s: %s", path, errText(err))
	}
	if err := w.Flush(); err != nil {
		return 1
	}
	return 0
}

// codeOf is the exit code of a failed open: denied, missing, or 1.
func codeOf(err error) int {
	switch {
	case errors.Is(err, os.ErrPermission), errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), errors.Is(err, unix.EROFS):
		return 5
	case errors.Is(err, os.ErrNotExist), errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return 6
	case errors.Is(err, unix.ELOOP):
		return 7 // O_NOFOLLOW met a symbolic link
	}
	return 1
}

// errText is err's sentence without the Go wrapping ("open x: ").
func errText(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
