package sessions

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dashgate/dashgate/store"
)

// This file owns the files attached to prompts (issue 42): their upload
// into a live session (bounded, stored at once), the ones uploaded and not
// sent yet (a session's pending files), their download by their owner,
// and what a prompt carrying them sends its worker.
//
// A file is uploaded before the prompt that sends it: Attach stores its
// bytes (the store's PutAttachment) and keeps it pending in the session's
// memory; Prompt takes pending files (or files an earlier prompt of the
// session sent, for a regenerate) by id and names them in its entry; the
// turn reads their bytes back from the store and gives them to the worker
// in the prompt's params (attachments: [{id, name, type, kind, size,
// data}], data base64). Every bound is an *AttachLimitError naming its
// flag.

// AttachLimits bounds attached files (Config.Attach; --attach-max-*).
// Zero fields take the defaults.
type AttachLimits struct {
	MaxBytes int64 // one file, bytes (DefaultAttachMaxBytes)
	MaxFiles int   // one prompt's files, and a session's files waiting to be sent (DefaultAttachMaxFiles)
	MaxTotal int64 // one prompt's files together, and a session's waiting ones, bytes (DefaultAttachMaxTotal)
}

// The defaults of AttachLimits.
const (
	DefaultAttachMaxBytes = 10 << 20
	DefaultAttachMaxFiles = 10
	DefaultAttachMaxTotal = 20 << 20
)

// WithDefaults is l with the defaults in its zero fields.
func (l AttachLimits) WithDefaults() AttachLimits {
	l.defaults()
	return l
}

func (l *AttachLimits) defaults() {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultAttachMaxBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultAttachMaxFiles
	}
	if l.MaxTotal <= 0 {
		l.MaxTotal = DefaultAttachMaxTotal
	}
}

// MaxLine is the longest request line a worker may be sent with these
// limits: a prompt's files base64-encoded, with room for its text and
// history (each JSON-escaped) beside them. dashgate tells its workers
// (DASHGATE_MAX_LINE).
func (l AttachLimits) MaxLine(agentContext int) int {
	l.defaults()
	files := (l.MaxTotal + 2) / 3 * 4
	return int(files) + 6*(MaxPromptBytes+max(agentContext, 32<<10)) + 1<<20
}

// MaxPromptBytes bounds a prompt's text (the chat gateway refuses longer:
// -32602); MaxLine counts it.
const MaxPromptBytes = 64 << 10

// The flags an *AttachLimitError names.
const (
	LimitAttachBytes = "--attach-max-bytes"
	LimitAttachFiles = "--attach-max-files"
	LimitAttachTotal = "--attach-max-total"
)

// AttachLimitError: a file, or a prompt's (or a session's waiting) files
// together, are beyond AttachLimits. Nothing was stored or sent.
type AttachLimitError struct {
	Limit string // LimitAttachBytes, LimitAttachFiles or LimitAttachTotal
	Max   int64  // the limit's value (bytes, or files)
	Name  string // the file, for LimitAttachBytes
	Got   int64  // what was asked for: its size, the files, their bytes
}

func (e *AttachLimitError) Error() string {
	switch e.Limit {
	case LimitAttachBytes:
		if e.Got > 0 {
			return fmt.Sprintf("%s is %s: a file may be at most %s (%s)", e.Name, FormatBytes(e.Got), FormatBytes(e.Max), e.Limit)
		}
		return fmt.Sprintf("%s is over %s: a file may be at most %s (%s)", e.Name, FormatBytes(e.Max), FormatBytes(e.Max), e.Limit)
	case LimitAttachFiles:
		return fmt.Sprintf("%d files: a message may carry at most %d (%s)", e.Got, e.Max, e.Limit)
	default:
		return fmt.Sprintf("%s of files: a message may carry at most %s in all (%s)", FormatBytes(e.Got), FormatBytes(e.Max), e.Limit)
	}
}

// UnknownAttachmentError: a prompt named an attachment the session has
// neither waiting nor sent before (or another session's, or one taken
// back). Nothing was recorded.
type UnknownAttachmentError struct{ ID string }

func (e *UnknownAttachmentError) Error() string {
	return fmt.Sprintf("invalid params: no attachment %q in this session (upload it first)", e.ID)
}

// FormatBytes says a size as a person reads it: "512 B", "1.5 KiB", "10 MiB".
func FormatBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/(1<<10))) + " KiB"
	case n < 1<<30:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/(1<<20))) + " MiB"
	}
	return trimZero(fmt.Sprintf("%.1f", float64(n)/(1<<30))) + " GiB"
}

func trimZero(s string) string { return strings.TrimSuffix(s, ".0") }

// NewAttachment is a file as a page uploads it.
type NewAttachment struct {
	Name string    // its name (the page's file name); cleaned by Attach
	Type string    // the media type the browser gave ("" when none)
	Size int64     // its size when the request said it (Content-Length), else -1
	Body io.Reader // its bytes
}

