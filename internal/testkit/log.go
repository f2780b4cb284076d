package testkit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
)

// Record is one JSON log record as slog's JSON handler writes it: "time",
// "level" ("DEBUG", "INFO", "WARN", "ERROR"), "msg" and the attributes.
// Numbers are float64, as encoding/json decodes them.
type Record map[string]any

// Msg is the record's message.
func (r Record) Msg() string { return r.Str("msg") }

// Str is the string value of key, "" when absent or not a string.
func (r Record) Str(key string) string {
	s, _ := r[key].(string)
	return s
}

// Int is the numeric value of key as an int; ok is false when it is absent
// or not a number.
func (r Record) Int(key string) (int, bool) {
	f, ok := r[key].(float64)
	return int(f), ok
}

// String is the record as one JSON object (keys sorted).
func (r Record) String() string {
	b, _ := json.Marshal(map[string]any(r))
	return string(b)
}

// ParseRecords decodes JSON lines. Lines that are not a JSON object (a last
// line still being written, a panic's trace) are skipped.
func ParseRecords(r io.Reader) ([]Record, error) {
	var out []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var rec Record
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec != nil {
			out = append(out, rec)
		}
	}
	return out, sc.Err()
}

// filter returns the records with message msg ("" for all).
func filter(all []Record, msg string) []Record {
	if msg == "" {
		return all
	}
	var out []Record
	for _, r := range all {
		if r.Msg() == msg {
			out = append(out, r)
		}
	}
	return out
}

// waitRecord polls all() until one of the records after the first mark
// matches, and returns it; the error is ctx's.
func waitRecord(ctx context.Context, all func() []Record, mark int, match func(Record) bool) (Record, error) {
	var found Record
	err := Poll(ctx, func() bool {
		recs := all()
		if mark > len(recs) {
			return false
		}
		for _, r := range recs[mark:] {
			if match(r) {
				found = r
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("wait for a log record: %w", err)
	}
	return found, nil
}

// LogBuffer is a concurrency-safe in-memory log: the io.Writer of a slog
// JSON handler (NewLogger), read back as Records.
type LogBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	recs []Record // parsed at each Write: reading is O(records), not O(bytes)
}

// NewLogger returns a JSON logger at Debug level writing into a new
// LogBuffer.
func NewLogger() (*slog.Logger, *LogBuffer) {
	b := &LogBuffer{}
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// Write appends p; slog writes one whole record per call.
func (b *LogBuffer) Write(p []byte) (int, error) {
	recs, _ := ParseRecords(bytes.NewReader(p))
	b.mu.Lock()
	defer b.mu.Unlock()
	b.recs = append(b.recs, recs...)
	return b.buf.Write(p)
}

func (b *LogBuffer) all() []Record {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.recs[:len(b.recs):len(b.recs)]
}

// Records returns the records logged so far whose msg is msg ("" for all),
// in order.
func (b *LogBuffer) Records(msg string) []Record { return filter(b.all(), msg) }

// Mark is the number of records logged so far, for WaitRecord.
func (b *LogBuffer) Mark() int { return len(b.all()) }

// WaitRecord polls until a record after the first mark ones matches, and
// returns it; it fails when ctx ends first.
func (b *LogBuffer) WaitRecord(ctx context.Context, mark int, match func(Record) bool) (Record, error) {
	return waitRecord(ctx, b.all, mark, match)
}

// String is the log so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// LogFile is a JSON-lines log file another process writes (dashgate's
// --log-format json output). It is read anew at each call.
type LogFile struct{ Path string }

func (f LogFile) all() []Record {
	fh, err := os.Open(f.Path)
	if err != nil {
		return nil
	}
	defer fh.Close()
	recs, _ := ParseRecords(fh)
	return recs
}

// Records returns the records written so far whose msg is msg ("" for
// all); none when the file cannot be read.
func (f LogFile) Records(msg string) []Record { return filter(f.all(), msg) }

// Mark is the number of records written so far, for WaitRecord.
func (f LogFile) Mark() int { return len(f.all()) }

// WaitRecord polls until a record after the first mark ones matches, and
// returns it; it fails when ctx ends first.
func (f LogFile) WaitRecord(ctx context.Context, mark int, match func(Record) bool) (Record, error) {
	return waitRecord(ctx, f.all, mark, match)
}

// Tail is the last n lines of the file, for failure messages.
func (f LogFile) Tail(n int) string {
	b, _ := os.ReadFile(f.Path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// SyncBuffer is a bytes.Buffer safe for one writer and concurrent readers:
// a child's or a worker's stderr captured by a test.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
