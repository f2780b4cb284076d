package workers

import (
	"unicode/utf16"
	"unicode/utf8"
)

// decodeDelta decodes line when it is a delta event in the form workers
// write, {"id":N,"event":"delta","text":"..."} (these three keys, each
// once, in any order, with the white space JSON allows), without
// allocating: its id, and its text unquoted into buf[:0] (grown when
// needed; the caller keeps it for the next line). ok is false for any
// other line and for one it does not take (another key, an escaped key,
// an id that is not an integer, a string JSON does not allow): then
// json.Unmarshal decodes the line as before, so it alone decides what
// every other line means. Unquoting is encoding/json's: invalid UTF-8 and
// lone surrogates become U+FFFD. json.Unmarshal of each delta into a
// workerLine cost five allocations (issue 43); FuzzDecodeDelta holds this
// to it.
func decodeDelta(line, buf []byte) (id int64, text []byte, ok bool) {
	i := skipSpace(line, 0)
	if i >= len(line) || line[i] != '{' {
		return 0, nil, false
	}
	var seen [3]bool // id, event, text
	for {
		i = skipSpace(line, i+1)
		key, end, plain := rawString(line, i)
		if !plain {
			return 0, nil, false
		}
		i = skipSpace(line, end)
		if i >= len(line) || line[i] != ':' {
			return 0, nil, false
		}
		i = skipSpace(line, i+1)
		var k int
		switch string(key) { // no allocation: a conversion compared
		case "id":
			k = 0
			id, i, ok = integer(line, i)
		case "event":
			k = 1
			var name []byte
			name, i, ok = rawString(line, i)
			ok = ok && string(name) == "delta"
		case "text":
			k = 2
			text, i, ok = unquote(line, i, buf[:0])
		default:
			return 0, nil, false
		}
		if !ok || seen[k] {
			return 0, nil, false
		}
		seen[k] = true
		i = skipSpace(line, i)
		if i >= len(line) {
			return 0, nil, false
		}
		if line[i] == '}' {
			break
		}
		if line[i] != ',' {
			return 0, nil, false
		}
	}
	if skipSpace(line, i+1) != len(line) || seen != [3]bool{true, true, true} {
		return 0, nil, false
	}
	return id, text, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// rawString returns the content of the JSON string at b[i:] when it has
// no escape and only printable ASCII, and the index after it.
func rawString(b []byte, i int) (s []byte, end int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c < 0x20 || c == '\\' || c >= utf8.RuneSelf:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// integer parses the JSON integer at b[i:] (no fraction, no exponent)
// that fits an int64, and returns the index after it.
func integer(b []byte, i int) (n int64, end int, ok bool) {
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start := i
	var u uint64
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if i-start >= 18 { // 19 digits may overflow: left to json.Unmarshal
			return 0, 0, false
		}
		u = u*10 + uint64(b[i]-'0')
	}
	if i == start || b[start] == '0' && i-start > 1 {
		return 0, 0, false
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return 0, 0, false
	}
	n = int64(u)
	if neg {
		n = -n
	}
	return n, i, true
}

// unquote appends the content of the JSON string at b[i:] to buf,
// unescaped as encoding/json unescapes it, and returns the index after
// it; ok is false for a string JSON does not allow (a control character,
// a bad escape, no closing quote).
func unquote(b []byte, i int, buf []byte) (s []byte, end int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	j := i + 1
	start := j
	for j < len(b) {
		c := b[j]
		switch {
		case c == '"':
			return append(buf, b[start:j]...), j + 1, true
		case c < 0x20:
			return nil, 0, false
		case c < utf8.RuneSelf && c != '\\':
			j++
			continue
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(b[j:])
			if r == utf8.RuneError && size == 1 {
				buf = append(buf, b[start:j]...)
				buf = utf8.AppendRune(buf, utf8.RuneError)
				j++
				start = j
				continue
			}
			j += size
			continue
		}
		// a backslash
		buf = append(buf, b[start:j]...)
		if j+1 >= len(b) {
			return nil, 0, false
		}
		switch e := b[j+1]; e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r := hex4(b, j+2)
			if r < 0 {
				return nil, 0, false
			}
			j += 6
			if utf16.IsSurrogate(r) {
				if r2 := hex4(b, j+2); j+1 < len(b) && b[j] == '\\' && b[j+1] == 'u' && r2 >= 0 {
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						buf = utf8.AppendRune(buf, dec)
						j += 6
						start = j
						continue
					}
				}
				r = utf8.RuneError
			}
			buf = utf8.AppendRune(buf, r)
			start = j
			continue
		default:
			return nil, 0, false
		}
		j += 2
		start = j
	}
	return nil, 0, false
}

// hex4 is the value of the four hex digits at b[i:], or -1.
func hex4(b []byte, i int) rune {
	if i+4 > len(b) {
		return -1
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}
