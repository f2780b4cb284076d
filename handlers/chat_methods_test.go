package handlers

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// protocolDoc is the wire contract the chat methods are documented in.
const protocolDoc = "../docs/PROTOCOL.md"

var (
	// A row of §2's methods table: | `session.create` | params | result |
	methodRow = regexp.MustCompile("(?m)^\\| `([a-z]+\\.[a-z_]+)` \\|")
	// A method §7 adds, shown as its call and its result: `model.list` →,
	// `session.reopen {session_id}` →, New method `session.detach`
	// (`session_id`) →. The params may run over lines; an event is never
	// followed by an arrow.
	methodCall = regexp.MustCompile("`([a-z]+\\.[a-z_]+)(?: \\{[^`]*\\})?`(?:\\s*\\(`[^`]*`\\))?\\s*→")
)

// documentedMethods are the chat methods doc documents: the rows of the
// table under §2's "### Methods", and every method shown as a call with
// its result (→) anywhere.
func documentedMethods(t *testing.T, doc string) []string {
	t.Helper()
	start := strings.Index(doc, "\n### Methods\n")
	if start < 0 {
		t.Fatalf("%s has no ### Methods table", protocolDoc)
	}
	table := doc[start+1:]
	if end := strings.Index(table[1:], "\n#"); end >= 0 {
		table = table[:end+1]
	}
	found := map[string]bool{}
	for _, m := range methodRow.FindAllStringSubmatch(table, -1) {
		found[m[1]] = true
	}
	if len(found) == 0 {
		t.Fatalf("%s: no method rows under ### Methods (has the table's shape changed?)", protocolDoc)
	}
	for _, m := range methodCall.FindAllStringSubmatch(doc, -1) {
		found[m[1]] = true
	}
	return slices.Sorted(maps.Keys(found))
}

// TestChatMethodsDocumented holds chatMethods, the table chatConn.call
// routes by, to docs/PROTOCOL.md: a method routed but not documented, or
// documented but not routed (it would answer -32601), fails.
func TestChatMethodsDocumented(t *testing.T) {
	doc, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	documented := documentedMethods(t, string(doc))
	routed := slices.Sorted(maps.Keys(chatMethods))
	for _, m := range routed {
		if !slices.Contains(documented, m) {
			t.Errorf("method %q is routed (chatMethods) but not documented in %s", m, protocolDoc)
		}
	}
	for _, m := range documented {
		if !slices.Contains(routed, m) {
			t.Errorf("method %q is documented in %s but not routed (chatMethods): it answers -32601", m, protocolDoc)
		}
	}
	if t.Failed() {
		t.Logf("routed: %v\ndocumented: %v", routed, documented)
	}
}

// TestDocumentedMethodsParse keeps the parse of the doc honest: each
// shape a method is documented in is found, and events, fields and
// methods named in passing are not.
func TestDocumentedMethodsParse(t *testing.T) {
	t.Parallel()
	doc := "## 2. Chat\n\n### Methods\n\n| method | params | result |\n|---|---|---|\n" +
		"| `session.create` | `title?` | `{\"session_id\"}` |\n\n### Events\n\n" +
		"| `message.delta` | `{\"turn_id\",\"text\"}` |\n\n## 7. Additions\n" +
		"- New method `session.detach` (`session_id`) → `{\"detached\": bool}`\n" +
		"- `session.history {session_id, before_seq?,\n  limit?}` → `{\"entries\"}`\n" +
		"- `model.list` → `{\"models\"}`; `session.resume` returns `title`; the `data.failure` of a 5004.\n" +
		"- Event `approval.request {request_id, tool}` to every viewer; `session.list {include_closed?}`: more.\n"
	got := documentedMethods(t, doc)
	want := []string{"model.list", "session.create", "session.detach", "session.history"}
	if !slices.Equal(got, want) {
		t.Errorf("documented methods = %v; want %v", got, want)
	}
}
