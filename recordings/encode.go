package recordings

import (
	"encoding/binary"
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

// Eight bytes at a time (SWAR): ones is 0x01 in every byte, highs 0x80.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plain8 reports whether the 8 bytes of w are all printable ASCII other
// than '"' and '\\': none at or above 0x80, none below 0x20 (the
// classic "has less than" test, valid once the high bits are clear),
// none equal to either (the "has zero byte" test on w XOR the byte).
func plain8(w uint64) bool {
	if w&highs != 0 || (w-ones*0x20)&^w&highs != 0 {
		return false
	}
	q := w ^ (ones * '"')
	b := w ^ (ones * '\\')
	return (q-ones)&^q&highs == 0 && (b-ones)&^b&highs == 0
}

// appendString appends s as a JSON string: quotes, backslashes and control
// characters escaped, UTF-8 kept, every byte that is not part of valid
// UTF-8 replaced by U+FFFD (as encoding/json does; a JSON text is UTF-8).
// Runs of plain ASCII are found eight bytes at a time and copied at once:
// this is most of a recording's CPU (BenchmarkRecording64MiB).
func appendString(out, s []byte) []byte {
	out = append(out, '"')
	start := 0
	for i := 0; i < len(s); {
		for i+8 <= len(s) && plain8(binary.LittleEndian.Uint64(s[i:])) {
			i += 8
		}
		if i >= len(s) {
			break
		}
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
