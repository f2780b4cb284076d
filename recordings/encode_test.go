package recordings

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// want is what a JSON decoder must read back from appendString(s): s with
// each byte that is not part of valid UTF-8 as U+FFFD.
func want(s []byte) string {
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRune(s)
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.Write(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

// TestAppendString: appendString's output is a JSON string (strictly
// decoded) holding s, for inputs that mix plain ASCII runs longer and
// shorter than eight bytes with every byte that needs care: quotes,
// backslashes, control characters, UTF-8 and bytes that are not.
func TestAppendString(t *testing.T) {
	t.Parallel()
	alphabet := []byte("abcdefgh 0123\"\\\x00\x01\x1b\x1f\x7f\r\n\t\x80\xbf\xc3\xa9\xe2\x80\x94\xf0\x9f\x98\x80\xff")
	rng := rand.New(rand.NewPCG(7, 9))
	cases := [][]byte{nil, []byte("plain ascii text, longer than eight"), []byte("12345678\"12345678\\"), []byte("\xe2\x80\x94"), []byte("\xff\xfe")}
	for range 20000 {
		n := rng.IntN(40)
		s := make([]byte, n)
		for i := range s {
			if rng.IntN(3) == 0 {
				s[i] = alphabet[rng.IntN(len(alphabet))]
			} else {
				s[i] = byte('a' + rng.IntN(26))
			}
		}
		cases = append(cases, s)
	}
	for _, s := range cases {
		out := appendString(nil, s)
		if !json.Valid(out) {
			t.Fatalf("appendString(%q) = %q: not JSON", s, out)
		}
		var got string
		if err := json.Unmarshal(out, &got); err != nil || got != want(s) {
			t.Fatalf("appendString(%q) = %q, reads back %q (%v), want %q", s, out, got, err, want(s))
		}
	}
}

// TestPlain8: plain8 holds exactly when none of the eight bytes needs
// escaping.
func TestPlain8(t *testing.T) {
	t.Parallel()
	for c := range 256 {
		for pos := range 8 {
			w := []byte("abcdefgh")
			w[pos] = byte(c)
			got := plain8(uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
				uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56)
			want := c >= 0x20 && c < 0x80 && c != '"' && c != '\\'
			if got != want {
				t.Fatalf("plain8 with %#x at %d = %v, want %v", c, pos, got, want)
			}
		}
	}
}

func BenchmarkAppendString(b *testing.B) {
	s := []byte(strings.Repeat("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ejAxMjM0\r\n", 420))
	out := make([]byte, 0, 2*len(s))
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		out = appendString(out[:0], s)
	}
}
