package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"sync"
	"time"
)

// bench runs the figure groups and collects figures and problems.
type bench struct {
	cfg    config
	tmp    string
	bin    string  // dashgate binary (when this tool starts dashgate)
	shared *target // the --url target
	log    io.Writer

	mu    sync.Mutex
	figs  map[string]*Figure
	order []string
	errs  []string
	notes []string
	warns int
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "  "+format+"\n", args...)
}

// errorf records a problem: the run goes on, the tool exits 1.
func (b *bench) errorf(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	if len(b.errs) < 200 {
		b.errs = append(b.errs, msg)
	} else if len(b.errs) == 200 {
		b.errs = append(b.errs, "(more errors left out)")
	}
	fmt.Fprintln(b.log, "  error:", msg)
}

func (b *bench) note(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.notes = append(b.notes, fmt.Sprintf(format, args...))
}

// fig returns the figure id, registering it on first use.
func (b *bench) fig(id, name, unit string, target Target) *Figure {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f, ok := b.figs[id]; ok {
		return f
	}
	f := &Figure{ID: id, Name: name, Unit: unit, Target: target, Info: target.Op == ""}
	b.figs[id] = f
	b.order = append(b.order, id)
	return f
}

func (b *bench) leakFig(id, name string, max float64) *Figure {
	f := b.fig(id, name, "count", Target{"<=", max})
	f.Leak = true
	return f
}

// add records a run's value; a run that yielded none (NaN: no sample) is
// noted and left out.
func (b *bench) add(f *Figure, v float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if math.IsNaN(v) || math.IsInf(v, 0) {
		b.notes = append(b.notes, f.Name+": a run yielded no value")
		return
	}
	f.Runs = append(f.Runs, v)
}

// withTarget runs f against a dashgate: a fresh one started with extra
// flags, stopped (and checked) afterwards, or the --url one.
func (b *bench) withTarget(ctx context.Context, name string, extra []string, f func(t *target) error) {
	if b.shared != nil {
		if err := f(b.shared); err != nil {
			b.errorf("%s: %v", name, err)
		}
		return
	}
	t, err := startDashgate(ctx, b.bin, b.tmp, name, extra...)
	if err != nil {
		b.errorf("%s: %v", name, err)
		return
	}
	b.logf("%s: dashgate pid %d at %s", name, t.pid, t.base.Host)
	if err := f(t); err != nil {
		b.errorf("%s: %v", name, err)
	}
	warns, problems := t.proc.stop(60 * time.Second)
	for _, p := range problems {
		b.errorf("%v", p)
	}
	b.mu.Lock()
	b.warns += warns
	b.mu.Unlock()
}
