package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/web"
	"github.com/dashgate/dashgate/workers"
)

// config is every setting of `dashgate serve`. Each flag can also be given
// as an environment variable: --worker-grace is DASHGATE_WORKER_GRACE; a
// flag on the command line wins.
type config struct {
	Addr            string
	AddrFile        string
	Token           string
	TokenExplicit   bool
	TokenFile       string
	AdminToken      string
	AdminTokenFile  string
	ProxyUser       string
	ProxySecretFile string
	ProxySecret     []byte // read from ProxySecretFile
	HeaderTimeout   time.Duration
	MaxPendingPeer  int
	// ArgvSecrets names the flags given on the command line that carry a
	// secret (--token, --admin-token, a --store URL with a password): every
	// local account reads them in /proc/<pid>/cmdline. With --unix-users
	// that refuses the start; otherwise run logs one WARN.
	ArgvSecrets      []string
	WorkerCmd        string
	Agents           agentFlags // --agent, repeatable (agents.go)
	DefaultAgent     string
	PTYCmd           string
	PTYCwd           string
	WorkerGrace      time.Duration
	WorkerTimeout    time.Duration
	DetachedTTL      time.Duration
	MaxSessions      int
	MaxPerSocket     int
	InterruptGrace   time.Duration
	MaxWorkers       int
	PTYKeepalive     time.Duration
	PTYBuffer        int
	PTYUploadMax     int64 // --terminal-upload-max, bytes
	PTYSpare         bool
	PTYSpareIdle     time.Duration
	PingInterval     time.Duration
	PingTimeout      time.Duration
	WriteTimeout     time.Duration
	ShutdownTimeout  time.Duration
	StateDir         string
	LLMURL           string
	LLMModel         string
	LLMKeyEnv        string
	SystemPrompt     string
	AgentContext     int
	AgentTools       string
	ToolTimeout      time.Duration
	ApprovalTimeout  time.Duration
	DetachTurnGrace  time.Duration
	Store            string
	HistoryRetention time.Duration
	BasePath         string
	PublicURL        string // as given; "" means http://<addr><base-path>
	TrustedProxies   string
	AllowedOrigins   string
	NodeID           string
	PassEnv          string
	MaxConnsPerIP    int
	MaxHTTPConns     int
	HTTPIdleTimeout  time.Duration
	WSCloseTimeout   time.Duration
	UserHeader       string
	UsersFile        string
	AdminUsers       string
	MaxSessionsUser  int
	MaxWorkersUser   int
	MaxTerminalsUser int
	StoreWait        time.Duration
	NodeHeartbeat    time.Duration
	StoreBacklog     int
	NodeExpiry       time.Duration
	UnixUsers        bool
	UnixUsersMap     string
	AllowRootUsers   bool
	UserMemoryMax    string // as given; UserMemoryBytes parsed
	UserMemoryBytes  uint64
	UserPidsMax      int
	UserCPUMax       string // as given (200%); UserCPUMaxLine is cpu.max's "quota period"
	UserCPUMaxLine   string
	PTYCmdExplicit   bool
	LogLevel         string
	LogFormat        string
	Cgroup           string
	CgroupRoot       string
	ChildMemoryMax   string // as given; ChildMemoryBytes parsed
	ChildMemoryBytes uint64
	ChildPidsMax     int
	ChildNice        int           // -1: auto (workers.AutoChildNice)
	GoMaxProcs       int           // when not GoMaxProcsAuto; 0: Go's default
	GoMaxProcsAuto   bool          // --gomaxprocs auto (package maxprocs)
	GatewaySlice     time.Duration // 0: the kernel's default
	ChildCPUWeight   int
	ChildSched       string
	PprofAddr        string
	// Terminal recordings (--record-terminals, docs/recordings.md).
	RecordTerminals bool
	RecordMaxBytes  string // as given; RecordMaxBytesN parsed
	RecordMaxBytesN int64
	RecordRetention time.Duration

	// The agent's bounds on the model server (its environment).
	LLMConnectTimeout time.Duration
	LLMHeaderTimeout  time.Duration

	// Attached files (issue 42): the flags as given, and parsed.
	AttachMaxBytes string
	AttachMaxFiles int
	AttachMaxTotal string
	Attach         sessions.AttachLimits
	LLMImageModels string // glob patterns of the models that take images
}

func defaultPTYCmd() string {
	if sh := os.Getenv("SHELL"); sh != "" {
		return sh
	}
	return "/bin/sh"
}