// MaxAttachName bounds an attachment's name, bytes (a longer one is cut
// at a character).
const MaxAttachName = 255

// attachName is name as dashgate keeps it: its last path element, control
// characters dropped, at most MaxAttachName bytes; "file" when nothing is
// left.
func attachName(name string) string {
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return -1
		}
		return r
	}, name)
	name = strings.TrimSpace(name)
	for len(name) > MaxAttachName {
		_, n := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-n]
	}
	if name == "" || name == "." || name == ".." {
		return "file"
	}
	return name
}

// pendingFiles are a live session's files uploaded and not sent yet, and
// the uploads under way (counted against the same bounds).
type pendingFiles struct {
	files     []store.AttachmentRef // in upload order
	uploading int                   // uploads reading their bytes
	reserved  int64                 // bytes of uploads being stored
}

func (p *pendingFiles) bytes() int64 {
	n := p.reserved
	for _, f := range p.files {
		n += f.Size
	}
	return n
}

func (p *pendingFiles) take(id string) (store.AttachmentRef, bool) {
	i := slices.IndexFunc(p.files, func(f store.AttachmentRef) bool { return f.ID == id })
	if i < 0 {
		return store.AttachmentRef{}, false
	}
	f := p.files[i]
	p.files = slices.Delete(p.files, i, i+1)
	return f, true
}

// Attach stores a file uploaded into session sid of p's, which must be
// live here (a page uploads into the session it shows), and keeps it
// waiting for the prompt that sends it. It reads f.Body up to the limit
// outside the registry's lock. Errors: ErrNotFound (unknown, ended,
// another user's), *AttachLimitError (the file over MaxBytes; the
// session's waiting files over MaxFiles or MaxTotal), *StoreError, the
// body's read error.
func (r *Registry) Attach(ctx context.Context, p Principal, sid string, f NewAttachment) (store.AttachmentRef, error) {
	lim := r.cfg.Attach
	name := attachName(f.Name)
	if f.Size > lim.MaxBytes {
		return store.AttachmentRef{}, &AttachLimitError{Limit: LimitAttachBytes, Max: lim.MaxBytes, Name: name, Got: f.Size}
	}
	r.mu.Lock()
	s := r.findLocked(p, sid, accessUse)
	if s == nil || s.terminalOnly {
		r.mu.Unlock()
		return store.AttachmentRef{}, ErrNotFound
	}
	if n := len(s.pending.files) + s.pending.uploading + 1; n > lim.MaxFiles {
		r.mu.Unlock()
		return store.AttachmentRef{}, &AttachLimitError{Limit: LimitAttachFiles, Max: int64(lim.MaxFiles), Got: int64(n)}
	}
	s.pending.uploading++
	owner := s.owner
	r.mu.Unlock()
	release := func(size int64) {
		r.mu.Lock()
		s.pending.uploading--
		s.pending.reserved -= size
		r.mu.Unlock()
	}

	var buf bytes.Buffer
	if f.Size > 0 {
		buf.Grow(int(f.Size) + 1)
	}
	n, err := buf.ReadFrom(io.LimitReader(f.Body, lim.MaxBytes+1))
	if err != nil {
		release(0)
		return store.AttachmentRef{}, err
	}
	if n > lim.MaxBytes {
		release(0)
		return store.AttachmentRef{}, &AttachLimitError{Limit: LimitAttachBytes, Max: lim.MaxBytes, Name: name}
	}
	r.mu.Lock()
	if total := s.pending.bytes() + n; total > lim.MaxTotal {
		s.pending.uploading--
		r.mu.Unlock()
		return store.AttachmentRef{}, &AttachLimitError{Limit: LimitAttachTotal, Max: lim.MaxTotal, Got: total}
	}
	s.pending.reserved += n
	r.mu.Unlock()

	kind, typ := store.ClassifyAttachment(buf.Bytes(), f.Type)
	ref := store.AttachmentRef{ID: newID(), Name: name, Type: typ, Kind: kind, Size: n}
	err = r.cfg.Store.PutAttachment(ctx, store.Attachment{AttachmentRef: ref, SessionID: sid, Owner: owner, CreatedAt: time.Now(), Data: buf.Bytes()})
	if err != nil {
		release(n)
		return store.AttachmentRef{}, &StoreError{err}
	}
	r.mu.Lock()
	s.pending.uploading--
	s.pending.reserved -= n
	gone := !s.live()
	if !gone {
		s.pending.files = append(s.pending.files, ref)
	}
	r.mu.Unlock()
	if gone { // it ended while the bytes were stored: nothing will send them
		r.cfg.Store.DeleteAttachment(context.WithoutCancel(ctx), owner, sid, ref.ID)
		return store.AttachmentRef{}, ErrNotFound
	}
	r.log.Debug("attachment stored", "sid", sid, "user", owner, "kind", kind, "size", n)
	return ref, nil
}

