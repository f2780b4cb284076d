// Package recordings writes terminal recordings (--record-terminals) as
// asciicast v2 files, and lists, opens and expires them.
//
// Format. A recording is one file of newline-separated JSON
// (https://docs.asciinema.org/manual/asciicast/v2/): a header
//
//	{"version":2,"width":80,"height":24,"timestamp":1767225600,"env":{"TERM":"xterm-256color"},"title":"dashgate terminal of session 3f…"}
//
// then one event a line, [seconds, code, data], seconds since the
// recording began (a float with microseconds, never decreasing):
//
//	[0.104213, "o", "$ "]          output, as UTF-8 text (a character split
//	                                  across two reads is joined; bytes that
//	                                  are not UTF-8 become U+FFFD)
//	[2.5, "r", "120x40"]            a resize, COLSxROWS
//	[3.0, "m", "dashgate: …"]       a marker: output was left out (the
//	                                  writer fell behind, or the size limit
//	                                  was reached: then it is the last line)
//
// Input is never recorded: Recording has no method for it (what a shell
// echoes is output, and recorded as such; what a program reads with echo
// off is not).
//
// Files. Each is <Dir>/<owner>/<sid>-<start>.cast (DirOf: the owner's
// name, escaped; File: the start in UTC to the millisecond), mode 0600 in
// directories 0700, owned by dashgate (never by the session's Unix
// account: the user can read it through dashgate, not change it).
// Paths are only ever built from an owner's name and a name File made or
// ValidFile accepted: nothing a client sends reaches the file system
// otherwise.
//
// Ownership. A [Store] owns its directory and every recording's writer
// goroutine. [Store.Start] returns a [Recording] that belongs to the
// caller (a terminal): Output and Resize may be called from any goroutine
// and never wait for the disk (they queue, bounded by Config.QueueBytes;
// past it they drop and the recording is marked truncated); Close, once,
// asks the writer to finish and returns at once, and Done is closed once
// the file is complete and closed. [Store.Wait] blocks until every writer
// returned (or ctx ends); [Store.Run] sweeps files older than
// Config.Retention, at once and then periodically, until ctx ends.
package recordings
