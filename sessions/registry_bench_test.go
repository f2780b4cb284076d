package sessions

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dashgate/dashgate/workers"
)

// benchRegistry is a registry over fake workers (see fakes_test.go), real
// time, no logs.
func benchRegistry(b *testing.B, mod func(*Config)) (*Registry, *fakeSpawner) {
	b.Helper()
	sp := &fakeSpawner{}
	cfg := Config{Spawner: sp, DetachedTTL: time.Hour, MaxSessions: 1 << 20}
	if mod != nil {
		mod(&cfg)
	}
	r := New(cfg)
	b.Cleanup(func() {
		r.Shutdown(context.Background())
		r.Wait()
		r.FlushStore(context.Background())
	})
	return r, sp
}

// benchViewer is a viewer whose done channel exists from the start, so that
// leave only closes it (no write that a registry goroutine could race).
func benchViewer() *recViewer { return &recViewer{done: make(chan struct{})} }

// BenchmarkRegistryCreateClose: session.create then session.close, no
// worker.
func BenchmarkRegistryCreateClose(b *testing.B) {
	r, _ := benchRegistry(b, nil)
	v := benchViewer()
	for b.Loop() {
		in, err := r.Create(v, NewSession{Title: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if ok, err := r.Close(anon, in.ID, EndClientClose); !ok || err != nil {
			b.Fatalf("Close = %v, %v", ok, err)
		}
	}
}

// BenchmarkRegistryChurn is one churn cycle of cmd/dashgate-bench with a
// fake worker: a socket (viewer) creates a session, runs a slash command
// (spawning the worker), and goes (the session detaches, its worker
// closes). Sessions accumulate detached, as in the real cycle.
func BenchmarkRegistryChurn(b *testing.B) {
	r, _ := benchRegistry(b, nil)
	ctx := context.Background()
	for b.Loop() {
		v := benchViewer()
		in, err := r.Create(v, NewSession{Title: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Exec(ctx, v, in.ID, "/echo x"); err != nil {
			b.Fatal(err)
		}
		v.leave()
		r.DetachViewer(v, workers.ReasonDetach)
	}
	b.StopTimer()
	r.Wait()
}

// BenchmarkRegistryCreateAtCapacity: creating a session while MaxSessions
// are live evicts the least recently active detached one; both the live
// count and the eviction scan every session.
func BenchmarkRegistryCreateAtCapacity(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r, _ := benchRegistry(b, func(c *Config) { c.MaxSessions = n })
			for range n {
				v := benchViewer()
				r.Create(v, NewSession{Title: "bench"})
				v.leave()
				r.DetachViewer(v, workers.ReasonDetach)
			}
			b.ResetTimer()
			for b.Loop() {
				v := benchViewer()
				if _, err := r.Create(v, NewSession{Title: "bench"}); err != nil {
					b.Fatal(err)
				}
				v.leave()
				r.DetachViewer(v, workers.ReasonDetach)
			}
			b.StopTimer()
			r.Wait()
		})
	}
}

// BenchmarkRegistryExecWarm: a slash command on a session whose (fake)
// worker runs: the registry's share of a warm slash.exec.
func BenchmarkRegistryExecWarm(b *testing.B) {
	r, _ := benchRegistry(b, nil)
	v := benchViewer()
	in, _ := r.Create(v, NewSession{Title: "bench"})
	ctx := context.Background()
	for b.Loop() {
		if _, err := r.Exec(ctx, v, in.ID, "/echo x"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRegistryList: the snapshot behind session.list, /admin and the
// /metrics session gauge.
func BenchmarkRegistryList(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r, _ := benchRegistry(b, func(c *Config) { c.MaxViewed = n }) // one viewer makes them all
			v := benchViewer()
			for range n {
				if _, err := r.Create(v, NewSession{Title: "bench"}); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				if got := len(r.List(anon)); got != n {
					b.Fatalf("List has %d sessions", got)
				}
			}
		})
	}
}

// BenchmarkRealWorkerChurn is the churn cycle with the real built-in worker
// (this test binary re-executed, see TestMain): spawn, one call, detach,
// close and reap. Its CPU profile shows what a cycle costs dashgate:
//
//	go test -run '^$' -bench RealWorkerChurn -cpuprofile cpu.out ./sessions/
func BenchmarkRealWorkerChurn(b *testing.B) {
	mgr := workers.NewManager(workers.Config{Grace: 2 * time.Second, Instance: "bench"})
	r, _ := benchRegistry(b, func(c *Config) {
		c.Spawner = ProcSpawner{
			Manager: mgr, WorkerCmd: []string{os.Args[0]}, PTYCmd: []string{"/bin/sh"},
			Env: []string{"DASHGATE_TEST_WORKER=1", "PATH=" + os.Getenv("PATH")},
		}
	})
	b.Cleanup(func() {
		mgr.CloseAll(workers.ReasonShutdown)
		mgr.Wait()
	})
	ctx := context.Background()
	for b.Loop() {
		v := benchViewer()
		in, err := r.Create(v, NewSession{Title: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Exec(ctx, v, in.ID, "/echo x"); err != nil {
			b.Fatal(err)
		}
		procs := mgr.Procs()
		v.leave()
		r.DetachViewer(v, workers.ReasonDetach)
		for _, p := range procs {
			<-p.Closed() // reaped: the next cycle starts from nothing
		}
	}
}