// parseConfig reads flags, then fills what the command line left unset from
// DASHGATE_* variables (getenv).
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("dashgate serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = serveUsage(fs) // grouped: serveFlagGroups, usage.go
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8787", "address to listen on: host:port (port 0 picks one), or unix:/path for a Unix socket (made 0660) behind a proxy")
	fs.StringVar(&c.AddrFile, "addr-file", "", "write the bound address to this file once listening")
	fs.StringVar(&c.Token, "token", "", "dashboard token; when empty a random one is made (kept in <state-dir>/token for the next start) and a login URL printed")
	fs.StringVar(&c.AdminToken, "admin-token", "", "token of /admin and /metrics (default: the dashboard token)")
	fs.StringVar(&c.TokenFile, "token-file", "", "read the dashboard token from this file (not readable by others), instead of --token: argv is every local account's to read")
	fs.StringVar(&c.AdminTokenFile, "admin-token-file", "", "read the admin token from this file (not readable by others), instead of --admin-token")
	fs.StringVar(&c.ProxyUser, "proxy-user", "", "with --addr unix:PATH, the user or group of the proxy (e.g. www-data): the socket is made for it (its group, 0660) and only its processes' requests (peer credentials) may name a user in --user-header")
	fs.StringVar(&c.ProxySecretFile, "proxy-secret-file", "", "file holding a secret the proxy sends in X-Dashgate-Proxy-Secret: over TCP, a --trusted-proxies peer's user header and X-Forwarded-* count only with it")
	fs.DurationVar(&c.HeaderTimeout, "http-header-timeout", 5*time.Second, "a connection must send its request headers within this, else it is closed")
	fs.IntVar(&c.MaxPendingPeer, "max-pending-per-peer", 32, "connections one peer (an address; all of 127.0.0.0/8 as one; a Unix socket's uid) may hold before its request headers are in; one more closes its oldest (0: no budget)")
	fs.StringVar(&c.WorkerCmd, "worker-cmd", "", "chat worker command line, split on spaces (default: this binary's worker subcommand)")
	fs.Var(&c.Agents, "agent", "NAME=COMMAND, repeatable: an Agent Client Protocol agent sessions may talk to (e.g. claude='npx -y @zed-industries/claude-agent-acp'); COMMAND runs under /bin/sh as the session owner (docs/agents.md)")
	fs.StringVar(&c.DefaultAgent, "default-agent", "", "the agent of a session that names none: \"dashgate\" (the built-in worker) or an --agent's name (default: the first --agent, else dashgate)")
	fs.StringVar(&c.PTYCmd, "pty-cmd", defaultPTYCmd(), "program run in terminals, split on spaces")
	fs.StringVar(&c.PTYCwd, "pty-cwd", "", "working directory of terminals (default: dashgate's)")
	fs.DurationVar(&c.WorkerGrace, "worker-grace", 2*time.Second, "wait after each polite signal before escalating")
	fs.DurationVar(&c.WorkerTimeout, "worker-timeout", 60*time.Second, "a worker request older than this recycles the worker")
	fs.DurationVar(&c.DetachedTTL, "detached-ttl", 10*time.Minute, "how long a detached session can be resumed")
	fs.IntVar(&c.MaxSessions, "max-sessions", 1000, "live sessions; beyond it the least recently active detached one is evicted")
	fs.IntVar(&c.MaxPerSocket, "max-sessions-per-socket", 100, "sessions one chat socket may view at once; beyond it create and resume get error 4029")
	fs.DurationVar(&c.InterruptGrace, "interrupt-grace", time.Second, "how long a worker may take to stop an interrupted turn before it is recycled")
	fs.IntVar(&c.MaxWorkers, "max-workers", 64, "live children (workers and terminals); beyond it calls get error 4029")
	fs.DurationVar(&c.PTYKeepalive, "pty-keepalive", 5*time.Minute, "how long a terminal attached with keepalive=1 waits for a reattach (0: off)")
	fs.IntVar(&c.PTYBuffer, "pty-buffer", 1<<20, "terminal output kept for replay, bytes")
	fs.Int64Var(&c.PTYUploadMax, "terminal-upload-max", 100<<20, "bytes a file dropped on a terminal may hold (written as the session's owner into the shell's directory)")
	fs.BoolVar(&c.PTYSpare, "pty-spare", true, "keep a terminal program started ahead for the next terminal opened without a session (its first output is there sooner)")
	fs.DurationVar(&c.PTYSpareIdle, "pty-spare-idle", time.Minute, "spares are ended once no terminal was opened without a session for this long")
	fs.DurationVar(&c.PingInterval, "ws-ping-interval", 20*time.Second, "WebSocket ping interval (0: no pings)")
	fs.DurationVar(&c.PingTimeout, "ws-ping-timeout", 20*time.Second, "no pong within this ends the socket")
	fs.DurationVar(&c.WriteTimeout, "ws-write-timeout", 10*time.Second, "a frame not written within this ends the socket")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "how long shutdown waits for sessions to close")
	fs.StringVar(&c.StateDir, "state-dir", defaultStateDir(getenv), "the login token, instance locks (for the startup sweep) and the default store; made 0700, refused when a symlink, another user's or writable by others (default: $XDG_STATE_HOME/dashgate, else $HOME/.local/state/dashgate)")
	fs.StringVar(&c.Store, "store", "", "SQLite file that keeps conversations (default: <state-dir>/dashgate.db), or a postgres:// URL shared by the nodes of a cluster (--node-id defaults to the id kept in the state dir then); none: memory only, nothing survives a restart")
	fs.DurationVar(&c.StoreWait, "store-wait", 0, "with a postgres:// --store, how long to keep trying to reach the server at start (0: refuse to start at once)")
	fs.DurationVar(&c.NodeHeartbeat, "node-heartbeat", 5*time.Second, "with a postgres:// --store, how often the node writes its heartbeat (default: 5s, or a third of --node-expiry when that is shorter)")
	fs.DurationVar(&c.NodeExpiry, "node-expiry", sessions.DefaultLeaseTTL, "the ttl of the node's leases on its sessions (every node, a node alone too renewed every third of it): a dead node's sessions can be adopted this long after its death, and a node that could not renew them for this long takes no new work for them (error 5006) until the store is back; with a postgres:// --store also the age past which a node's heartbeat shows it gone")
	fs.IntVar(&c.StoreBacklog, "store-backlog", 100_000, "history entries queued for the store while it fails; beyond it new entries are kept in memory only and their loss is counted in one ERROR record when the store is back")
	fs.DurationVar(&c.HistoryRetention, "history-retention", 30*24*time.Hour, "closed conversations older than this are deleted (0: kept forever)")
	fs.StringVar(&c.LLMURL, "llm-url", "", "base URL of an OpenAI-compatible model server (e.g. http://127.0.0.1:11434/v1): the chat worker becomes dashgate's agent")
	fs.StringVar(&c.LLMModel, "llm-model", "", "default model (empty: the first of the server's /v1/models)")
	fs.StringVar(&c.LLMKeyEnv, "llm-api-key-env", "OPENAI_API_KEY", "name of the environment variable holding the model server's API key")
	fs.DurationVar(&c.LLMConnectTimeout, "llm-connect-timeout", 10*time.Second, "a model server not connected within this fails the prompt (model_unreachable)")
	fs.DurationVar(&c.LLMHeaderTimeout, "llm-header-timeout", 45*time.Second, "a model server that sends no response headers within this of a request fails the prompt (model_unreachable); keep it below --worker-timeout")
	fs.StringVar(&c.SystemPrompt, "agent-system-prompt", "", "the agent's system prompt: text, or @path of a file")
	fs.IntVar(&c.AgentContext, "agent-context", 32<<10, "bytes of earlier conversation sent with each prompt (the oldest dropped first)")
	fs.StringVar(&c.AgentTools, "agent-tools", "", "tools the agent may use after a viewer approves: shell, or empty for none")
	fs.DurationVar(&c.ToolTimeout, "tool-timeout", 60*time.Second, "an approved tool run longer than this is ended")
	fs.DurationVar(&c.ApprovalTimeout, "approval-timeout", 5*time.Minute, "a tool run nobody approved within this is denied")
	fs.DurationVar(&c.DetachTurnGrace, "detach-turn-grace", 5*time.Minute, "a streaming turn may finish for this long after its session's last viewer left, its reply kept (0: its worker is closed at once, mid-turn)")
	fs.StringVar(&c.AttachMaxBytes, "attach-max-bytes", "10MiB", "the largest file a message may carry (a chat attachment); beyond it the upload is refused (error 4013)")
	fs.IntVar(&c.AttachMaxFiles, "attach-max-files", sessions.DefaultAttachMaxFiles, "files one message may carry, and one session may hold uploaded and not yet sent (error 4013 beyond)")
	fs.StringVar(&c.AttachMaxTotal, "attach-max-total", "20MiB", "bytes of the files one message carries together, and of those one session holds uploaded and not yet sent (error 4013 beyond)")
	fs.StringVar(&c.LLMImageModels, "llm-image-models", "", "comma-separated patterns (path.Match: gpt-4o*,*vision*; * for all) of the models that take images: the agent sends them attached images; other models get a note instead (empty: the models whose /v1/models entry says they take images)")
	fs.StringVar(&c.BasePath, "base-path", "/", "URL path prefix of every route")
	fs.StringVar(&c.PublicURL, "public-url", "", "the dashboard's URL as its users reach it, e.g. https://example.com/dashgate/ behind a proxy (deploy/nginx/dashgate.conf): the login and admin URLs dashgate prints start with it (default: http://<addr><base-path>)")
	fs.StringVar(&c.TrustedProxies, "trusted-proxies", "", "comma-separated CIDRs (or addresses) of the proxies whose X-Forwarded-* headers, and --user-header, are used; unix: whatever comes over the --addr unix: socket")
	fs.StringVar(&c.UserHeader, "user-header", "", "take the user from this request header (e.g. X-Forwarded-User), only from a --trusted-proxies peer; the proxy must overwrite it")
	fs.StringVar(&c.UsersFile, "users-file", "", "file of name:bcrypt-hash lines, one per user (dashgate user add NAME); reloaded on SIGHUP")
	fs.StringVar(&c.AdminUsers, "admin-users", "", "comma-separated users who reach /admin and /metrics (and may reap any session, never read or type into one)")
	fs.IntVar(&c.MaxSessionsUser, "max-sessions-per-user", 0, "live sessions of one user; beyond it the user's least recently active detached one is evicted, else error 4029 (0: no limit; with users on the default is a quarter of --max-sessions)")
	fs.IntVar(&c.MaxWorkersUser, "max-workers-per-user", 0, "live chat workers of one user's sessions; beyond it error 4029 (0: no limit; with users on the default is an eighth of --max-workers)")
	fs.BoolVar(&c.UnixUsers, "unix-users", false, "run each user's worker, agent tools and terminal as the Unix account of the same name (or --unix-users-map's), in a cgroup per user; needs root or CAP_SETUID, CAP_SETGID, CAP_CHOWN and CAP_KILL")
	fs.StringVar(&c.UnixUsersMap, "unix-users-map", "", "file of dashgateuser:unixuser lines (with --unix-users); a user not in it is refused")
	fs.BoolVar(&c.AllowRootUsers, "allow-root-users", false, "let a dashgate user map to uid 0 (with --unix-users)")
	fs.StringVar(&c.UserMemoryMax, "user-memory-max", "", "memory.max of each user's cgroup, e.g. 4GiB (with --unix-users; needs the memory controller)")
	fs.IntVar(&c.UserPidsMax, "user-pids-max", 0, "pids.max of each user's cgroup (with --unix-users; 0: no limit; needs the pids controller)")
	fs.StringVar(&c.UserCPUMax, "user-cpu-max", "", "cpu.max of each user's cgroup as a share of one CPU, e.g. 200% (with --unix-users; needs the cpu controller)")
	fs.IntVar(&c.MaxTerminalsUser, "max-terminals-per-user", 0, "live terminals of one user; beyond it the terminal is refused with 4029 (0: no limit; with users on the default is an eighth of --max-workers)")
	fs.StringVar(&c.AllowedOrigins, "allowed-origins", "", "comma-separated extra origins (host patterns, or scheme://host) for WebSockets and POSTs")
	fs.StringVar(&c.NodeID, "node-id", "", "this instance's id in a cluster; sets the dashgate_node cookie (default: none alone, and with a postgres:// --store the id kept in <state-dir>/node-id, under which every node holds its sessions)")
	fs.StringVar(&c.PassEnv, "pass-env", "", "comma-separated extra environment variables passed to workers and terminals")
	fs.IntVar(&c.MaxConnsPerIP, "max-conns-per-ip", 50, "open WebSockets per client address (0: no limit)")
	fs.IntVar(&c.MaxHTTPConns, "max-http-conns", 256, "open HTTP connections, WebSockets not counted; beyond it the longest idle one is closed, or with none idle the request gets 503 (0: no limit)")
	fs.DurationVar(&c.HTTPIdleTimeout, "http-idle-timeout", 90*time.Second, "a keep-alive HTTP connection idle this long is closed")
	fs.DurationVar(&c.WSCloseTimeout, "ws-close-timeout", time.Second, "at shutdown, how long a WebSocket's peer may take to answer the close frame before its connection is closed")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "text", "text or json")
	fs.StringVar(&c.Cgroup, "cgroup", "auto", "contain each child in a cgroup v2 of its own: auto (when a writable hierarchy is found), on (refuse to start without), off")
	fs.StringVar(&c.CgroupRoot, "cgroup-root", "", "cgroup v2 directory to create dashgate-<instance> in (default: dashgate's own cgroup when delegated, else the cgroup2 mount's root as root)")
	fs.StringVar(&c.ChildMemoryMax, "child-memory-max", "", "memory.max of each child's cgroup, e.g. 512MiB (empty: no limit; needs the memory controller)")
	c.ChildNice = -1
	fs.Var(childNiceFlag{&c.ChildNice}, "child-nice", "nice value of every worker and terminal program, and of what they start, so that the gateway keeps its share of the CPU when they saturate it (0 to 19; 0: dashgate's own; auto: the workers at 19 where the kernel's autogroups are on, so that they yield to the gateway and to nothing else, else 0; terminal programs at dashgate's own)")
	fs.StringVar(&c.ChildSched, "child-sched", string(workers.DefaultChildSched), "Linux scheduling policy of every worker and terminal program: other, batch (no wake-up preemption of the gateway) or idle (runs only on CPU time nothing else wants)")
	fs.IntVar(&c.ChildCPUWeight, "child-cpu-weight", workers.DefaultChildCPUWeight, "cpu.weight of the cgroup holding every child's cgroup, against the gateway's 100 (1 to 10000; 0: not set); needs the cpu controller, else the containment record says cpu_weight=0")
	c.GoMaxProcsAuto = true
	fs.Var(goMaxProcsFlag{&c.GoMaxProcs, &c.GoMaxProcsAuto}, "gomaxprocs", "threads running the gateway's Go code at once (runtime.GOMAXPROCS; dashgate's own workers run on 1 unless GOMAXPROCS is in their environment): the kernel shares a saturated CPU per thread, so more than the CPUs keeps the gateway's share when its children saturate them, and costs CPU while they do not (auto: the CPUs Go would use, four times as many while goroutines wait milliseconds for a thread; 1 to 1024: that many always; 0: Go's default)")
	fs.DurationVar(&c.GatewaySlice, "gateway-slice", workers.DefaultGatewaySlice, "scheduling slice dashgate's own threads ask the kernel for (sched_setattr's sched_runtime; Linux 6.12 and later, older kernels ignore it): with EEVDF a waking thread's deadline is a slice ahead, so a short one runs a quiet socket's call sooner on a saturated CPU, at the same share of it; children keep the kernel's default (100µs to 100ms; 0: the kernel's default)")
	fs.StringVar(&c.PprofAddr, "pprof-addr", "", "serve net/http/pprof on this loopback address (e.g. 127.0.0.1:6060), without auth, and record 1 in 10 mutex contentions for its mutex profile; a debugging aid (empty: off)")
	fs.BoolVar(&c.RecordTerminals, "record-terminals", false, "record every terminal's output and resizes (never its input) as asciicast v2 files in <state-dir>/recordings, which the owner and admins can replay and download; the dashboard tells users (docs/recordings.md)")
	fs.StringVar(&c.RecordMaxBytes, "record-max-bytes", "64MiB", "with --record-terminals, the largest recording of one terminal; past it the recording stops, saying so")
	fs.DurationVar(&c.RecordRetention, "record-retention", 30*24*time.Hour, "with --record-terminals, recordings last written longer ago than this are deleted, at start and then periodically (0: kept for good)")
	fs.IntVar(&c.ChildPidsMax, "child-pids-max", 0, "pids.max of each child's cgroup: processes one worker or terminal may have (0: no limit; needs the pids controller)")

	// The command line first, then the environment for what it left unset:
	// which flags came from argv is known (ArgvSecrets).
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	argv := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { argv[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "DASHGATE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" && !argv[f.Name] {
			if err := fs.Set(f.Name, v); err != nil && envErr == nil {
				envErr = fmt.Errorf("%s: %w", name, err)
			}
		}
	})
	if envErr != nil {
		return c, envErr
	}
	for _, name := range []string{"token", "admin-token"} {
		if argv[name] {
			c.ArgvSecrets = append(c.ArgvSecrets, "--"+name)
		}
	}
	if argv["store"] && urlHasPassword(c.Store) {
		c.ArgvSecrets = append(c.ArgvSecrets, "--store")
	}
	if err := c.readSecretFiles(); err != nil {
		return c, err
	}
	if err := c.parseAttach(); err != nil {
		return c, err
	}
	// With users on, the per-user caps default to shares of the global
	// ones (sessions.DefaultUserCaps), so that one user cannot take the
	// box; given (argv or DASHGATE_*), even 0 (no limit), they stay.
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if c.UserHeader != "" || c.UsersFile != "" {
		s, w, t := sessions.DefaultUserCaps(c.MaxSessions, c.MaxWorkers)
		if !explicit["max-sessions-per-user"] {
			c.MaxSessionsUser = s
		}
		if !explicit["max-workers-per-user"] {
			c.MaxWorkersUser = w
		}
		if !explicit["max-terminals-per-user"] {
			c.MaxTerminalsUser = t
		}
	}
	// A shorter --node-expiry brings the heartbeat with it when that is
	// not given: a third of the lease (as its renewal), never more than
	// the 5 s default; a heartbeat given stays, and must be shorter.
	if !explicit["node-heartbeat"] {
		c.NodeHeartbeat = min(c.NodeHeartbeat, c.NodeExpiry/3)
	}
	c.TokenExplicit = c.Token != ""
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "pty-cmd" {
			c.PTYCmdExplicit = true
		}
	})
	if getenv("DASHGATE_PTY_CMD") != "" {
		c.PTYCmdExplicit = true
	}
	if c.UserMemoryMax != "" {
		n, err := humanize.ParseBytes(c.UserMemoryMax)
		if err != nil || n == 0 {
			return c, fmt.Errorf("--user-memory-max %q: want a size such as 4GiB", c.UserMemoryMax)
		}
		c.UserMemoryBytes = n
	}
	if c.UserCPUMax != "" {
		line, err := workers.ParseCPUMax(c.UserCPUMax)
		if err != nil {
			return c, fmt.Errorf("--user-cpu-max: %w", err)
		}
		c.UserCPUMaxLine = line
	}
	n, err := humanize.ParseBytes(c.RecordMaxBytes)
	if err != nil || n < 64<<10 || n > 1<<40 {
		return c, fmt.Errorf("--record-max-bytes %q: want a size from 64KiB to 1TiB, such as 64MiB", c.RecordMaxBytes)
	}
	c.RecordMaxBytesN = int64(n)
	if c.ChildMemoryMax != "" {
		n, err := humanize.ParseBytes(c.ChildMemoryMax)
		if err != nil || n == 0 {
			return c, fmt.Errorf("--child-memory-max %q: want a size such as 512MiB", c.ChildMemoryMax)
		}
		c.ChildMemoryBytes = n
	}
	return c, c.validate()
}