// Unattach takes back a file of p's session sid that waits to be sent
// (the page's chip removed before sending): it is deleted. Errors:
// ErrNotFound (the session, or no such file waiting: one sent is part of
// the conversation), *StoreError.
func (r *Registry) Unattach(ctx context.Context, p Principal, sid, id string) error {
	r.mu.Lock()
	s := r.findLocked(p, sid, accessUse)
	if s == nil {
		r.mu.Unlock()
		return ErrNotFound
	}
	_, ok := s.pending.take(id)
	owner := s.owner
	r.mu.Unlock()
	if !ok {
		return ErrNotFound
	}
	if _, err := r.cfg.Store.DeleteAttachment(ctx, owner, sid, id); err != nil {
		return &StoreError{err}
	}
	return nil
}

// Attachment returns the file id of p's session sid, live here or stored,
// with its bytes: for its owner only (an admin reaps, never reads).
// Errors: ErrNotFound (unknown, another user's, another session's,
// deleted), *StoreError.
func (r *Registry) Attachment(ctx context.Context, p Principal, sid, id string) (store.Attachment, error) {
	r.mu.Lock()
	s := r.findLocked(p, sid, accessUse)
	owner := ""
	if s != nil {
		owner = s.owner
	}
	r.mu.Unlock()
	if s == nil {
		r.journal.flush(ctx)
		row, err := r.archive.stored(ctx, p, sid)
		if err != nil {
			return store.Attachment{}, err
		}
		owner = row.Owner
	}
	a, err := r.cfg.Store.Attachment(ctx, owner, sid, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.Attachment{}, ErrNotFound
	case err != nil:
		return store.Attachment{}, &StoreError{err}
	}
	return a, nil
}

// promptFilesLocked resolves the attachment ids of a prompt of s: each a
// file waiting in s (taken from the waiting ones) or one an earlier prompt
// of s in memory sent (a regenerate sends its prompt's files again), each
// once, within lim (Config.Attach). On error nothing is taken. The
// registry's mutex must be held.
func (s *Session) promptFilesLocked(ids []string, lim AttachLimits) ([]store.AttachmentRef, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var refs []store.AttachmentRef
	var total int64
	for _, id := range ids {
		if slices.ContainsFunc(refs, func(f store.AttachmentRef) bool { return f.ID == id }) {
			continue
		}
		f, ok := s.sentFileLocked(id)
		if i := slices.IndexFunc(s.pending.files, func(f store.AttachmentRef) bool { return f.ID == id }); i >= 0 {
			f, ok = s.pending.files[i], true
		}
		if !ok {
			return nil, &UnknownAttachmentError{ID: id}
		}
		refs = append(refs, f)
		total += f.Size
	}
	if len(refs) > lim.MaxFiles {
		return nil, &AttachLimitError{Limit: LimitAttachFiles, Max: int64(lim.MaxFiles), Got: int64(len(refs))}
	}
	if total > lim.MaxTotal {
		return nil, &AttachLimitError{Limit: LimitAttachTotal, Max: lim.MaxTotal, Got: total}
	}
	for _, f := range refs {
		s.pending.take(f.ID)
	}
	return refs, nil
}

// sentFileLocked finds the file id among the prompts of s in memory.
func (s *Session) sentFileLocked(id string) (store.AttachmentRef, bool) {
	for i := len(s.history) - 1; i >= 0; i-- {
		for _, f := range s.history[i].Attachments {
			if f.ID == id {
				return f, true
			}
		}
	}
	return store.AttachmentRef{}, false
}

// workerFile is an attachment as a prompt's params give it to the worker
// (PROTOCOL.md §4): Data is base64 in JSON.
type workerFile struct {
	store.AttachmentRef
	Data []byte `json:"data"`
}

// workerFiles reads the bytes of the files refs of session sid of owner
// from the store, for a turn's worker. Errors: *StoreError (the turn
// fails: nothing is dropped silently).
func (a *archive) workerFiles(ctx context.Context, owner, sid string, refs []store.AttachmentRef) ([]workerFile, error) {
	out := make([]workerFile, 0, len(refs))
	for _, f := range refs {
		file, err := a.store.Attachment(ctx, owner, sid, f.ID)
		if err != nil {
			return nil, &StoreError{fmt.Errorf("attachment %s: %w", f.Name, err)}
		}
		out = append(out, workerFile{AttachmentRef: f, Data: file.Data})
	}
	return out, nil
}

// sentEarlier is what an earlier prompt's history entry adds for the model
// about the files it carried (their bytes went with that prompt only):
// "\n\n[attached: a.txt, b.png]", "" for none.
func sentEarlier(refs []store.AttachmentRef) string {
	if len(refs) == 0 {
		return ""
	}
	names := make([]string, len(refs))
	for i, f := range refs {
		names[i] = f.Name
	}
	return "\n\n[attached: " + strings.Join(names, ", ") + "]"
}
