package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/dashgate/dashgate/workers/jsonl"
)

// The environment variables the agent reads its Config from (never argv).
const (
	EnvLLMURL       = "DASHGATE_LLM_URL"
	EnvLLMModel     = "DASHGATE_LLM_MODEL"
	EnvLLMAPIKey    = "DASHGATE_LLM_API_KEY"
	EnvSystemPrompt = "DASHGATE_AGENT_SYSTEM_PROMPT"
	EnvTools        = "DASHGATE_AGENT_TOOLS"
	EnvToolTimeout  = "DASHGATE_TOOL_TIMEOUT"
	EnvToolDir      = "DASHGATE_TOOL_DIR"
	EnvConnTimeout  = "DASHGATE_LLM_CONNECT_TIMEOUT"
	EnvHeadTimeout  = "DASHGATE_LLM_HEADER_TIMEOUT"
)

// DefaultToolTimeout bounds one shell command when DASHGATE_TOOL_TIMEOUT is unset.
const DefaultToolTimeout = 60 * time.Second

// The model server's bounds when their variables are unset (dashgate's
// --llm-connect-timeout and --llm-header-timeout say why these values).
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultHeaderTimeout  = 45 * time.Second
)

// maxLine bounds one request line (history makes prompts large).
const maxLine = 16 << 20

// Config is the agent's settings.
type Config struct {
	LLMURL       string // base URL including /v1, e.g. http://127.0.0.1:8080/v1
	Model        string // default model; "" asks the server's /models
	APIKey       string // sent as a bearer token; never printed
	SystemPrompt string
	ShellTool    bool          // offer the model the shell tool
	ToolTimeout  time.Duration // bounds one shell command; 0 means DefaultToolTimeout
	ToolDir      string        // working directory of shell commands; "" is the worker's
	// ConnectTimeout bounds a TCP connect to the model server; 0 means
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// HeaderTimeout bounds the wait for a response's headers once the
	// request was sent (not the stream after them); 0 means
	// DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// ImageModels are path.Match patterns of the models that take images
	// (attach.go); none: the model list says.
	ImageModels []string
}

// ConfigFromEnv reads Config from the variables PROTOCOL.md §7 lists.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	cfg := Config{
		LLMURL:       strings.TrimRight(getenv(EnvLLMURL), "/"),
		Model:        getenv(EnvLLMModel),
		APIKey:       getenv(EnvLLMAPIKey),
		SystemPrompt: getenv(EnvSystemPrompt),
		ToolDir:      getenv(EnvToolDir),
		ImageModels:  imagePatterns(getenv(EnvImageModels)),
	}
	if cfg.LLMURL == "" {
		return cfg, fmt.Errorf("%s is not set", EnvLLMURL)
	}
	if u, err := url.Parse(cfg.LLMURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return cfg, fmt.Errorf("%s is not an http(s) URL", EnvLLMURL)
	}
	switch t := getenv(EnvTools); t {
	case "":
	case "shell":
		cfg.ShellTool = true
	default:
		return cfg, fmt.Errorf("%s=%q: want shell or nothing", EnvTools, t)
	}
	err := jsonl.EnvDurations(getenv, []string{EnvToolTimeout, EnvConnTimeout, EnvHeadTimeout},
		[]*time.Duration{&cfg.ToolTimeout, &cfg.ConnectTimeout, &cfg.HeaderTimeout})
	return cfg, err
}

// Main runs the agent on the process's stdin and stdout with its Config
// from the environment, and returns its exit code. Like the built-in worker
// it arms the parent watchdog first.
func Main() int {
	if !jsonl.WatchParent("dashgate agent") {
		return 1
	}
	cfg, err := ConfigFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashgate agent:", err)
		return 2
	}
	// The key stays in this process: a tool's command (chosen by the
	// model) must not be able to read it from its environment.
	os.Unsetenv(EnvLLMAPIKey)
	return Run(context.Background(), cfg, os.Stdin, os.Stdout, os.Stderr)
}

type server struct {
	*jsonl.Server
	cfg    Config
	chat   openai.ChatCompletionService
	models openai.ModelService

	seq atomic.Int64 // request_id and tool_id numbers

	mu        sync.Mutex
	approvals map[string]chan string // request_id -> the viewer's choice
	model     string                 // the server's first model, once asked
	vision    map[string]bool        // model -> takes images, as the model list said (attach.go)
}

