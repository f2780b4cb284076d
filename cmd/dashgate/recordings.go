package main

import (
	"log/slog"
	"path/filepath"

	"github.com/dashgate/dashgate/recordings"
	"github.com/dashgate/dashgate/sessions"
)

// openRecordings opens <state-dir>/recordings when --record-terminals is
// on (nil, nil when it is off). The caller runs its Run (the retention
// sweep, at once and then periodically) and, after the registry ended
// every terminal, its Wait.
func openRecordings(cfg config, log *slog.Logger) (*recordings.Store, error) {
	if !cfg.RecordTerminals {
		return nil, nil
	}
	st, err := recordings.Open(recordings.Config{
		Dir: filepath.Join(cfg.StateDir, "recordings"), MaxBytes: cfg.RecordMaxBytesN,
		Retention: cfg.RecordRetention, Log: log,
	})
	if err != nil {
		return nil, &startupError{err}
	}
	log.Info("terminal recordings on", "dir", filepath.Join(cfg.StateDir, "recordings"),
		"max_bytes", cfg.RecordMaxBytesN, "retention_ms", cfg.RecordRetention.Milliseconds())
	return st, nil
}

// recordFunc is sessions.Config.Record for st (nil: terminals are not
// recorded).
func recordFunc(st *recordings.Store) func(owner, sid string, cols, rows uint16) sessions.Recording {
	if st == nil {
		return nil
	}
	return func(owner, sid string, cols, rows uint16) sessions.Recording {
		return st.Start(owner, sid, cols, rows)
	}
}
