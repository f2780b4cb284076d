// Command dashgate serves a browser dashboard (chat and terminal) for an
// agent and guarantees that no child process outlives its reason.
//
//	dashgate [serve] [flags]   run the gateway (the default)
//	dashgate worker            the built-in JSON-lines worker (PROTOCOL.md §4)
//	dashgate agent             the LLM worker (PROTOCOL.md §7), configured by its environment
//	dashgate user add|list|remove NAME   the users of --users-file
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/cluster"
	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/maxprocs"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/web"
	"github.com/dashgate/dashgate/workers"
	"github.com/dashgate/dashgate/workers/agent"
	"github.com/dashgate/dashgate/workers/builtin"
	"github.com/dashgate/dashgate/workers/files"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

// workerProcs runs a worker process's Go code on one thread at a time
// (GOMAXPROCS 1) unless its environment's GOMAXPROCS says otherwise. A
// worker (the built-in one, the agent, the ACP bridge) waits on its pipes,
// its model server and its tools, and each of its wake-ups is a few
// microseconds of work; with Go's default of one P per CPU, a wake-up
// also woke an idle thread to look for more work. Hundreds of streaming
// workers made that the machine's load: on 2 cores, 300 streaming echo
// agents at one P each left the gateway's quiet call p99 at 47 ms against
// 81 (BENCHMARKS.md, issue 43).
func workerProcs() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}

// Main runs dashgate with args (without the program name) and returns the
// exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "worker" {
		workerProcs()
		return builtin.Main()
	}
	if len(args) > 0 && args[0] == "agent" {
		workerProcs()
		return agent.Main()
	}
	if len(args) > 0 && args[0] == "acp" {
		workerProcs()
		return runACP(args[1:])
	}
	if len(args) > 0 && args[0] == "file" {
		return files.Main(args[1:], os.Stdin, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "user" {
		return userMain(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:]
	}
	cfg, err := parseConfig(args, os.Getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "dashgate:", err)
		return 2
	}
	log := newLogger(cfg, stderr)

	// SIGHUP rereads --users-file (reloadOnHUP); without one it stops
	// dashgate as SIGTERM does (a closed terminal), never without its
	// shutdown.
	stopSignals := []os.Signal{syscall.SIGINT, syscall.SIGTERM}
	if cfg.UsersFile == "" {
		stopSignals = append(stopSignals, syscall.SIGHUP)
	}
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
		// A second signal forces the exit; children die with us (Pdeathsig).
		again := make(chan os.Signal, 1)
		signal.Notify(again, syscall.SIGINT, syscall.SIGTERM)
		<-again
		log.Warn("second signal: exiting at once")
		os.Exit(1)
	}()
	if err := run(ctx, cfg, log, stdout); err != nil {
		var refused *startupError
		if errors.As(err, &refused) {
			fmt.Fprintln(stderr, "dashgate:", err)
			return 2
		}
		log.Error("dashgate stopped", "err", err)
		return 1
	}
	return 0
}

// usersMode names how dashgate learns who is asking, for the listening
// record: "" (the one anonymous user of the dashboard token), "header",
// "users-file" or "header+users-file".
func usersMode(cfg config) string {
	var modes []string
	if cfg.UserHeader != "" {
		modes = append(modes, "header")
	}
	if cfg.UsersFile != "" {
		modes = append(modes, "users-file")
	}
	return strings.Join(modes, "+")
}

func newLogger(cfg config, w io.Writer) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// stateToken is the dashboard token when none is set: made once, kept in
// <state-dir>/token (0600) and reused by the next start, so that the
// browser's cookie, and its open tabs, outlive a restart.
func stateToken(stateDir string) (string, error) { return stateSecret(stateDir, "token") }

// stateSecret is the secret kept in <state-dir>/<name> (0600, refused when
// a symlink, another user's or another mode), made on first use: a random
// hex string of at least 32 characters.
func stateSecret(stateDir, name string) (string, error) {
	path := filepath.Join(stateDir, name)
	f, err := openTokenFile(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	// Two starts at once on one state dir agree on one secret.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return "", fmt.Errorf("token file %s: lock: %w", path, err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	if token := strings.TrimSpace(string(b)); len(token) >= 32 {
		return token, nil
	}
	token := randomToken()
	if err := f.Truncate(0); err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	if _, err := f.WriteAt([]byte(token+"\n"), 0); err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	return token, nil
}

