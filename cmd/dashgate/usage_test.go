package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
)

// serveHelp returns what `dashgate serve --help` prints.
func serveHelp(t *testing.T) string {
	t.Helper()
	var out bytes.Buffer
	_, err := parseConfig([]string{"--help"}, func(string) string { return "" }, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseConfig(--help) = %v, want flag.ErrHelp", err)
	}
	return out.String()
}

var helpFlagLine = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)

// TestServeHelpGroups: every flag parseConfig registers is in exactly one
// group of serveFlagGroups, and every name there is a flag. A flag added
// without a group fails here (it would be printed under "Other").
func TestServeHelpGroups(t *testing.T) {
	help := serveHelp(t)
	registered := map[string]bool{}
	for _, m := range helpFlagLine.FindAllStringSubmatch(help, -1) {
		if registered[m[1]] {
			t.Errorf("--%s printed twice in --help", m[1])
		}
		registered[m[1]] = true
	}
	if len(registered) < 70 {
		t.Fatalf("--help lists %d flags; want them all (70 or more):\n%s", len(registered), help)
	}
	group := map[string]string{}
	for _, g := range serveFlagGroups {
		for _, name := range g.names {
			if prev, ok := group[name]; ok {
				t.Errorf("--%s is in two groups: %q and %q", name, prev, g.title)
			}
			group[name] = g.title
			if !registered[name] {
				t.Errorf("group %q lists --%s, which parseConfig does not register", g.title, name)
			}
		}
	}
	for name := range registered {
		if _, ok := group[name]; !ok {
			t.Errorf("--%s is in no group of serveFlagGroups (usage.go): add it to the one it belongs to (tuning knobs last)", name)
		}
	}
	if strings.Contains(help, "\nOther:\n") {
		t.Errorf("--help has an Other section:\n%s", help)
	}
}

// TestServeHelpOrder: --help starts with the usage line and the serving
// group (--addr first), and ends with the tuning knobs.
func TestServeHelpOrder(t *testing.T) {
	help := serveHelp(t)
	if !strings.HasPrefix(help, "Usage: dashgate serve [flags]\n") {
		t.Errorf("--help starts %q, want the usage line", help[:min(len(help), 60)])
	}
	titles := regexp.MustCompile(`(?m)^(\S[^\n]*):$`).FindAllStringSubmatch(help, -1)
	if len(titles) != len(serveFlagGroups) {
		t.Fatalf("--help has %d group titles, want %d: %q", len(titles), len(serveFlagGroups), titles)
	}
	if titles[0][1] != "Serving" {
		t.Errorf("first group %q, want Serving", titles[0][1])
	}
	if last := titles[len(titles)-1][1]; !strings.HasPrefix(last, "Tuning") {
		t.Errorf("last group %q, want Tuning", last)
	}
	if first := helpFlagLine.FindStringSubmatch(help); first == nil || first[1] != "addr" {
		t.Errorf("first flag %v, want --addr", first)
	}
	// Defaults are the registered ones, as flag.PrintDefaults prints them.
	for _, want := range []string{
		"  -addr string\n    \taddress to listen on",
		`(default "127.0.0.1:8787")`,
		"  -pty-spare\n    \tkeep a terminal program started ahead",
		"  -max-workers int\n    \tlive children",
		"(default 64)",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// TestServeHelpRegisteredDefaults: a flag given before --help does not
// change the default --help shows.
func TestServeHelpRegisteredDefaults(t *testing.T) {
	var out bytes.Buffer
	_, err := parseConfig([]string{"--max-workers", "7", "--help"}, func(string) string { return "" }, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
	if !strings.Contains(out.String(), "live children (workers and terminals); beyond it calls get error 4029 (default 64)") {
		t.Errorf("--max-workers' default is not 64 in --help after --max-workers 7:\n%s", out.String())
	}
}

// TestConfigurationDocumented: docs/configuration.md has a row for every
// flag of `dashgate serve`, in the group --help prints it in, and none for a
// flag that is gone.
func TestConfigurationDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	registered := map[string]bool{}
	for _, m := range helpFlagLine.FindAllStringSubmatch(serveHelp(t), -1) {
		registered[m[1]] = true
	}
	heading := ""
	documented := map[string]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			heading = h
		}
		m := regexp.MustCompile("^\\| `--([a-z0-9-]+)` \\|").FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if _, dup := documented[m[1]]; dup {
			t.Errorf("docs/configuration.md has two rows for --%s", m[1])
		}
		documented[m[1]] = heading
		if !registered[m[1]] {
			t.Errorf("docs/configuration.md documents --%s, which dashgate serve does not have", m[1])
		}
	}
	for _, g := range serveFlagGroups {
		for _, name := range g.names {
			h, ok := documented[name]
			switch {
			case !ok:
				t.Errorf("--%s has no row in docs/configuration.md (put it under %q)", name, g.title)
			case !strings.HasPrefix(g.title, h):
				t.Errorf("--%s is under %q in docs/configuration.md, in group %q of --help", name, h, g.title)
			}
		}
	}
}
