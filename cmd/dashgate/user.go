package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/dashgate/dashgate/users"
)

const userUsage = `usage:
  dashgate user add [--users-file PATH] [--public-url URL] NAME   make NAME a user; print their login URL (once)
  dashgate user list [--users-file PATH]                  print the users, one a line
  dashgate user remove [--users-file PATH] NAME           take NAME out

--users-file defaults to $DASHGATE_USERS_FILE, else <state dir>/users
($XDG_STATE_HOME/dashgate or ~/.local/state/dashgate). --public-url (or
--url) is the dashboard's URL as its users reach it, the server's
--public-url: default $DASHGATE_PUBLIC_URL, else $DASHGATE_URL, else
http://127.0.0.1:8787/.
A running dashgate reads the file again on SIGHUP (kill -HUP <pid>, or
systemctl reload).
`

// userMain runs `dashgate user add|list|remove` on the users file: exit 0
// on success, 2 with one `dashgate user: ...` line on stderr on an error
// (and the usage for a usage error).
func userMain(args []string, stdout, stderr io.Writer) int {
	return userRun(args, os.Getenv, stdout, stderr)
}

// errUsage marks an error of the command line: the usage follows it.
var errUsage = errors.New("usage")

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }
func (e *usageError) Unwrap() error { return errUsage }

func userRun(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	err := userCmd(args, getenv, stdout, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, userUsage)
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "dashgate user:", err)
		fmt.Fprint(stderr, userUsage)
		return 2
	case err != nil:
		fmt.Fprintln(stderr, "dashgate user:", err)
		return 2
	}
	return 0
}

func userCmd(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &usageError{"add, list or remove?"}
	}
	verb, args := args[0], args[1:]
	switch verb {
	case "-h", "-help", "--help", "help":
		return flag.ErrHelp
	case "add", "list", "remove":
	default:
		return &usageError{fmt.Sprintf("unknown command %q (want add, list or remove)", verb)}
	}
	fs := flag.NewFlagSet("dashgate user "+verb, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // userRun prints the one usage
	path := fs.String("users-file", getenv("DASHGATE_USERS_FILE"), "the users file")
	var base string
	if verb == "add" {
		def := cmp.Or(getenv("DASHGATE_PUBLIC_URL"), getenv("DASHGATE_URL"), "http://127.0.0.1:8787/")
		fs.StringVar(&base, "public-url", def, "the dashboard's URL as its users reach it")
		fs.StringVar(&base, "url", def, "the same as --public-url")
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err.Error()}
	}
	want := 1
	if verb == "list" {
		want = 0
	}
	if len(pos) != want {
		if want == 0 {
			return &usageError{fmt.Sprintf("list takes no name (got %q)", pos)}
		}
		return &usageError{fmt.Sprintf("%s takes one NAME", verb)}
	}
	var login *url.URL
	if verb == "add" {
		flagName := "--public-url" // the flag as given, in the error
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "url" {
				flagName = "--url"
			}
		})
		if login, err = loginBase(flagName, base); err != nil {
			return &usageError{err.Error()}
		}
	}
	file := *path
	if file == "" {
		dir := defaultStateDir(getenv)
		if dir == "" {
			return &usageError{"no users file: set --users-file or DASHGATE_USERS_FILE (HOME is not set)"}
		}
		if verb == "add" {
			if err := prepareStateDir(dir); err != nil {
				return err
			}
		}
		file = filepath.Join(dir, "users")
	}

	switch verb {
	case "add":
		name := pos[0]
		if !users.ValidName(name) {
			return &usageError{fmt.Sprintf("bad user name %q (want 1 to 64 of A-Z a-z 0-9 . _ @ -, starting with a letter or digit)", name)}
		}
		token, err := users.Add(file, name)
		if err != nil {
			return err
		}
		q := login.Query()
		q.Set("token", token)
		login.RawQuery = q.Encode()
		fmt.Fprintln(stdout, login.String())
		fmt.Fprintf(stderr, "dashgate user: added %s to %s. The login URL above holds their token: it is shown this once (the file keeps only its hash). A running dashgate picks the user up on SIGHUP (kill -HUP <pid>, or systemctl reload dashgate).\n", name, file)
	case "list":
		s, err := users.Load(file)
		if err != nil {
			return err
		}
		for _, n := range s.Names() {
			fmt.Fprintln(stdout, n)
		}
	case "remove":
		name := pos[0]
		if err := users.Remove(file, name); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "dashgate user: removed %s from %s. Their sockets close, and their logins stop working, on the running dashgate's next SIGHUP (kill -HUP <pid>, or systemctl reload dashgate).\n", name, file)
	}
	return nil
}

// parseInterspersed parses fs's flags wherever they are among args
// (`add alice --url X` as well as `add --url X alice`) and returns the
// other arguments. "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// loginBase is the dashboard's URL as given (by the flag name), its path
// ending in '/': the login URL is it with ?token=.
func loginBase(name, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", name, raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s %q: want an absolute http or https URL such as https://HOST/PATH/", name, raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("%s %q: want no query, fragment or user", name, raw)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
		if u.RawPath != "" {
			u.RawPath += "/"
		}
	}
	return u, nil
}
