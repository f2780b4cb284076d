package agent_test

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/dashgate/dashgate/workers/agent"
)

// visionLLM is a model server whose /v1/models lists "vis" as taking
// images (OpenRouter's architecture.input_modalities) and "txt" as not,
// and which keeps the body of every chat completion request.
type visionLLM struct {
	*httptest.Server
	mu     sync.Mutex
	bodies [][]byte
	lists  int // /v1/models requests
}

func newVisionLLM(t *testing.T) *visionLLM {
	f := &visionLLM{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			f.mu.Lock()
			f.lists++
			f.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"object":"list","data":[
				{"id":"txt","object":"model","created":1,"owned_by":"x","architecture":{"input_modalities":["text"]}},
				{"id":"vis","object":"model","created":1,"owned_by":"x","architecture":{"input_modalities":["text","image"]}},
				{"id":"ollama-vis","object":"model","created":1,"owned_by":"x","capabilities":["completion","vision"]}]}`)
		case "/v1/chat/completions":
			b, _ := io.ReadAll(r.Body)
			f.mu.Lock()
			f.bodies = append(f.bodies, b)
			f.mu.Unlock()
			sse(w, chunk("seen"), done)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

// lastUser is the content of the last user message of the n-th request:
// a string, or its parts.
func (f *visionLLM) lastUser(t *testing.T, n int) (text string, parts []map[string]any) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.bodies) <= n {
		t.Fatalf("the model server got %d requests; want %d", len(f.bodies), n+1)
	}
	var body struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(f.bodies[n], &body); err != nil {
		t.Fatal(err)
	}
	last := body.Messages[len(body.Messages)-1]
	if last.Role != "user" {
		t.Fatalf("the last message is %s's", last.Role)
	}
	if json.Unmarshal(last.Content, &text) == nil {
		return text, nil
	}
	if err := json.Unmarshal(last.Content, &parts); err != nil {
		t.Fatalf("content %s: %v", last.Content, err)
	}
	return "", parts
}

var (
	pngBytes = append([]byte("\x89PNG\r\n\x1a\n"), 0, 1, 2, 250)
	files    = []map[string]any{
		{"id": "a1", "name": "notes.md", "type": "text/markdown", "kind": "text", "size": 22, "data": []byte("# Notes\n```go\nx := 1\n```\n")},
		{"id": "a2", "name": "chart.png", "type": "image/png", "kind": "image", "size": len(pngBytes), "data": pngBytes},
		{"id": "a3", "name": "report.pdf", "type": "application/pdf", "kind": "pdf", "size": 8, "data": []byte("%PDF-1.7")},
		{"id": "a4", "name": "blob.bin", "type": "application/octet-stream", "kind": "binary", "size": 2, "data": []byte{0, 1}},
	}
)

// TestAttachmentsToTheModel (issue 42): a prompt's files reach the model
// server as parts of its user message: the text file inlined with its
// name in a fence longer than its own backticks, the image as an
// image_url data URL for a model that takes images (a --llm-image-models
// pattern, else the model list's capability), and a notice for each file
// not sent (the PDF, the binary, an image for a model that takes none),
// before the reply.
func TestAttachmentsToTheModel(t *testing.T) {
	t.Parallel()
	inlined := "what are these?\n\nnotes.md:\n````\n# Notes\n```go\nx := 1\n```\n````"
	dataURL := "data:image/png;base64," + base64.StdEncoding.EncodeToString(pngBytes)
	for _, tc := range []struct {
		name     string
		patterns []string
		model    string
		image    bool // the image is a part of the request
		lists    int  // /v1/models requests after two prompts
	}{
		{name: "pattern matches", patterns: []string{"gpt-4o*", "*-vision"}, model: "llava-vision", image: true},
		{name: "pattern does not match", patterns: []string{"gpt-4o*"}, model: "vis"},
		{name: "model list: takes images", model: "vis", image: true, lists: 1},
		{name: "model list: capabilities vision", model: "ollama-vis", image: true, lists: 1},
		{name: "model list: text only", model: "txt", lists: 1},
		{name: "model list: not listed", model: "ghost", lists: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newVisionLLM(t)
			w := start(t, agent.Config{LLMURL: f.URL + "/v1", Model: tc.model, ImageModels: tc.patterns})
			for n := range 2 { // the model list is asked once
				w.send(n+1, "prompt", map[string]any{"text": "what are these?", "turn_id": "t", "attachments": files})
				got := w.until(isReply(n + 1))
				var notices []string
				for _, l := range got {
					if l.Event == "notice" {
						notices = append(notices, l.Text)
					}
					if l.Event == "delta" && len(notices) < 2 {
						t.Fatalf("a delta came before the notices: %+v", got)
					}
				}
				want := []string{"this agent cannot read PDFs: report.pdf not sent", "this agent cannot read binary files: blob.bin not sent"}
				if !tc.image {
					want = append([]string{"this agent cannot read images: chart.png not sent"}, want...)
				}
				if strings.Join(notices, "|") != strings.Join(want, "|") {
					t.Errorf("notices %q; want %q", notices, want)
				}
				if r := got[len(got)-1]; !*r.OK || r.Result["output"] != "seen" {
					t.Fatalf("reply %+v", r)
				}
				text, parts := f.lastUser(t, n)
				switch {
				case !tc.image:
					if text != inlined {
						t.Errorf("the user message is %q (parts %v); want %q", text, parts, inlined)
					}
				case len(parts) != 2 || parts[0]["type"] != "text" || parts[0]["text"] != inlined ||
					parts[1]["type"] != "image_url" || parts[1]["image_url"].(map[string]any)["url"] != dataURL:
					t.Errorf("the user message's parts are %v (text %q); want the inlined text and the image's data URL", parts, text)
				}
			}
			f.mu.Lock()
			lists := f.lists
			f.mu.Unlock()
			if lists != tc.lists {
				t.Errorf("/v1/models asked %d times; want %d", lists, tc.lists)
			}
		})
	}
}
