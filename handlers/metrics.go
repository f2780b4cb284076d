package handlers

import (
	"net/http"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers"
)

// Metrics holds dashgate's Prometheus metrics (PROTOCOL.md §6, /metrics) and
// the close counts the admin page shows. Its methods are the callbacks of
// the registry, the worker manager and the socket handlers; none blocks.
type Metrics struct {
	reg                *prometheus.Registry
	sessionCloses      *prometheus.CounterVec
	workerCloses       *prometheus.CounterVec
	workerCloseSeconds prometheus.Histogram
	wsConns            *prometheus.GaugeVec
	ptyBytes           *prometheus.CounterVec

	mu         sync.Mutex
	byEnd      map[string]int
	byReason   map[string]int
	listLive   func() []sessions.Info
	countProcs func() map[workers.Kind]int
}

// NewMetrics builds the metrics; the session and worker gauges are read
// from listSessions and countProcs (live children by kind) at scrape time.
// Every end reason and worker reason of sessions' reason table has its
// series from the start, at zero.
func NewMetrics(listSessions func() []sessions.Info, countProcs func() map[workers.Kind]int) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		sessionCloses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dashgate_session_closes_total", Help: "Sessions closed, by end reason.",
		}, []string{"end_reason"}),
		workerCloses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dashgate_worker_closes_total", Help: "Workers and terminals closed, by reason and escalation.",
		}, []string{"reason", "escalation"}),
		workerCloseSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "dashgate_worker_close_seconds", Help: "Time from asking a child to close to its reaping.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		wsConns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dashgate_ws_connections", Help: "Open WebSocket connections, by endpoint.",
		}, []string{"endpoint"}),
		ptyBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dashgate_pty_bytes_total", Help: "Bytes through terminals: out of the pty (output) or into it (input).",
		}, []string{"direction"}),
		byEnd: map[string]int{}, byReason: map[string]int{},
		listLive: listSessions, countProcs: countProcs,
	}
	for _, r := range sessions.EndReasons {
		m.sessionCloses.WithLabelValues(string(r))
	}
	for _, r := range sessions.WorkerReasons {
		for _, e := range []workers.Escalation{workers.EscalationNone, workers.EscalationTerm, workers.EscalationKill} {
			m.workerCloses.WithLabelValues(string(r), string(e))
		}
	}
	m.reg.MustRegister(m.sessionCloses, m.workerCloses, m.workerCloseSeconds, m.wsConns, m.ptyBytes,
		gaugeCollector{m}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

var (
	sessionsDesc = prometheus.NewDesc("dashgate_sessions", "Live sessions, by state.", []string{"state"}, nil)
	workersDesc  = prometheus.NewDesc("dashgate_workers", "Live children, by kind.", []string{"kind"}, nil)
)

type gaugeCollector struct{ m *Metrics }

func (g gaugeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- sessionsDesc; ch <- workersDesc }

func (g gaugeCollector) Collect(ch chan<- prometheus.Metric) {
	states := map[string]int{"created": 0, "attached": 0, "detached": 0}
	for _, s := range g.m.listLive() {
		states[string(s.State)]++
	}
	for st, n := range states {
		ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(n), st)
	}
	kinds := g.m.countProcs()
	for _, k := range []workers.Kind{workers.KindChat, workers.KindPTY} {
		ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(kinds[k]), string(k))
	}
}

// Handler serves /metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

// SessionClosed counts a session close.
func (m *Metrics) SessionClosed(r sessions.EndReason) {
	m.sessionCloses.WithLabelValues(string(r)).Inc()
	m.mu.Lock()
	m.byEnd[string(r)]++
	m.mu.Unlock()
}

// WorkerClosed counts a child close.
func (m *Metrics) WorkerClosed(res workers.CloseResult) {
	m.workerCloses.WithLabelValues(string(res.Reason), string(res.Escalation)).Inc()
	m.workerCloseSeconds.Observe(res.Duration.Seconds())
	m.mu.Lock()
	m.byReason[string(res.Reason)]++
	m.mu.Unlock()
}

// Conn returns the OnConn callback of an endpoint ("chat" or "pty").
func (m *Metrics) Conn(endpoint string) func(int) {
	g := m.wsConns.WithLabelValues(endpoint)
	return func(d int) { g.Add(float64(d)) }
}

// PTYOutput and PTYInput count terminal bytes.
func (m *Metrics) PTYOutput(n int) { m.ptyBytes.WithLabelValues("output").Add(float64(n)) }
func (m *Metrics) PTYInput(n int)  { m.ptyBytes.WithLabelValues("input").Add(float64(n)) }

// closeCounts returns the close counts since start, sorted by label.
func (m *Metrics) closeCounts() (byEnd, byReason []countPair) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return sortedCounts(m.byEnd), sortedCounts(m.byReason)
}

type countPair struct {
	label string
	n     int
}

func sortedCounts(mp map[string]int) []countPair {
	out := make([]countPair, 0, len(mp))
	for k, v := range mp {
		out = append(out, countPair{k, v})
	}
	slices.SortFunc(out, func(a, b countPair) int {
		if a.label < b.label {
			return -1
		}
		if a.label > b.label {
			return 1
		}
		return 0
	})
	return out
}
