package jsonl

import (
	"encoding/json"
	"fmt"
)

// Attachment is a file a prompt carries (PROTOCOL.md §4, issue 42): its
// params' "attachments" are [{"id","name","type","kind","size","data"}],
// data the file's bytes in base64 (decoded here).
type Attachment struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Type string `json:"type"` // its media type
	Kind string `json:"kind"` // KindText, KindImage, KindPDF or KindBinary
	Size int64  `json:"size"`
	Data []byte `json:"data"`
}

// The kinds of an attachment, as dashgate classifies them (store's
// Attach* constants; a test keeps the two in step).
const (
	KindText   = "text"   // UTF-8 without NUL bytes
	KindImage  = "image"  // PNG, JPEG, GIF or WebP (Type says which)
	KindPDF    = "pdf"    // a PDF document
	KindBinary = "binary" // anything else
)

// kindWords is what a person calls each kind, plural, in a note.
var kindWords = map[string]string{
	KindText:   "text files",
	KindImage:  "images",
	KindPDF:    "PDFs",
	KindBinary: "binary files",
}

// NotSent is the note a worker gives (a "notice" event, which dashgate
// shows in the chat and keeps in its history) for a file its agent cannot
// take, so that nothing is dropped without a word: "this agent cannot
// read PDFs: report.pdf not sent".
func NotSent(a Attachment) string {
	words, ok := kindWords[a.Kind]
	if !ok {
		words = a.Kind + " files"
	}
	return fmt.Sprintf("this agent cannot read %s: %s not sent", words, a.Name)
}

// Notice sends the notice event text for request id: dashgate shows it in
// the chat, and keeps it, before the reply.
func (s *Server) Notice(id json.RawMessage, text string) {
	s.Event(id, "notice", map[string]any{"text": text})
}
