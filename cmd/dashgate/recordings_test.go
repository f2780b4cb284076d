package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

// TestRecordFlags: recording is off by default; --record-terminals and
// its bounds come from flags or their DASHGATE_* variables (the command
// line wins); sizes are parsed, and out-of-range ones refused.
func TestRecordFlags(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string {
		return func(k string) string {
			if k == "HOME" {
				return "/home/t"
			}
			return m[k]
		}
	}
	tests := []struct {
		name      string
		args      []string
		env       map[string]string
		on        bool
		maxBytes  int64
		retention time.Duration
		err       string
	}{
		{name: "off by default", on: false, maxBytes: 64 << 20, retention: 30 * 24 * time.Hour},
		{name: "flags", args: []string{"--record-terminals", "--record-max-bytes", "1MiB", "--record-retention", "48h"},
			on: true, maxBytes: 1 << 20, retention: 48 * time.Hour},
		{name: "environment", env: map[string]string{"DASHGATE_RECORD_TERMINALS": "1", "DASHGATE_RECORD_MAX_BYTES": "2MiB", "DASHGATE_RECORD_RETENTION": "1h"},
			on: true, maxBytes: 2 << 20, retention: time.Hour},
		{name: "the command line wins", args: []string{"--record-terminals=false", "--record-max-bytes", "128KiB"},
			env: map[string]string{"DASHGATE_RECORD_TERMINALS": "true", "DASHGATE_RECORD_MAX_BYTES": "2MiB"}, on: false, maxBytes: 128 << 10, retention: 30 * 24 * time.Hour},
		{name: "kept for good", args: []string{"--record-terminals", "--record-retention", "0"}, on: true, maxBytes: 64 << 20},
		{name: "size too small", args: []string{"--record-max-bytes", "1KiB"}, err: "--record-max-bytes"},
		{name: "not a size", args: []string{"--record-max-bytes", "lots"}, err: "--record-max-bytes"},
		{name: "negative retention", args: []string{"--record-retention", "-1h"}, err: "--record-retention"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := parseConfig(tc.args, env(tc.env), io.Discard)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.RecordTerminals != tc.on || cfg.RecordMaxBytesN != tc.maxBytes || cfg.RecordRetention != tc.retention {
				t.Fatalf("record-terminals %v, max bytes %d, retention %v; want %v, %d, %v",
					cfg.RecordTerminals, cfg.RecordMaxBytesN, cfg.RecordRetention, tc.on, tc.maxBytes, tc.retention)
			}
		})
	}
}
