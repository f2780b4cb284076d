package postgres

import (
	"strings"
	"unicode"

	"github.com/dashgate/dashgate/store"
)

// Limits of a tsvector: a lexeme holds at most maxLexeme bytes, and all of
// a tsvector's lexemes at most 1 MiB; maxWordBytes stays under the latter
// with room for its per-lexeme overhead.
const (
	maxLexeme    = 2047
	maxWordBytes = 900 << 10
)

// snippetWords is how many words a Hit's snippet holds (sqlite's 14).
const snippetWords = 14

// isSeparator: words are runs of Unicode letters and digits; everything
// else, operators, quotes, NUL and invalid UTF-8 included, separates them
// (store/sqlite's ftsQuery splits the same way).
func isSeparator(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsNumber(r) }

// indexWords is the lexemes of an entry's text: its words lower-cased,
// each once, without those longer than a lexeme may be, at most
// maxWordBytes of them (a longer text's later new words are not indexed).
func indexWords(text string) []string {
	words := strings.FieldsFunc(text, isSeparator)
	seen := make(map[string]bool, len(words))
	out := make([]string, 0, len(words))
	total := 0
	for _, w := range words {
		w = strings.ToLower(w)
		if len(w) > maxLexeme || seen[w] {
			continue
		}
		if total += len(w); total > maxWordBytes {
			break
		}
		seen[w] = true
		out = append(out, w)
	}
	return out
}

// queryWords is the first store.MaxSearchWords words of a query (as
// store/sqlite counts them), lower-cased, each once; ok is false when it
// has none, or one no entry can have been indexed under.
func queryWords(query string) (words []string, ok bool) {
	all := strings.FieldsFunc(query, isSeparator)
	if len(all) > store.MaxSearchWords {
		all = all[:store.MaxSearchWords]
	}
	for _, w := range all {
		w = strings.ToLower(w)
		if len(w) > maxLexeme {
			return nil, false
		}
		if !contains(words, w) {
			words = append(words, w)
		}
	}
	return words, len(words) > 0
}

// hasPrefixIn reports whether one of words is a prefix of w.
func hasPrefixIn(w string, words []string) bool {
	for _, x := range words {
		if strings.HasPrefix(w, x) {
			return true
		}
	}
	return false
}

func contains(words []string, w string) bool {
	for _, x := range words {
		if x == w {
			return true
		}
	}
	return false
}

// tsQuery is the tsquery text that matches entries holding, for every one
// of words, a lexeme it is a prefix of: each a quoted lexeme (taken as is,
// not parsed nor normalised by a text search configuration) marked :* (a
// prefix match; 'pomegran':* finds pomegranate), ANDed. words hold no
// quote nor backslash (they are letters and digits), but both are doubled
// all the same; nothing of the query is ever read as an operator.
func tsQuery(words []string) string {
	var b strings.Builder
	for i, w := range words {
		if i > 0 {
			b.WriteString(" & ")
		}
		b.WriteByte('\'')
		for _, r := range w {
			if r == '\'' || r == '\\' {
				b.WriteRune(r)
			}
			b.WriteRune(r)
		}
		b.WriteString("':*")
	}
	return b.String()
}

// snippet is about n words of text around the first of its words that
// one of words is a prefix of (case-folded), as they are written in text, with "…" where the text was cut
// before or after. A text without them gives its first n words.
func snippet(text string, words []string, n int) string {
	type span struct{ from, to int }
	var spans []span
	first := -1
	start := -1
	for i, r := range text {
		if isSeparator(r) {
			if start >= 0 {
				spans = append(spans, span{start, i})
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		spans = append(spans, span{start, len(text)})
	}
	if len(spans) == 0 {
		return ""
	}
	for i, sp := range spans {
		if hasPrefixIn(strings.ToLower(text[sp.from:sp.to]), words) {
			first = i
			break
		}
	}
	// The match a quarter of the way in, the window kept inside the text.
	from := max(0, first-n/4)
	from = min(from, max(0, len(spans)-n))
	to := min(len(spans), from+n)
	var b strings.Builder
	if from > 0 {
		b.WriteString("…")
	}
	b.WriteString(text[spans[from].from:spans[to-1].to])
	if to < len(spans) {
		b.WriteString("…")
	}
	return b.String()
}
