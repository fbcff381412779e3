package main

import (
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// A loadRun is one load run of a target at a concurrency.
type loadRun struct {
	c        int
	rps, p99 float64 // p99 in milliseconds
}

// series are the runs of one target, by concurrency.
type series struct {
	target string
	runs   []loadRun
}

// readRuns reads a TSV with a header row naming at least the columns
// target, c, rps and p99_us (what "load -format tsv" prints, with target
// and c in front): one series per target, in the order they first appear.
func readRuns(r io.Reader) ([]series, error) {
	col, rows, err := readTable(r, "target", "c", "rps", "p99_us")
	if err != nil {
		return nil, err
	}
	var out []series
	for n, row := range rows {
		field := func(name string) string { return cell(col, row, name) }
		c, err := strconv.Atoi(field("c"))
		if err != nil || c < 1 {
			return nil, fmt.Errorf("row %d: c %q is not a concurrency", n+2, field("c"))
		}
		rps, err1 := strconv.ParseFloat(field("rps"), 64)
		p99, err2 := strconv.ParseFloat(field("p99_us"), 64)
		if err := errors.Join(err1, err2); err != nil || rps < 0 || p99 < 0 || math.IsInf(rps+p99, 0) {
			return nil, fmt.Errorf("row %d: rps %q and p99_us %q must be numbers, 0 or more", n+2, field("rps"), field("p99_us"))
		}
		target := field("target")
		i := slices.IndexFunc(out, func(s series) bool { return s.target == target })
		if i < 0 {
			out, i = append(out, series{target: target}), len(out)
		}
		out[i].runs = append(out[i].runs, loadRun{c: c, rps: rps, p99: p99 / 1000})
	}
	for i := range out {
		slices.SortStableFunc(out[i].runs, func(a, b loadRun) int { return a.c - b.c })
	}
	return out, nil
}

// Chart geometry, in SVG user units.
const (
	chartW, chartH         = 460, 340
	marginL, marginR       = 64, 16
	marginT, marginB       = 36, 48
	legendH                = 28
	plotW                  = chartW - marginL - marginR
	plotH                  = chartH - marginT - marginB
	svgW, svgH             = 2 * chartW, chartH + legendH
	axisColor, gridColor   = "#444", "#e4e4e4"
	fontStyle              = `font-family="sans-serif" font-size="12"`
	titleStyle             = `font-family="sans-serif" font-size="14" font-weight="bold"`
	pointRadius, lineWidth = 3, 2
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf"}

// writeSVG draws throughput and p99 against concurrency, side by side,
// one line per series; the concurrency axis is logarithmic.
func writeSVG(w io.Writer, title string, data []series) error {
	var cs []int
	for _, s := range data {
		for _, r := range s.runs {
			if !slices.Contains(cs, r.c) {
				cs = append(cs, r.c)
			}
		}
	}
	if len(cs) == 0 {
		return errors.New("no runs to plot")
	}
	slices.Sort(cs)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(&b, `<title>%s</title>`+"\n", escape(title))
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	chart(&b, 0, "Throughput (requests/s)", cs, data, linearAxis, func(r loadRun) float64 { return r.rps })
	// Latency grows by orders of magnitude with queueing: a log scale keeps
	// the low concurrencies readable.
	chart(&b, chartW, "p99 latency (ms, log scale)", cs, data, logAxis, func(r loadRun) float64 { return r.p99 })
	// The legend, centred under both charts.
	x := float64(svgW)/2 - float64(len(data))*80
	for i, s := range data {
		color := palette[i%len(palette)]
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="%d"/>`+"\n", x, chartH+10, x+24, chartH+10, color, lineWidth)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s>%s</text>`+"\n", x+30, chartH+14, fontStyle, escape(s.target))
		x += 160
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// An axis maps values to [0, 1] and says where its ticks go.
type axis func(values []float64) (pos func(float64) float64, ticks []float64)

// linearAxis runs from 0 to a round number above the largest value.
func linearAxis(values []float64) (func(float64) float64, []float64) {
	top := slices.Max(values)
	step := niceStep(top / 5)
	top = step * math.Ceil(top/step)
	if top == 0 {
		top, step = 1, 0.2
	}
	var ticks []float64
	for i := 0.0; i*step <= top+step/2; i++ {
		ticks = append(ticks, i*step)
	}
	return func(v float64) float64 { return v / top }, ticks
}

// logAxis runs over the decades the values span, with ticks at 1, 2 and 5
// times a power of ten; values of 0 sit at the bottom.
func logAxis(values []float64) (func(float64) float64, []float64) {
	low, high := math.Inf(1), 0.0
	for _, v := range values {
		if v > 0 {
			low, high = min(low, v), max(high, v)
		}
	}
	if high == 0 {
		low, high = 1, 1
	}
	lo, hi := math.Floor(math.Log10(low)), math.Ceil(math.Log10(high))
	if hi == lo {
		hi++
	}
	var ticks []float64
	for e := lo; e <= hi; e++ {
		for _, m := range []float64{1, 2, 5} {
			if v := m * math.Pow(10, e); math.Log10(v) <= hi+1e-9 {
				ticks = append(ticks, v)
			}
		}
	}
	return func(v float64) float64 {
		if v <= 0 {
			return 0
		}
		return (math.Log10(v) - lo) / (hi - lo)
	}, ticks
}

// chart draws one chart at x offset left: the value of each run against
// its concurrency.
func chart(b *strings.Builder, left int, title string, cs []int, data []series, yAxis axis, value func(loadRun) float64) {
	var values []float64
	for _, s := range data {
		for _, r := range s.runs {
			values = append(values, value(r))
		}
	}
	ypos, ticks := yAxis(values)
	lo, hi := math.Log2(float64(cs[0])), math.Log2(float64(cs[len(cs)-1]))
	px := func(c int) float64 {
		if hi == lo {
			return float64(left+marginL) + plotW/2
		}
		return float64(left+marginL) + (math.Log2(float64(c))-lo)/(hi-lo)*plotW
	}
	py := func(v float64) float64 { return marginT + plotH - ypos(v)*plotH }

	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" %s>%s</text>`+"\n", left+marginL+plotW/2, marginT-14, titleStyle, escape(title))
	for _, v := range ticks {
		y := py(v)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", left+marginL, y, left+marginL+plotW, y, gridColor)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" %s>%s</text>`+"\n", left+marginL-6, y+4, fontStyle, tickLabel(v))
	}
	for _, c := range cs {
		x := px(c)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", x, marginT, x, marginT+plotH, gridColor)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" %s>%d</text>`+"\n", x, marginT+plotH+16, fontStyle, c)
	}
	fmt.Fprintf(b, `<path d="M%d %d V%d H%d" fill="none" stroke="%s"/>`+"\n", left+marginL, marginT, marginT+plotH, left+marginL+plotW, axisColor)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" %s>concurrent calls (-c)</text>`+"\n", left+marginL+plotW/2, marginT+plotH+36, fontStyle)
	for i, s := range data {
		color := palette[i%len(palette)]
		var points []string
		for _, r := range s.runs {
			points = append(points, fmt.Sprintf("%.1f,%.1f", px(r.c), py(value(r))))
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="%d"/>`+"\n", strings.Join(points, " "), color, lineWidth)
		for _, r := range s.runs {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="%d" fill="%s"><title>%s, c=%d: %s</title></circle>`+"\n",
				px(r.c), py(value(r)), pointRadius, color, escape(s.target), r.c, tickLabel(value(r)))
		}
	}
}

// niceStep rounds a step up to 1, 2, 2.5 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if raw <= m*pow {
			return m * pow
		}
	}
	return 10 * pow
}