func (c config) validate() error {
	var errs []error
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("--log-format must be text or json, not %q", c.LogFormat))
	}
	if c.WorkerGrace <= 0 || c.WorkerTimeout <= 0 || c.DetachedTTL <= 0 || c.ShutdownTimeout <= 0 || c.WriteTimeout <= 0 || c.InterruptGrace <= 0 || c.PTYSpareIdle <= 0 {
		errs = append(errs, errors.New("--worker-grace, --worker-timeout, --detached-ttl, --shutdown-timeout, --ws-write-timeout, --interrupt-grace and --pty-spare-idle must be positive"))
	}
	if c.PTYUploadMax < 1 {
		errs = append(errs, errors.New("--terminal-upload-max must be at least 1"))
	}
	if c.MaxSessions < 1 || c.MaxPerSocket < 1 || c.MaxWorkers < 1 || c.PTYBuffer < 64<<10 {
		errs = append(errs, errors.New("--max-sessions, --max-sessions-per-socket and --max-workers must be at least 1, --pty-buffer at least 65536"))
	}
	if err := checkDefaultAgent(c.DefaultAgent, c.Agents); err != nil {
		errs = append(errs, err)
	}
	if c.AgentTools != "" && c.AgentTools != "shell" {
		errs = append(errs, fmt.Errorf("--agent-tools must be shell or empty, not %q", c.AgentTools))
	}
	if c.AgentContext < 1 || c.ToolTimeout <= 0 || c.ApprovalTimeout <= 0 {
		errs = append(errs, errors.New("--agent-context, --tool-timeout and --approval-timeout must be positive"))
	}
	if c.LLMURL != "" {
		if u, err := url.Parse(c.LLMURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--llm-url %q is not an http(s) URL", c.LLMURL))
		}
	}
	if c.PublicURL != "" {
		if _, err := loginBase("--public-url", c.PublicURL); err != nil {
			errs = append(errs, err)
		}
	}
	if c.LLMConnectTimeout <= 0 || c.LLMHeaderTimeout <= 0 {
		errs = append(errs, errors.New("--llm-connect-timeout and --llm-header-timeout must be positive"))
	}
	if c.MaxHTTPConns < 0 || c.MaxPendingPeer < 0 || c.HTTPIdleTimeout <= 0 || c.HeaderTimeout <= 0 || c.WSCloseTimeout <= 0 || c.WSCloseTimeout > c.ShutdownTimeout {
		errs = append(errs, errors.New("--max-http-conns and --max-pending-per-peer must not be negative, --http-idle-timeout and --http-header-timeout positive, --ws-close-timeout positive and at most --shutdown-timeout"))
	}
	if c.DetachTurnGrace < 0 {
		errs = append(errs, errors.New("--detach-turn-grace must not be negative"))
	}
	if c.StoreWait < 0 || c.NodeHeartbeat <= 0 || c.NodeExpiry <= c.NodeHeartbeat {
		errs = append(errs, errors.New("--store-wait must not be negative, --node-heartbeat positive and --node-expiry longer than it"))
	}
	if c.StoreBacklog <= 0 {
		errs = append(errs, errors.New("--store-backlog must be positive"))
	}
	if c.HistoryRetention < 0 {
		errs = append(errs, errors.New("--history-retention must not be negative"))
	}
	if c.RecordRetention < 0 {
		errs = append(errs, errors.New("--record-retention must not be negative"))
	}
	if _, err := workers.ParseCgroupMode(c.Cgroup); err != nil {
		errs = append(errs, err)
	}
	if c.ChildPidsMax < 0 {
		errs = append(errs, errors.New("--child-pids-max must not be negative"))
	}
	if c.GoMaxProcs < 0 || c.GoMaxProcs > 1024 {
		errs = append(errs, fmt.Errorf("--gomaxprocs %d: want 1 to 1024, 0 or auto", c.GoMaxProcs))
	}
	if c.GatewaySlice != 0 && (c.GatewaySlice < 100*time.Microsecond || c.GatewaySlice > 100*time.Millisecond) {
		errs = append(errs, fmt.Errorf("--gateway-slice %v: want 100µs to 100ms, or 0", c.GatewaySlice))
	}
	if c.ChildNice < -1 || c.ChildNice > 19 {
		errs = append(errs, fmt.Errorf("--child-nice %d: want 0 to 19, or auto", c.ChildNice))
	}
	if c.ChildCPUWeight < 0 || c.ChildCPUWeight > 10000 {
		errs = append(errs, fmt.Errorf("--child-cpu-weight %d: want 1 to 10000, or 0", c.ChildCPUWeight))
	}
	if _, err := workers.ParseChildSched(c.ChildSched); err != nil {
		errs = append(errs, err)
	}
	if c.PprofAddr != "" && !loopbackAddr(c.PprofAddr) {
		errs = append(errs, fmt.Errorf("--pprof-addr %q: want a loopback host:port (127.0.0.1, ::1 or localhost)", c.PprofAddr))
	}
	if c.MaxSessionsUser < 0 || c.MaxWorkersUser < 0 || c.MaxTerminalsUser < 0 {
		errs = append(errs, errors.New("--max-sessions-per-user, --max-workers-per-user and --max-terminals-per-user must not be negative"))
	}
	errs = append(errs, c.validateProxy()...)
	if c.UserHeader != "" {
		if strings.TrimSpace(c.TrustedProxies) == "" && c.ProxyUser == "" {
			errs = append(errs, fmt.Errorf("--user-header %s needs a proxy to trust: --proxy-user (a Unix socket) or --trusted-proxies: the header is honoured only from it", c.UserHeader))
		}
		if strings.ContainsAny(c.UserHeader, " \t:\r\n") {
			errs = append(errs, fmt.Errorf("--user-header %q is not a header name", c.UserHeader))
		}
	}
	if c.UnixUsers && c.UserHeader == "" && c.UsersFile == "" {
		errs = append(errs, errors.New("--unix-users needs users: set --user-header or --users-file"))
	}
	if !c.UnixUsers && (c.UnixUsersMap != "" || c.AllowRootUsers || c.UserMemoryMax != "" || c.UserPidsMax != 0 || c.UserCPUMax != "") {
		errs = append(errs, errors.New("--unix-users-map, --allow-root-users and --user-*-max need --unix-users"))
	}
	if c.UserPidsMax < 0 {
		errs = append(errs, errors.New("--user-pids-max must not be negative"))
	}
	if c.AdminUsers != "" && c.UserHeader == "" && c.UsersFile == "" {
		errs = append(errs, errors.New("--admin-users needs users: set --user-header or --users-file"))
	}
	if c.StateDir == "" {
		errs = append(errs, errors.New("no state directory: $XDG_STATE_HOME and $HOME are unset or relative; set --state-dir (or DASHGATE_STATE_DIR)"))
	}
	if strings.TrimSpace(c.PTYCmd) == "" {
		errs = append(errs, errors.New("--pty-cmd is empty"))
	}
	if !c.TokenExplicit && !isLoopback(c.Addr) && c.UserHeader == "" && c.UsersFile == "" {
		errs = append(errs, fmt.Errorf("--addr %s is not a loopback address: set --token (or DASHGATE_TOKEN) explicitly", c.Addr))
	}
	return errors.Join(errs...)
}

