package acpbridge_test

import (
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
)

// TestAttachmentBlocks (issue 42): a prompt's files reach the agent as
// content blocks its promptCapabilities take, and a notice (before any
// of the reply) says which were not sent: a text file is an embedded
// text resource for an agent that takes embeddedContext, else a text
// block holding it fenced with its name; an image an image block for an
// agent that takes images, else a notice; a PDF always a notice. The
// test agent's blocks turn says what its prompt's blocks held.
func TestAttachmentBlocks(t *testing.T) {
	t.Parallel()
	png := append([]byte("\x89PNG\r\n\x1a\n"), 0, 1, 2, 250)
	files := []map[string]any{
		{"id": "a1", "name": "notes.md", "type": "text/markdown", "kind": "text", "size": 9, "data": []byte("# Notes\n")},
		{"id": "a2", "name": "chart.png", "type": "image/png", "kind": "image", "size": len(png), "data": png},
		{"id": "a3", "name": "report.pdf", "type": "application/pdf", "kind": "pdf", "size": 8, "data": []byte("%PDF-1.7")},
	}
	const (
		resource  = "resource(attachment://a1/notes.md,text/markdown,# Notes\n)"
		inlined   = "text(notes.md:\n```\n# Notes\n```)"
		noPDF     = "this agent cannot read PDFs: report.pdf not sent"
		noImage   = "this agent cannot read images: chart.png not sent"
		textBlock = "text(blocks)"
	)
	image := "image(image/png," + strconv.Itoa(len(base64.StdEncoding.EncodeToString(png))) + ")"
	for _, tc := range []struct {
		caps    string
		blocks  []string
		notices []string
	}{
		{"", []string{textBlock, inlined}, []string{noImage, noPDF}},
		{"embedded", []string{textBlock, resource}, []string{noImage, noPDF}},
		{"image", []string{textBlock, inlined, image}, []string{noPDF}},
		{"image,embedded", []string{textBlock, resource, image}, []string{noPDF}},
	} {
		t.Run("caps "+tc.caps, func(t *testing.T) {
			t.Parallel()
			b := startBridge(t, append([]string{"/usr/bin/env", "ACPTEST_CAPS=" + tc.caps}, testAgentCmd("")...))
			b.send(1, "prompt", map[string]any{"text": "blocks", "turn_id": "t1", "attachments": files})
			r := b.reply(1, turnWait)
			if got, want := r.result().str("output"), strings.Join(tc.blocks, " | "); got != want {
				t.Errorf("the agent's blocks:\n got  %q\n want %q", got, want)
			}
			var notices []string
			for _, m := range b.events(1, "") {
				switch m.event() {
				case "notice":
					notices = append(notices, m.str("text"))
				case "delta":
					if len(notices) < len(tc.notices) {
						t.Errorf("a delta before the notices: %v", b.events(1, ""))
					}
				}
			}
			if strings.Join(notices, "|") != strings.Join(tc.notices, "|") {
				t.Errorf("notices %q; want %q", notices, tc.notices)
			}
			// A slash command carries no files, and a prompt without any
			// is its text alone.
			b.send(2, "prompt", map[string]any{"text": "blocks", "turn_id": "t2"})
			if got := b.reply(2, turnWait).result().str("output"); got != textBlock {
				t.Errorf("a prompt without files: %q", got)
			}
		})
	}
}
