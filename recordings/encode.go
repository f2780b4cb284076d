package recordings

import (
	"strconv"
	"time"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// appendEvent appends one event line, [seconds, "kind", "data"]\n, with
// data as a JSON string (appendString).
func appendEvent(out []byte, at time.Duration, kind byte, data []byte) []byte {
	out = append(out, '[')
	out = strconv.AppendFloat(out, at.Seconds(), 'f', 6, 64)
	out = append(out, ", \""...)
	out = append(out, kind)
	out = append(out, "\", "...)
	out = appendString(out, data)
	return append(out, "]\n"...)
}

// appendString appends s as a JSON string: quotes, backslashes and control
// characters escaped, UTF-8 kept, every byte that is not part of valid
// UTF-8 replaced by U+FFFD (as encoding/json does; a JSON text is UTF-8).
// Runs of plain ASCII are copied at once.
func appendString(out, s []byte) []byte {
	out = append(out, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\\' {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
		}
		out = append(out, s[start:i]...)
		switch c {
		case '"', '\\':
			out = append(out, '\\', c)
		case '\n':
			out = append(out, '\\', 'n')
		case '\r':
			out = append(out, '\\', 'r')
		case '\t':
			out = append(out, '\\', 't')
		default:
			if c < 0x20 {
				out = append(out, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			} else {
				out = append(out, "\\ufffd"...)
			}
		}
		i++
		start = i
	}
	out = append(out, s[start:]...)
	return append(out, '"')
}

// splitIncomplete returns b without a UTF-8 sequence cut short at its end,
// and that cut sequence (at most 3 bytes; nil when there is none): the next
// output continues it.
func splitIncomplete(b []byte) (whole, tail []byte) {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if !utf8.RuneStart(b[i]) {
			continue
		}
		if b[i] >= utf8.RuneSelf && !utf8.FullRune(b[i:]) {
			return b[:i], b[i:]
		}
		break
	}
	return b, nil
}