// safeProxyWays is what a refusal of an unproven proxy suggests.
const safeProxyWays = "listen on a Unix socket only the proxy may use (--addr unix:/run/dashgate/dashgate.sock --proxy-user www-data), or have the proxy send a secret (--proxy-secret-file)"

// validateProxy checks how the proxy that names users is proven
// (web/peer.go). With --unix-users every person served has a shell on the
// box, and a shell connects from 127.0.0.1 like the proxy does: the user
// header is then believed only from a proven proxy, and no secret may sit
// in argv.
func (c config) validateProxy() []error {
	var errs []error
	_, unixAddr := unixPath(c.Addr)
	if c.ProxyUser != "" && !unixAddr {
		errs = append(errs, fmt.Errorf("--proxy-user %s needs --addr unix:PATH: peer credentials exist only on a Unix socket", c.ProxyUser))
	}
	prefixes, trustUnix, err := web.ParseTrustedPeers(c.TrustedProxies)
	if err != nil {
		return append(errs, fmt.Errorf("--trusted-proxies: %w", err))
	}
	if !c.UnixUsers {
		return errs
	}
	if len(c.ArgvSecrets) > 0 {
		errs = append(errs, fmt.Errorf("%s on the command line: every local account reads it in /proc/<pid>/cmdline; with --unix-users pass it in the environment (DASHGATE_TOKEN, DASHGATE_ADMIN_TOKEN, DASHGATE_STORE) or with --token-file / --admin-token-file (PGPASSFILE for the store)",
			strings.Join(c.ArgvSecrets, ", ")))
	}
	if c.UserHeader == "" {
		return errs
	}
	if len(prefixes) > 0 && c.ProxySecretFile == "" {
		errs = append(errs, fmt.Errorf("--user-header with --trusted-proxies %s and --unix-users: an address proves nothing on a shared box (every local account connects from 127.0.0.1 and could name any user); %s", c.TrustedProxies, safeProxyWays))
	}
	if trustUnix && c.ProxyUser == "" && c.ProxySecretFile == "" {
		errs = append(errs, fmt.Errorf("--user-header with --trusted-proxies unix and --unix-users: say who the proxy is with --proxy-user (its processes alone may then name users), or %s", safeProxyWays))
	}
	return errs
}

