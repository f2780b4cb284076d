package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"path"
	"slices"
	"strings"

	"github.com/openai/openai-go/v3"

	"github.com/dashgate/dashgate/workers/jsonl"
)

// The files a prompt carries (PROTOCOL.md §4, issue 42) become parts of
// its user message: a text file inlined, with its name, in a fenced
// block; an image an image_url part (a data URL) for a model that takes
// images; anything else (and an image for a model that does not) is not
// sent, and a notice says so in the chat.

// EnvImageModels names the models that take images: comma-separated
// path.Match patterns (--llm-image-models); empty: ask the model list.
const EnvImageModels = "DASHGATE_LLM_IMAGE_MODELS"

// imagePatterns reads EnvImageModels' value: its patterns, none for "".
func imagePatterns(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// userMessage is the prompt's user message: its text and, as parts, its
// files. A file the model cannot take is told to dashgate as a notice of
// request id, once, before any reply.
func (s *server) userMessage(ctx context.Context, id json.RawMessage, model string, p promptParams) openai.ChatCompletionMessageParamUnion {
	if len(p.Attachments) == 0 {
		return openai.UserMessage(p.Text)
	}
	var text strings.Builder
	text.WriteString(p.Text)
	var images []openai.ChatCompletionContentPartUnionParam
	for _, a := range p.Attachments {
		switch {
		case a.Kind == jsonl.KindText:
			text.WriteString("\n\n" + a.Name + ":\n" + fenced(string(a.Data)))
		case a.Kind == jsonl.KindImage && s.takesImages(ctx, model):
			url := "data:" + a.Type + ";base64," + base64.StdEncoding.EncodeToString(a.Data)
			images = append(images, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: url}))
		default:
			s.Notice(id, jsonl.NotSent(a))
		}
	}
	if len(images) == 0 {
		return openai.UserMessage(text.String()) // a plain string: every server takes it
	}
	return openai.UserMessage(append([]openai.ChatCompletionContentPartUnionParam{openai.TextContentPart(text.String())}, images...))
}

// fenced puts text in a fenced block longer than any run of backticks in
// it, so the file cannot close its block early.
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

// takesImages reports whether model takes images: by --llm-image-models'
// patterns when given (they decide alone), else by the model list: its
// entry for model says so (input_modalities or
// architecture.input_modalities holding "image", as OpenRouter's do;
// capabilities holding "vision"). A list that cannot be read says no.
func (s *server) takesImages(ctx context.Context, model string) bool {
	if len(s.cfg.ImageModels) > 0 {
		return slices.ContainsFunc(s.cfg.ImageModels, func(p string) bool {
			ok, _ := path.Match(p, model)
			return ok
		})
	}
	s.mu.Lock()
	known, ok := s.vision[model]
	s.mu.Unlock()
	if ok {
		return known
	}
	page, err := s.models.List(ctx)
	if err != nil {
		s.Logf("model list for image support: %v", err)
		return false
	}
	vision := map[string]bool{}
	for _, m := range page.Data {
		vision[m.ID] = listsImages([]byte(m.RawJSON()))
	}
	if _, listed := vision[model]; !listed {
		vision[model] = false // a model the list lacks takes none: not asked again
	}
	s.mu.Lock()
	s.vision = vision
	s.mu.Unlock()
	return vision[model]
}

// listsImages reads a model list entry's capability fields.
func listsImages(raw []byte) bool {
	var m struct {
		InputModalities []string `json:"input_modalities"`
		Architecture    struct {
			InputModalities []string `json:"input_modalities"`
		} `json:"architecture"`
		Capabilities json.RawMessage `json:"capabilities"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return false
	}
	if slices.Contains(m.InputModalities, "image") || slices.Contains(m.Architecture.InputModalities, "image") {
		return true
	}
	var list []string
	var set map[string]any
	switch {
	case json.Unmarshal(m.Capabilities, &list) == nil:
		return slices.Contains(list, "vision")
	case json.Unmarshal(m.Capabilities, &set) == nil:
		return set["vision"] == true
	}
	return false
}
