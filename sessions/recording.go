package sessions

// This file owns a terminal's recording (Config.Record, --record-terminals):
// when it starts, what goes into it, and its close.

// Recording is a terminal's recording (recordings.Recording has it). The
// terminal owns it: its reader calls Output with each read of the pty,
// its resizes call Resize, and its end calls Close once the reader
// returned. Output and Resize must not block: they queue, or drop.
// Input is never given to it.
type Recording interface {
	Output(p []byte)
	Resize(cols, rows uint16)
	// Close asks the recording to finish; it returns at once.
	Close()
	// Path is its file: the terminal's "worker closed" record names it
	// (key recording).
	Path() string
}

// startRecording starts t's recording for owner, when recording is on and
// t has none and has not ended: with the output its ring holds already
// (a spare's first prompt) as the first event. Its file goes on the
// program's "worker closed" record as recording=<path>. Call it before
// the terminal's first attachment, outside the registry's lock.
func (t *Terminal) startRecording(owner string) {
	record := t.r.cfg.Record
	if record == nil {
		return
	}
	t.mu.Lock()
	if t.rec != nil || t.ended {
		t.mu.Unlock()
		return
	}
	rec := record(owner, t.s.id, t.cols, t.rows)
	if start, end := t.ring.Start(), t.ring.End(); end > start {
		early := make([]byte, end-start)
		rec.Output(early[:t.ring.ReadAt(early, start)])
	}
	t.rec = rec
	t.mu.Unlock()
	if n, ok := t.pty.(interface{ AddCloseAttr(string, any) }); ok {
		n.AddCloseAttr("recording", rec.Path())
	}
}

// recorded reports whether t is being recorded (the hello says so).
// t.mu must be held.
func (t *Terminal) recordedLocked() bool { return t.rec != nil }

// closeRecording closes t's recording, if any, once its reader returned:
// nothing more is recorded. It does not wait for the file.
func (t *Terminal) closeRecording() {
	t.mu.Lock()
	rec := t.rec
	t.mu.Unlock()
	if rec != nil {
		rec.Close()
	}
}