// proxyWarnings are the WARN records run logs at start for a proxy set-up
// that lets local processes be any user, without --unix-users (with it,
// validateProxy refuses them).
func (c config) proxyWarnings() []string {
	var out []string
	if len(c.ArgvSecrets) > 0 {
		out = append(out, strings.Join(c.ArgvSecrets, ", ")+" given on the command line: every local account can read it in /proc/<pid>/cmdline; use the DASHGATE_* variable or a -file flag")
	}
	if c.UserHeader == "" || c.ProxySecretFile != "" {
		return out
	}
	prefixes, _, _ := web.ParseTrustedPeers(c.TrustedProxies)
	if len(prefixes) > 0 {
		out = append(out, "--user-header is believed from any process connecting from --trusted-proxies "+c.TrustedProxies+
			": on this machine every local process (127.0.0.1) can name itself any user; "+safeProxyWays)
	}
	return out
}

// readSecretFiles reads --token-file, --admin-token-file and
// --proxy-secret-file. Each must be a regular file not readable by others
// (a secret's file is as secret as the secret), hold one line, and not be
// given beside the flag it replaces.
func (c *config) readSecretFiles() error {
	read := func(flagName, path string) (string, error) {
		fi, err := os.Stat(path)
		if err != nil {
			return "", fmt.Errorf("--%s: %w", flagName, err)
		}
		if !fi.Mode().IsRegular() {
			return "", fmt.Errorf("--%s %s: not a regular file", flagName, path)
		}
		if fi.Mode().Perm()&0o004 != 0 {
			return "", fmt.Errorf("--%s %s: readable by every account (mode %04o): chmod o-r it", flagName, path, fi.Mode().Perm())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("--%s: %w", flagName, err)
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" || strings.ContainsAny(v, "\r\n") {
			return "", fmt.Errorf("--%s %s: want one non-empty line", flagName, path)
		}
		return v, nil
	}
	var err error
	if c.TokenFile != "" {
		if c.Token != "" {
			return errors.New("--token and --token-file: give one")
		}
		if c.Token, err = read("token-file", c.TokenFile); err != nil {
			return err
		}
	}
	if c.AdminTokenFile != "" {
		if c.AdminToken != "" {
			return errors.New("--admin-token and --admin-token-file: give one")
		}
		if c.AdminToken, err = read("admin-token-file", c.AdminTokenFile); err != nil {
			return err
		}
	}
	if c.ProxySecretFile != "" {
		v, err := read("proxy-secret-file", c.ProxySecretFile)
		if err != nil {
			return err
		}
		if len(v) < 16 {
			return fmt.Errorf("--proxy-secret-file %s: the secret is %d bytes; want at least 16 (openssl rand -hex 32)", c.ProxySecretFile, len(v))
		}
		c.ProxySecret = []byte(v)
	}
	return nil
}