func randomToken() string {
	var b [24]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// setupCgroups sets up containment per --cgroup and logs the mode once:
// INFO "containment" with mode=cgroup and the instance's cgroup, or
// mode=fallback and why; one WARN per limit whose controller is missing.
// With --cgroup on and no usable hierarchy it refuses to start.
func setupCgroups(cfg config, instance string, log *slog.Logger) (*workers.Cgroups, error) {
	mode, _ := workers.ParseCgroupMode(cfg.Cgroup)
	cg, err := workers.SetupCgroups(workers.CgroupOptions{
		Mode: mode, Root: cfg.CgroupRoot, Instance: instance,
		MemoryMax: int64(cfg.ChildMemoryBytes), PidsMax: int64(cfg.ChildPidsMax),
		UserMemoryMax: int64(cfg.UserMemoryBytes), UserPidsMax: int64(cfg.UserPidsMax), UserCPUMax: cfg.UserCPUMaxLine,
		CPUWeight: cfg.ChildCPUWeight,
	})
	switch {
	case err != nil && mode == workers.CgroupOn:
		return nil, &startupError{fmt.Errorf("--cgroup on: %w", err)}
	case err != nil:
		log.Info("containment", "mode", "fallback", "err", err)
		return nil, nil
	case cg == nil:
		log.Info("containment", "mode", "fallback", "err", "--cgroup off")
		return nil, nil
	}
	log.Info("containment", "mode", "cgroup", "cgroup", cg.Dir, "delegated", cg.Delegated,
		"controllers", strings.Join(cg.Controllers, ","), "cpu_weight", cg.CPUWeight)
	for _, u := range cg.Unapplied {
		log.Warn("cgroup controller missing: limit not applied", "controller", u.Controller, "flag", u.Flag, "cgroup", cg.Base)
	}
	return cg, nil
}

// goMaxProcsTuner is --gomaxprocs auto's: GOMAXPROCS between the CPUs Go
// chose for the gateway (its CPUs, or its cgroup's CPU limit) and four
// times as many. With Go's own, 300 streaming children at dashgate's
// priority left it a fifth of a core and session.history waited 1.5 s;
// with 8 threads on 2 CPUs, 40–60 ms (BENCHMARKS.md, issue 28). But 8
// threads cost a third more CPU a terminal connect while the CPUs were not
// saturated (issue 43): see package maxprocs.
func goMaxProcsTuner(log *slog.Logger) *maxprocs.Tuner {
	low := runtime.GOMAXPROCS(0)
	return &maxprocs.Tuner{Low: low, High: min(4*low, 1024), Log: log}
}

// run serves until ctx ends, then closes every session (end_reason=shutdown)
// and reaps every child before it returns.
func run(ctx context.Context, cfg config, log *slog.Logger, stdout io.Writer) error {
	switch {
	case cfg.GoMaxProcsAuto:
		tctx, stopTuner := context.WithCancel(ctx)
		var tuned sync.WaitGroup
		tuned.Go(func() { goMaxProcsTuner(log).Run(tctx) })
		defer func() { stopTuner(); tuned.Wait() }()
	case cfg.GoMaxProcs > 0:
		runtime.GOMAXPROCS(cfg.GoMaxProcs)
	}
	switch err := workers.SetGatewaySlice(cfg.GatewaySlice); {
	case errors.Is(err, workers.ErrSliceIgnored):
		log.Info("gateway slice left to the kernel", "slice", cfg.GatewaySlice, "err", err)
	case err != nil:
		log.Warn("gateway slice not set", "slice", cfg.GatewaySlice, "err", err)
	}
	if err := workers.EnableSubreaper(); err != nil {
		log.Warn("cannot become a child subreaper; orphans go to init", "err", err)
	}
	if err := prepareStateDir(cfg.StateDir); err != nil {
		return err
	}
	noticeLegacyStateDir(cfg.StateDir, log)
	inst, err := workers.AcquireInstance(cfg.StateDir)
	if err != nil {
		return err
	}
	defer inst.Release()
	cg, err := setupCgroups(cfg, inst.ID, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := cg.Close(); err != nil {
			log.Warn("cgroup not removed at exit", "cgroup", cg.Dir, "err", err)
		}
	}()
	if res, err := workers.Sweep(cfg.StateDir, inst.ID, cfg.WorkerGrace, cg, log); err != nil {
		log.Warn("startup sweep", "err", err)
	} else if res.Instances > 0 {
		log.Info("startup sweep done", "dead_instances", res.Instances, "processes", res.Processes)
	}

	st, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.Close()

	token := cfg.Token
	if token == "" {
		if token, err = stateToken(cfg.StateDir); err != nil {
			return &startupError{err}
		}
	}
	workerCmd := strings.Fields(cfg.WorkerCmd)
	var workerEnv []string
	var models handlers.ModelLister
	if cfg.LLMURL != "" {
		key := os.Getenv(cfg.LLMKeyEnv)
		if workerEnv, err = agentEnv(cfg, key); err != nil {
			return err
		}
		models = newModelServer(cfg, key).List
	}
	if len(workerCmd) == 0 {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find own binary for the worker: %w", err)
		}
		sub := "worker"
		if cfg.LLMURL != "" {
			sub = "agent"
		}
		workerCmd = []string{self, sub}
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary for the agents' bridge: %w", err)
	}
	defAgent := defaultAgent(cfg.DefaultAgent, cfg.Agents)
	for _, prog := range [][]string{workerCmd, strings.Fields(cfg.PTYCmd)} {
		if _, err := exec.LookPath(prog[0]); err != nil {
			return fmt.Errorf("--worker-cmd / --pty-cmd: %w", err)
		}
	}
	trusted, trustUnix, err := web.ParseTrustedPeers(cfg.TrustedProxies)
	if err != nil {
		return err
	}
	var proxyPeer *web.ProxyPeer
	if cfg.ProxyUser != "" {
		p, err := web.LookupProxyPeer(cfg.ProxyUser, os.Geteuid())
		if err != nil {
			return &startupError{fmt.Errorf("--proxy-user: %w", err)}
		}
		proxyPeer = &p
	}
	for _, w := range cfg.proxyWarnings() {
		log.Warn(w)
	}
	userFile, err := openUsers(cfg.UsersFile)
	if err != nil {
		return err
	}
	unixAccounts, err := openAccounts(cfg)
	if err != nil {
		return err
	}
	cookieKey, err := stateSecret(cfg.StateDir, "cookie.key")
	if err != nil {
		return &startupError{err}
	}

	childPrio := workers.Priority{Nice: cfg.ChildNice, Sched: workers.ChildSched(cfg.ChildSched)}
	var ptyPrio *workers.Priority
	if cfg.ChildNice < 0 { // auto: the workers' only
		ptyPrio = &workers.Priority{Sched: childPrio.Sched}
		childPrio.Nice = workers.AutoChildNice()
	}
	var metrics *handlers.Metrics
	mgr := workers.NewManager(workers.Config{
		Instance: inst.ID, Grace: cfg.WorkerGrace, MaxWorkers: cfg.MaxWorkers, Log: log,
		OnClose: func(r workers.CloseResult) { metrics.WorkerClosed(r) }, Cgroups: cg,
		Priority: childPrio, PTYPriority: ptyPrio,
	})
	// The nodes of a cluster on one PostgreSQL tell each other of their
	// sessions' changes (session.changed for a user's sockets everywhere).
	var changes sessions.ChangeBus
	if isPostgresURL(cfg.Store) {
		bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		bus, err := cluster.NewPGBus(bctx, cfg.Store, log)
		cancel()
		if err != nil {
			return &startupError{fmt.Errorf("change bus: %w", err)}
		}
		defer bus.Close()
		changes = bus
	}
	recs, err := openRecordings(cfg, log) // nil without --record-terminals
	if err != nil {
		return err
	}
	reg := sessions.New(sessions.Config{
		Changes: changes,
		Spawner: sessions.ProcSpawner{
			Manager: mgr, WorkerCmd: workerCmd, PTYCmd: strings.Fields(cfg.PTYCmd), PTYDir: cfg.PTYCwd,
			Env: sessions.FilterEnv(os.Environ(), splitList(cfg.PassEnv)), WorkerEnv: workerEnv,
			LoginShell: unixAccounts != nil && !cfg.PTYCmdExplicit,
			Agents:     agentCommands(self, cfg.Agents), MaxLine: cfg.Attach.MaxLine(cfg.AgentContext),
		},
		Agents: cfg.Agents.names(), DefaultAgent: defAgent,
		Log: log, DetachedTTL: cfg.DetachedTTL, MaxSessions: cfg.MaxSessions, MaxViewed: cfg.MaxPerSocket,
		WorkerTimeout: cfg.WorkerTimeout, InterruptGrace: cfg.InterruptGrace,
		PTYKeepalive: cfg.PTYKeepalive, PTYBuffer: cfg.PTYBuffer, PTYSpare: cfg.PTYSpare, PTYSpareIdle: cfg.PTYSpareIdle,
		Store: st, SuspendOnShutdown: st.Durable, HistoryRetention: cfg.HistoryRetention, StoreBacklog: cfg.StoreBacklog,
		DescribeError:   handlers.DescribeError,
		ApprovalTimeout: cfg.ApprovalTimeout, AgentContext: cfg.AgentContext, DetachTurnGrace: cfg.DetachTurnGrace, Attach: cfg.Attach,
		Accounts:           accountsLookup(unixAccounts),
		MaxSessionsPerUser: cfg.MaxSessionsUser, MaxWorkersPerUser: cfg.MaxWorkersUser, MaxTerminalsPerUser: cfg.MaxTerminalsUser,
		OnSessionClose: func(r sessions.EndReason) { metrics.SessionClosed(r) },
		OnPTYOutput:    func(n int) { metrics.PTYOutput(n) },
		Record:         recordFunc(recs),
	})
	metrics = handlers.NewMetrics(reg.Admin().List, mgr.CountByKind)
	// Every node holds its sessions under leases, a node alone too: one
	// ownership mode, every write fenced by its epoch.
	node, nodeID, nodeIDFile, err := nodeIDs(cfg)
	if err != nil {
		return &startupError{err}
	}
	if nodeIDFile != nil {
		defer nodeIDFile.Close()
	}
	if _, err := reg.Claim(ctx, node, cfg.NodeExpiry); err != nil {
		return &startupError{fmt.Errorf("restore sessions from %s: %w", st.Path, err)}
	}

	sock := handlers.SocketConfig{PingInterval: cfg.PingInterval, PingTimeout: cfg.PingTimeout, WriteTimeout: cfg.WriteTimeout}
	admin := &handlers.Admin{Sessions: reg.Admin(), Procs: mgr, Metrics: metrics, Log: log, Version: version, Users: usersMode(cfg) != "",
		Outage: reg.Admin().StoreOutage}
	if nodes, ok := st.Store.(store.Nodes); ok && isPostgresURL(cfg.Store) {
		admin.Nodes = func(ctx context.Context) ([]store.Node, error) {
			return nodes.Nodes(ctx, time.Now(), cfg.NodeExpiry)
		}
	}
	if unixAccounts != nil && cg != nil {
		admin.UserCgroups = func(user string) (workers.UserCgroupStats, bool) {
			a, err := unixAccounts.Lookup(user) // cached: no command per page
			if err != nil {
				return workers.UserCgroupStats{}, false
			}
			return cg.UserStats(a.Name)
		}
	}
	var recHandler *handlers.Recordings // --record-terminals: /recordings and /admin/recordings
	if recs != nil {
		recHandler = &handlers.Recordings{Store: recs, Log: log,
			// A recording's session by its title: live here, else as
			// stored (a closed one); "" for one deleted.
			Title: func(ctx context.Context, owner, sid string) string {
				if in, ok := reg.Get(sessions.Principal{User: owner}, sid); ok {
					return in.Title
				}
				if row, err := st.Get(ctx, owner, sid); err == nil {
					return row.Title
				}
				return ""
			}}
		admin.Recordings = recHandler
	}
	// Listening before the server is built: the login cookie's name comes
	// from the bound address.
	ln, err := listen(cfg.Addr, proxyPeer)
	if err != nil {
		return err
	}
	defer ln.Close() // web.Run owns it once it serves; a second Close is harmless
	addr := ln.Addr().String()
	if _, ok := unixPath(cfg.Addr); ok {
		addr = "unix:" + addr
	}
	signKey, cookieName := cookieSecrets(usersMode(cfg) != "", token, cfg.AdminToken, cookieKey, addr, cfg.BasePath)
	if cs, ok := st.Store.(store.ClusterSecrets); ok && nodeID != "" && usersMode(cfg) != "" {
		kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		signKey, cookieName, err = clusterCookieSecrets(kctx, cs, cfg.BasePath)
		cancel()
		if err != nil {
			return &startupError{err}
		}
	}
	wcfg := web.Config{
		BasePath: cfg.BasePath, Token: token, AdminToken: cfg.AdminToken, TrustedProxies: trusted,
		AllowedOrigins: splitList(cfg.AllowedOrigins), NodeID: nodeID, Version: version, Log: log,
		MaxConnsPerIP: cfg.MaxConnsPerIP, MaxHTTPConns: cfg.MaxHTTPConns, IdleTimeout: cfg.HTTPIdleTimeout,
		CloseTimeout: cfg.WSCloseTimeout, TrustUnix: trustUnix, UserHeader: cfg.UserHeader,
		ProxyPeer: proxyPeer, ProxySecret: cfg.ProxySecret, HeaderTimeout: cfg.HeaderTimeout,
		MaxPendingPerPeer: pendingBudget(cfg.MaxPendingPeer),
		AdminUsers:        splitList(cfg.AdminUsers), CookieKey: signKey, Instance: cookieName,
	}
	wcfg.RecordTerminals = recs != nil
	nodes, clustered := st.Store.(store.Nodes)
	clustered = clustered && nodeID != ""
	if clustered {
		wcfg.NodeLive = (&liveNodes{nodes: nodes, within: cfg.NodeExpiry - cfg.NodeHeartbeat}).Live
	}
	if userFile != nil { // a nil *users.File would be a non-nil interface
		wcfg.Users = userFile
	}
	srv, err := web.New(wcfg, web.Handlers{
		Chat: &handlers.Chat{Registry: reg, Log: log, Version: version, Socket: sock, OnConn: metrics.Conn("chat"), Models: models,
			Agents: agentList(defAgent, cfg.Agents), Node: nodeID, Attach: cfg.Attach},
		Terminal:        &handlers.Terminal{Registry: reg, Log: log, Socket: sock, OnConn: metrics.Conn("pty"), OnInput: metrics.PTYInput},
		Admin:           admin,
		Metrics:         metrics.Handler(),
		Export:          &handlers.Export{Registry: reg, Log: log},
		Attachments:     &handlers.Attachments{Registry: reg, Log: log},
		TerminalRefusal: &handlers.TerminalRefusal{Registry: reg, Log: log},
		TerminalFiles:   &handlers.TerminalFiles{Registry: reg, Self: self, MaxUpload: cfg.PTYUploadMax, Log: log},
		Recordings:      recHandler,
	})
	if err != nil {
		return err
	}
	admin.BasePath = srv.BasePath
	if recHandler != nil {
		recHandler.BasePath = srv.BasePath
	}

	if cfg.AddrFile != "" {
		if err := os.WriteFile(cfg.AddrFile, []byte(addr+"\n"), 0o600); err != nil {
			ln.Close()
			return fmt.Errorf("write --addr-file: %w", err)
		}
	}
	base, _ := web.NormalizeBasePath(cfg.BasePath)
	log.Info("dashgate listening", "addr", addr, "base_path", base, "instance", inst.ID, "version", version, "pid", os.Getpid(),
		"users", usersMode(cfg))
	printURLs(stdout, cfg, addr, base, token, userFile != nil)

	serveCtx, stopServe := context.WithCancel(context.Background())
	defer stopServe()
	g, gctx := errgroup.WithContext(serveCtx)
	g.Go(func() error { return web.Run(gctx, ln, srv, cfg.ShutdownTimeout, log) })
	g.Go(func() error { reg.Run(gctx); return nil })
	g.Go(func() error { mgr.RunReaper(gctx, time.Second); return nil })
	g.Go(func() error { admin.Sample(gctx, handlers.DefaultSampleEvery); return nil })
	if recs != nil {
		g.Go(func() error { recs.Run(gctx); return nil }) // the retention sweep
	}
	if cfg.PprofAddr != "" {
		pln, err := net.Listen("tcp", cfg.PprofAddr)
		if err != nil {
			stopServe()
			g.Wait()
			return fmt.Errorf("--pprof-addr: %w", err)
		}
		g.Go(func() error { servePprof(gctx, pln, log); return nil })
	}
	if userFile != nil {
		g.Go(func() error { reloadOnHUP(gctx, userFile, srv, log); return nil })
	}
	if clustered {
		g.Go(func() error {
			heartbeat(gctx, nodes, nodeID, addr, reg, mgr, cfg.NodeHeartbeat, log)
			return nil
		})
	}

	select {
	case <-ctx.Done():
	case <-gctx.Done(): // the server failed
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := reg.Shutdown(sctx); err != nil {
		log.Warn("sessions still closing at the shutdown timeout", "err", err)
	}
	stopServe()
	serveErr := g.Wait()
	mgr.CloseAll(workers.ReasonShutdown) // anything a session did not own
	reg.Wait()
	mgr.Wait()
	if recs != nil { // every terminal ended: their recordings are being finished
		rctx, cancelRec := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		if err := recs.Wait(rctx); err != nil {
			log.Warn("terminal recordings still being written at exit", "err", err)
		}
		cancelRec()
	}
	// What left its child's tree and marker and was adopted by dashgate (a
	// subreaper) goes too: nothing reparented to dashgate outlives it.
	mgr.ReapAdopted(workers.ReasonShutdown)
	fctx, cancelFlush := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancelFlush()
	reg.FlushStore(fctx) // logs what it could not write
	log.Info("dashgate stopped")
	return serveErr
}

// pendingBudget is web.Config.MaxPendingPerPeer for --max-pending-per-peer,
// whose 0 means no budget (web's 0 means its default).
func pendingBudget(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// printURLs prints, on stdout for the person who started dashgate (never
// logged), where to open the dashboard and the admin page: under
// --public-url when given (a proxy's address), else http://<addr><base>.
// A Unix socket without --public-url has no URL to print.
func printURLs(stdout io.Writer, cfg config, addr, base, token string, usersFile bool) {
	pub := "http://" + addr + base
	if cfg.PublicURL != "" {
		u, err := loginBase("--public-url", cfg.PublicURL) // validated by parseConfig
		if err == nil {
			pub = u.String()
		}
	}
	if strings.HasPrefix(addr, "unix:") {
		fmt.Fprintf(stdout, "dashgate: listening on %s (for a proxy on this host)\n", addr)
		if cfg.PublicURL == "" {
			return
		}
	}
	switch {
	case usersFile && cfg.UserHeader == "":
		fmt.Fprintf(stdout, "dashgate: users log in with the URL `dashgate user add --public-url %s NAME` prints\n", pub)
	case cfg.UserHeader != "":
		fmt.Fprintf(stdout, "dashgate: serving the users its proxy names in %s at %s\n", cfg.UserHeader, pub)
	case cfg.TokenExplicit:
		fmt.Fprintf(stdout, "dashgate: open %s?token=<your token> (once; a cookie keeps you logged in)\n", pub)
	default:
		fmt.Fprintf(stdout, "dashgate: open %s?token=%s\n", pub, token)
	}
	if usersMode(cfg) != "" && !cfg.TokenExplicit && cfg.AdminToken == "" {
		fmt.Fprintf(stdout, "dashgate: admin at %sadmin?token=%s\n", pub, token)
	} else if cfg.AdminToken != "" && cfg.AdminToken != token {
		fmt.Fprintf(stdout, "dashgate: admin at %sadmin?token=<the admin token>\n", pub)
	}
}

// servePprof serves net/http/pprof on ln (--pprof-addr, loopback only, no
// auth: a debugging aid) until ctx ends, and records one in 10 mutex
// contentions for /debug/pprof/mutex meanwhile.
func servePprof(ctx context.Context, ln net.Listener, log *slog.Logger) {
	runtime.SetMutexProfileFraction(10)
	defer runtime.SetMutexProfileFraction(0)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info("pprof listening", "addr", ln.Addr().String())
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		srv.Close()
	}()
	srv.Serve(ln) // ends with http.ErrServerClosed once ctx ends
	<-done
}
