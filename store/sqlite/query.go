package sqlite

import (
	"strings"
	"unicode"

	"github.com/dashgate/dashgate/store"
)

// ftsQuery turns any user text into an FTS5 query that cannot fail: its
// words (runs of Unicode letters and digits; everything else, operators,
// quotes, NUL and invalid UTF-8 included, separates them), each quoted as
// an FTS5 string and made a prefix query ("pomegran"* finds pomegranate),
// joined by spaces (all of them must match); the first
// store.MaxSearchWords of them. No words: "".
func ftsQuery(query string) string {
	words := strings.FieldsFunc(query, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsNumber(r) })
	if len(words) > store.MaxSearchWords {
		words = words[:store.MaxSearchWords]
	}
	var b strings.Builder
	for i, w := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteByte('"')
		b.WriteString(strings.ReplaceAll(w, `"`, `""`))
		b.WriteString(`"*`)
	}
	return b.String()
}