// tickLabel prints a value briefly: 12k, 2.5, 0.25.
func tickLabel(v float64) string {
	if v >= 1000 {
		return strconv.FormatFloat(math.Round(v/100)/10, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

func escape(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// runPlot renders the TSV of -in as an SVG in -o.
func runPlot(args []string, stdout, stderr io.Writer) int {
	return runChart("plot", "target, c, rps and p99_us, as scripts/plot-concurrency.sh writes",
		"Throughput and p99 against concurrency", args, stdout, stderr,
		func(r io.Reader, w io.Writer, title string) error {
			data, err := readRuns(r)
			if err != nil {
				return err
			}
			return writeSVG(w, title, data)
		})
}

// runChart is a chart command: it reads the TSV of -in and renders it, by
// render, as an SVG in -o (standard output if empty).
func runChart(name, columns, defaultTitle string, args []string, stdout, stderr io.Writer, render func(r io.Reader, w io.Writer, title string) error) int {
	fs := flag.NewFlagSet("rls-bench "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "TSV `file` of runs: columns "+columns+" (required)")
	out := fs.String("o", "", "SVG `file` to write; empty: standard output")
	title := fs.String("title", defaultTitle, "the SVG's title")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return exitOK
		}
		return exitUsage
	}
	if *in == "" || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "rls-bench %s: want -in FILE (and no arguments)\n", name)
		return exitUsage
	}
	f, err := os.Open(*in)
	if err != nil {
		fmt.Fprintf(stderr, "rls-bench %s: %v\n", name, err)
		return exitError
	}
	defer f.Close()
	w := stdout
	var o *os.File
	if *out != "" {
		if o, err = os.Create(*out); err != nil {
			fmt.Fprintf(stderr, "rls-bench %s: %v\n", name, err)
			return exitError
		}
		defer o.Close()
		w = o
	}
	if err := render(f, w, *title); err != nil {
		fmt.Fprintf(stderr, "rls-bench %s: %s: %v\n", name, *in, err)
		return exitError
	}
	return exitOK
}