// urlHasPassword says whether a --store URL carries a password.
func urlHasPassword(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return strings.Contains(raw, "@") // unparsable: assume the worst
	}
	_, ok := u.User.Password()
	return ok
}

// isLoopback reports whether addr only listens on the loopback interface
// (or is a Unix socket, reachable only through the file system).
func isLoopback(addr string) bool {
	if _, ok := unixPath(addr); ok {
		return true
	}
	return loopbackAddr(addr)
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// unixPath is the socket path of an --addr of the form unix:/path.
func unixPath(addr string) (string, bool) {
	p, ok := strings.CutPrefix(addr, "unix:")
	return p, ok && p != ""
}

// loopbackAddr reports whether addr is host:port with a loopback host.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// goMaxProcsFlag is --gomaxprocs: auto, or a number of threads.
type goMaxProcsFlag struct {
	n    *int
	auto *bool
}

func (f goMaxProcsFlag) String() string {
	if f.auto == nil || *f.auto {
		return "auto"
	}
	return strconv.Itoa(*f.n)
}

func (f goMaxProcsFlag) Set(v string) error {
	if v == "auto" {
		*f.auto, *f.n = true, 0
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("want 1 to 1024, 0 or auto")
	}
	*f.auto, *f.n = false, n // out of range: refused with the other checks
	return nil
}

// childNiceFlag is --child-nice: auto (-1) or a nice value.
type childNiceFlag struct{ n *int }

func (f childNiceFlag) String() string {
	if f.n == nil || *f.n < 0 {
		return "auto"
	}
	return strconv.Itoa(*f.n)
}

func (f childNiceFlag) Set(v string) error {
	if v == "auto" {
		*f.n = -1
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return fmt.Errorf("want 0 to 19, or auto")
	}
	*f.n = n // above 19: refused with the other checks
	return nil
}
