package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// percentile returns the p-th percentile (0..100) of xs by linear
// interpolation between closest ranks; NaN for no samples. xs is not changed.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 1 {
		return s[0]
	}
	rank := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	if lo == hi {
		return s[lo]
	}
	return s[lo] + (s[hi]-s[lo])*(rank-float64(lo))
}

// ms converts durations to milliseconds.
func ms(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}

// Target is what a figure should reach: Op is ">=" or "<=".
type Target struct {
	Op    string  `json:"op"`
	Value float64 `json:"value"`
}

func (t Target) met(v float64) bool {
	switch t.Op {
	case ">=":
		return v >= t.Value
	case "<=":
		return v <= t.Value
	}
	return true
}

func (t Target) String() string {
	if t.Op == "" {
		return "-"
	}
	return t.Op + " " + formatNum(t.Value)
}

// Figure is one measured quantity: one sample per run, summarised by its
// median and spread, checked against its target.
type Figure struct {
	ID    string    `json:"id"`
	Name  string    `json:"name"`
	Unit  string    `json:"unit"`
	Runs  []float64 `json:"runs"`
	Info  bool      `json:"info,omitempty"` // no target: shown for context
	Leak  bool      `json:"leak,omitempty"` // a miss is a leak: the tool fails
	Note  string    `json:"note,omitempty"`
	Total int       `json:"samples,omitempty"` // raw samples behind the runs, when more than one per run

	Target Target `json:"target"`
	Median num    `json:"median"`
	Min    num    `json:"min"`
	Max    num    `json:"max"`
	P10    num    `json:"p10"`
	P90    num    `json:"p90"`
	OK     bool   `json:"ok"`
}

// num is a summary figure; NaN (no run) is null in JSON, which has no NaN.
type num float64

func (n num) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(n)) || math.IsInf(float64(n), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(n))
}

func (n *num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = num(math.NaN())
		return nil
	}
	return json.Unmarshal(b, (*float64)(n))
}

// summarise fills the median, spread and verdict from Runs.
func (f *Figure) summarise() {
	if len(f.Runs) == 0 {
		nan := num(math.NaN())
		f.Median, f.Min, f.Max, f.P10, f.P90 = nan, nan, nan, nan, nan
		f.OK = f.Info
		return
	}
	f.Median = num(percentile(f.Runs, 50))
	f.Min = num(slices.Min(f.Runs))
	f.Max = num(slices.Max(f.Runs))
	f.P10 = num(percentile(f.Runs, 10))
	f.P90 = num(percentile(f.Runs, 90))
	if f.Leak {
		// a leak in any run is a leak
		worst := f.Max
		if f.Target.Op == ">=" {
			worst = f.Min
		}
		f.OK = f.Target.met(float64(worst))
		return
	}
	f.OK = f.Info || f.Target.met(float64(f.Median))
}

func (f *Figure) verdict() string {
	switch {
	case f.Info:
		return ""
	case len(f.Runs) == 0:
		return "n/a"
	case f.OK:
		return "ok"
	case f.Leak:
		return "LEAK"
	}
	return "miss"
}

func formatNum[T ~float64](x T) string {
	v := float64(x)
	switch {
	case math.IsNaN(v):
		return "-"
	case v == math.Trunc(v) && math.Abs(v) < 1e9:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

func (f *Figure) spread() string {
	if len(f.Runs) == 0 {
		return "-"
	}
	if len(f.Runs) == 1 {
		return "(1 run)"
	}
	return formatNum(f.Min) + "–" + formatNum(f.Max)
}

// writeTable prints the figures as an aligned table.
func writeTable(w io.Writer, figs []*Figure) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tunit\tmedian\tmin–max\tp10–p90\truns\ttarget\t")
	for _, f := range figs {
		p := "-"
		if len(f.Runs) > 1 {
			p = formatNum(f.P10) + "–" + formatNum(f.P90)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", f.Name, f.Unit, formatNum(f.Median), f.spread(), p, len(f.Runs), f.Target, f.verdict())
	}
	tw.Flush()
}

// writeMarkdown prints the figures as a Markdown table (for BENCHMARKS.md).
func writeMarkdown(w io.Writer, figs []*Figure) {
	fmt.Fprintln(w, "| figure | unit | median | min–max | p10–p90 | runs | target | |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---|---|")
	for _, f := range figs {
		p := "-"
		if len(f.Runs) > 1 {
			p = formatNum(f.P10) + "–" + formatNum(f.P90)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d | %s | %s |\n",
			f.Name, f.Unit, formatNum(f.Median), f.spread(), p, len(f.Runs), strings.ReplaceAll(f.Target.String(), "|", `\|`), f.verdict())
	}
}
