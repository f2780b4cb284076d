package store

import (
	"bytes"
	"mime"
	"strings"
	"time"
	"unicode/utf8"
)

// Files attached to a prompt (issue 42). The bytes of each are a row of
// their own (Attachment, written by PutAttachment when the page uploads
// it, before the prompt is sent); the prompt's history entry names them
// (Entry.Attachments), and its search text holds their names. They go
// with their session: Delete, Prune and a Batch's Deletes remove them.

// Attachment kinds: what a worker can make of a file (ClassifyAttachment).
const (
	AttachText   = "text"   // UTF-8 text without NUL: inlined, or an embedded text resource
	AttachImage  = "image"  // PNG, JPEG, GIF or WebP: for models and agents that take images
	AttachPDF    = "pdf"    // a PDF document
	AttachBinary = "binary" // anything else
)

// AttachmentRef is a file attached to a message, as its history entry
// names it.
type AttachmentRef struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Type string `json:"type"` // its media type, as dashgate serves it back
	Kind string `json:"kind"` // AttachText, AttachImage, AttachPDF or AttachBinary
	Size int64  `json:"size"` // bytes
}

// Attachment is an attached file with its bytes, as stored.
type Attachment struct {
	AttachmentRef
	SessionID string
	Owner     string
	CreatedAt time.Time
	Data      []byte
}

// AttachmentNames is the text a search finds an entry's attachments by:
// their names, one a line ("" for none).
func AttachmentNames(refs []AttachmentRef) string {
	var b strings.Builder
	for i, a := range refs {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(a.Name)
	}
	return b.String()
}

// SearchText is the text a search matches an entry by: its text, then
// the names of its attachments.
func (e Entry) SearchText() string {
	if len(e.Attachments) == 0 {
		return e.Text
	}
	return e.Text + "\n" + AttachmentNames(e.Attachments)
}

// imageTypes are the image formats models and agents take (the OpenAI
// image_url part and ACP's image block accept these four); an SVG is
// text (it is a document that may script), anything else binary.
var imageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// ClassifyAttachment decides a file's kind and the media type dashgate
// keeps for it, from its bytes first and the type the browser gave
// (declared) second: an image is one whose bytes are PNG, JPEG, GIF or
// WebP; a PDF starts with %PDF-; text is valid UTF-8 without NUL bytes
// (its type: the declared one when it is text/*, else text/plain);
// anything else is binary, kept as application/octet-stream unless
// declared otherwise.
func ClassifyAttachment(data []byte, declared string) (kind, typ string) {
	declared, _, _ = mime.ParseMediaType(declared)
	sniffed := sniffImage(data)
	switch {
	case sniffed != "":
		return AttachImage, sniffed
	case bytes.HasPrefix(data, []byte("%PDF-")):
		return AttachPDF, "application/pdf"
	case utf8.Valid(data) && bytes.IndexByte(data, 0) < 0:
		if strings.HasPrefix(declared, "text/") {
			return AttachText, declared
		}
		return AttachText, "text/plain"
	}
	if declared == "" || strings.HasPrefix(declared, "text/") || imageTypes[declared] || declared == "application/pdf" {
		declared = "application/octet-stream"
	}
	return AttachBinary, declared
}

// sniffImage is the image type of data's magic bytes, or "".
func sniffImage(data []byte) string {
	switch {
	case bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")):
		return "image/png"
	case bytes.HasPrefix(data, []byte("\xff\xd8\xff")):
		return "image/jpeg"
	case bytes.HasPrefix(data, []byte("GIF87a")), bytes.HasPrefix(data, []byte("GIF89a")):
		return "image/gif"
	case len(data) >= 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "WEBP":
		return "image/webp"
	}
	return ""
}