// Run serves requests from in until EOF and returns the exit code. Requests
// run concurrently; Run cancels them on EOF and returns once each answered.
func Run(ctx context.Context, cfg Config, in io.Reader, out, errOut io.Writer) int {
	if cfg.ToolTimeout <= 0 {
		cfg.ToolTimeout = DefaultToolTimeout
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = DefaultHeaderTimeout
	}
	cfg.LLMURL = strings.TrimRight(cfg.LLMURL, "/")
	if cfg.APIKey != "" {
		errOut = &redactor{w: errOut, secret: []byte(cfg.APIKey)}
	}
	s := &server{
		Server:    jsonl.NewServer("dashgate agent", out, errOut),
		cfg:       cfg,
		approvals: map[string]chan string{},
	}
	s.MaxLine = maxLine
	// The services are built from our options alone: openai.NewClient would
	// also read OPENAI_API_KEY, OPENAI_ORG_ID, OPENAI_CUSTOM_HEADERS... from
	// the environment, and the agent's settings come from DASHGATE_* only.
	// No overall timeout: a stream lasts as long as the answer. A server
	// that never connects, or accepts and never answers, is bounded by the
	// connect and header timeouts instead of the gateway's silence timeout.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext
	tr.ResponseHeaderTimeout = cfg.HeaderTimeout
	opts := []option.RequestOption{
		option.WithHTTPClient(&http.Client{Transport: tr}),
		option.WithBaseURL(cfg.LLMURL + "/"),
		option.WithAPIKey(cfg.APIKey),
		option.WithMaxRetries(0), // the gateway and the person decide about retries
	}
	s.chat = openai.NewChatCompletionService(opts...)
	s.models = openai.NewModelService(opts...)
	s.Logf("ready, pid %d, model server %s", os.Getpid(), redact(cfg.LLMURL))
	return s.Serve(ctx, in, s.handle)
}

// redactor masks the API key in everything written to it: diagnostics
// may quote a request line or a server's message, and none may carry the
// key out.
type redactor struct {
	w      io.Writer
	secret []byte
}

func (r *redactor) Write(p []byte) (int, error) {
	if _, err := r.w.Write(bytes.ReplaceAll(p, r.secret, []byte("[redacted]"))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// redact drops a URL's user info (a key may hide there) for diagnostics.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	return u.String()
}

func (s *server) failWith(id json.RawMessage, f *Failure) {
	fields := []any{"failure", f.Kind}
	if f.RetryAfter > 0 {
		fields = append(fields, "retry_after", f.RetryAfter)
	}
	s.Fail(id, f.Message, fields...)
}

// promptParams are a prompt's params (PROTOCOL.md §4 and §7).
type promptParams struct {
	Text        string             `json:"text"`
	TurnID      string             `json:"turn_id"`
	History     []historyEntry     `json:"history"`
	Model       string             `json:"model"`
	Attachments []jsonl.Attachment `json:"attachments"` // the files it carries (attach.go)

	// System is the user's system prompt (issue 42; "" for none): the
	// model gets it after --agent-system-prompt's, in one system message.
	System string `json:"system"`
}

type historyEntry struct {
	Role string `json:"role"`
	Kind string `json:"kind"`
	Text string `json:"text"`
}

func (s *server) handle(ctx context.Context, req jsonl.Request) {
	switch req.Method {
	case "prompt":
		var p promptParams
		if err := json.Unmarshal(req.Params, &p); err != nil {
			s.Fail(req.ID, "bad prompt params: "+err.Error())
			return
		}
		s.prompt(ctx, req.ID, p)
	case "approval":
		var p struct {
			RequestID string `json:"request_id"`
			Choice    string `json:"choice"`
			By        string `json:"by"`
		}
		json.Unmarshal(req.Params, &p)
		if p.Choice != "once" && p.Choice != "deny" {
			s.Fail(req.ID, "unknown choice "+strconv.Quote(p.Choice)+" (once or deny)")
			return
		}
		s.mu.Lock()
		ch := s.approvals[p.RequestID]
		delete(s.approvals, p.RequestID)
		s.mu.Unlock()
		if ch == nil {
			s.Fail(req.ID, "no pending approval "+strconv.Quote(p.RequestID))
			return
		}
		ch <- p.Choice // buffered: the waiter may be gone
		s.Reply(req.ID, map[string]any{})
	case "slash":
		s.handleSlash(ctx, req.ID, req.Params)
	default:
		s.Fail(req.ID, "unknown method "+strconv.Quote(req.Method))
	}
}
