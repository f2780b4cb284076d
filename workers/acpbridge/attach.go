package acpbridge

import (
	"encoding/base64"
	"net/url"
	"strings"

	acp "github.com/coder/acp-go-sdk"

	"github.com/dashgate/dashgate/workers/jsonl"
)

// A prompt's files (PROTOCOL.md §4, issue 42) become content blocks of
// its session/prompt, as the agent's promptCapabilities (initialize) let
// them: a text file an embedded text resource when it takes
// embeddedContext, else a text block holding it fenced, with its name
// (the baseline every agent takes); an image an image block when it
// takes images; anything else, and an image for an agent that takes
// none, is not sent, and a notice says so in the chat. (A PDF could be
// an embedded blob resource, but agents that take embeddedContext read
// its text resources: Claude Code's adapter, claude-agent-acp, drops a
// blob without a word.)

// promptBlocks is p's prompt as ACP content blocks for an agent with
// caps; notes are the notices of the files not sent.
func promptBlocks(p promptParams, caps acp.PromptCapabilities) (blocks []acp.ContentBlock, notes []string) {
	blocks = []acp.ContentBlock{acp.TextBlock(p.Text)}
	for _, a := range p.Attachments {
		switch {
		case a.Kind == jsonl.KindText && caps.EmbeddedContext:
			blocks = append(blocks, acp.ResourceBlock(acp.EmbeddedResourceResource{TextResourceContents: &acp.TextResourceContents{
				Uri: attachmentURI(a), MimeType: acp.Ptr(a.Type), Text: string(a.Data),
			}}))
		case a.Kind == jsonl.KindText:
			blocks = append(blocks, acp.TextBlock(a.Name+":\n"+fenced(string(a.Data))))
		case a.Kind == jsonl.KindImage && caps.Image:
			blocks = append(blocks, acp.ImageBlock(base64.StdEncoding.EncodeToString(a.Data), a.Type))
		default:
			notes = append(notes, jsonl.NotSent(a))
		}
	}
	return blocks, notes
}

// attachmentURI names an attached file in a resource block: it is no
// file of the agent's machine, so no file: URI.
func attachmentURI(a jsonl.Attachment) string {
	return "attachment://" + url.PathEscape(a.ID) + "/" + url.PathEscape(a.Name)
}

// fenced puts text in a fenced block longer than any run of backticks in
// it.
func fenced(text string) string {
	n, run := 3, 0
	for i := 0; i < len(text); i++ {
		if text[i] == '`' {
			run++
			n = max(n, run+1)
		} else {
			run = 0
		}
	}
	f := strings.Repeat("`", n)
	return f + "\n" + strings.TrimRight(text, "\n") + "\n" + f
}

// noticeOf is a notice event's fields.
func noticeOf(text string) map[string]any { return map[string]any{"text": text} }
