package handlers

import (
	"context"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/sessions"
)

// BenchmarkChatSocketIdle opens b.N idle chat sockets (each read by its
// client, so pings would be answered) and reports what one costs the
// server: heap and goroutine stack bytes, and goroutines. Client and server
// share the process, so the client's share is measured apart (dial only,
// no server) and taken off.
func BenchmarkChatSocketIdle(b *testing.B) {
	reg := sessions.New(sessions.Config{})
	chat := &Chat{Registry: reg, Version: "bench", Socket: SocketConfig{PingInterval: time.Hour, WriteTimeout: 10 * time.Second}}
	srv := httptest.NewServer(chat)
	defer srv.Close()
	url := "ws" + strings.TrimPrefix(srv.URL, "http")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	measure := func() (heap, stack uint64, gs int) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc, ms.StackInuse, runtime.NumGoroutine()
	}
	h0, s0, g0 := measure()
	conns := make([]*websocket.Conn, 0, b.N)
	b.ResetTimer()
	for range b.N {
		c, _, err := websocket.Dial(ctx, url, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := c.Read(ctx); err != nil { // gateway.ready
			b.Fatal(err)
		}
		go func() { // reads, as a browser does
			for {
				if _, _, err := c.Read(ctx); err != nil {
					return
				}
			}
		}()
		conns = append(conns, c)
	}
	b.StopTimer()
	h1, s1, g1 := measure()
	n := float64(b.N)
	b.ReportMetric(float64(h1-h0)/n, "heapB/socket")
	b.ReportMetric(float64(s1-s0)/n, "stackB/socket")
	b.ReportMetric(float64(g1-g0)/n, "goroutines/socket")
	for _, c := range conns {
		c.CloseNow()
	}
	srv.CloseClientConnections()
	cancel()
	reg.Wait()
}

// BenchmarkChatCall is chatConn.call alone, from a decoded request to its
// result or error: the routing by method name, the method's params and a
// registry call that does no I/O (an empty registry's list, a missing
// session), an input error and an unknown method.
func BenchmarkChatCall(b *testing.B) {
	reg := sessions.New(sessions.Config{})
	defer reg.Wait()
	c := &chatConn{h: &Chat{Registry: reg}, done: make(chan struct{})}
	c.h.defaults()
	c.log = c.h.Log
	for _, bc := range []struct {
		name, method, params string
		wantErr              bool
	}{
		{"list", "session.list", `{}`, false},
		{"interrupt_missing", "session.interrupt", `{"session_id":"0123456789abcdef01234567"}`, true},
		{"slash_bad_command", "slash.exec", `{"session_id":"0123456789abcdef01234567","command":"echo"}`, true},
		{"history_bad_limit", "session.history", `{"session_id":"0123456789abcdef01234567","limit":0}`, true},
		{"unknown_method", "session.nope", `{}`, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			req := Request{ID: []byte("1"), Method: bc.method, Params: []byte(bc.params)}
			ctx := b.Context()
			for b.Loop() {
				if _, _, err := c.call(ctx, req); (err != nil) != bc.wantErr {
					b.Fatalf("%s: err %v", bc.method, err)
				}
			}
		})
	}
}
