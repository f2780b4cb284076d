package workers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzWorkerLine: whatever a worker writes, the line reader returns lines of
// at most the limit or errLineTooLong, and decoding a line never panics.
func FuzzWorkerLine(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"ok":true,"result":{"output":"hi"}}` + "\n",
		`{"id":1,"event":"delta","text":"a"}` + "\n" + `{"id":1,"ok":false,"error":"x"}` + "\n",
		"garbage\n", "\n\n", `{"id":"1"}`, "no newline at the end",
	} {
		f.Add([]byte(s), 64)
	}
	f.Fuzz(func(t *testing.T, data []byte, limit int) {
		if limit < 1 || limit > 1<<16 {
			limit = 64
		}
		r := bufio.NewReaderSize(bytes.NewReader(data), 16)
		for {
			line, err := readLine(r, limit)
			if errors.Is(err, errLineTooLong) {
				return
			}
			if err != nil {
				return
			}
			if len(line) > limit+1 {
				t.Fatalf("line of %d bytes over the limit %d", len(line), limit)
			}
			var msg workerLine
			json.Unmarshal(line, &msg)
		}
	})
}
