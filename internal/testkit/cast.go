package testkit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Cast is a parsed asciicast v2 file (a terminal recording, recordings/).
type Cast struct {
	Header map[string]any
	Events []CastEvent
}

// CastEvent is one event line: [At, Code, Data]; At in seconds.
type CastEvent struct {
	At   float64
	Code string // "o" output, "r" resize (Data "COLSxROWS"), "m" marker
	Data string
}

// ParseCast parses b strictly as asciicast v2: a header object with
// version 2, a positive width and height and a timestamp, then events of
// exactly three elements (a number, "o", "r" or "m", a string) whose
// times never decrease, the file ending with a whole line. Any deviation
// is an error naming the line.
func ParseCast(b []byte) (Cast, error) {
	var c Cast
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<26)
	if !sc.Scan() {
		return c, fmt.Errorf("asciicast: no header line")
	}
	if err := json.Unmarshal(sc.Bytes(), &c.Header); err != nil {
		return c, fmt.Errorf("asciicast: header %.200q: %w", sc.Bytes(), err)
	}
	w, _ := c.Header["width"].(float64)
	h, _ := c.Header["height"].(float64)
	_, ts := c.Header["timestamp"].(float64)
	if c.Header["version"] != float64(2) || w < 1 || h < 1 || !ts {
		return c, fmt.Errorf("asciicast: header %v: want version 2, a width, a height and a timestamp", c.Header)
	}
	last := 0.0
	for line := 2; sc.Scan(); line++ {
		var raw []json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil || len(raw) != 3 {
			return c, fmt.Errorf("asciicast: line %d %.200q: not [time, code, data] (%v)", line, sc.Bytes(), err)
		}
		var ev CastEvent
		if json.Unmarshal(raw[0], &ev.At) != nil || json.Unmarshal(raw[1], &ev.Code) != nil || json.Unmarshal(raw[2], &ev.Data) != nil {
			return c, fmt.Errorf("asciicast: line %d %.200q: wrong types", line, sc.Bytes())
		}
		if ev.Code != "o" && ev.Code != "r" && ev.Code != "m" {
			return c, fmt.Errorf("asciicast: line %d: code %q", line, ev.Code)
		}
		if ev.At < last {
			return c, fmt.Errorf("asciicast: line %d: time %v before the previous %v", line, ev.At, last)
		}
		last = ev.At
		c.Events = append(c.Events, ev)
	}
	if err := sc.Err(); err != nil {
		return c, fmt.Errorf("asciicast: %w", err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		return c, fmt.Errorf("asciicast: the file does not end with a whole line: %q", b[max(0, len(b)-80):])
	}
	return c, nil
}

// Output is the data of c's output events, joined.
func (c Cast) Output() string {
	var b strings.Builder
	for _, ev := range c.Events {
		if ev.Code == "o" {
			b.WriteString(ev.Data)
		}
	}
	return b.String()
}

// Of returns c's events of one code.
func (c Cast) Of(code string) []CastEvent {
	var out []CastEvent
	for _, ev := range c.Events {
		if ev.Code == code {
			out = append(out, ev)
		}
	}
	return out
}
