package main

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const plotTSV = "target\tc\trequests\tseconds\trps\tp50_us\tp90_us\tp99_us\n" +
	"null <&> \"ceiling\"\t1\t1000\t1\t2100.5\t400\t450\t520.0\n" +
	"null <&> \"ceiling\"\t4\t1000\t1\t8000\t450\t500\t700\n" +
	"null <&> \"ceiling\"\t16\t1000\t1\t20000\t700\t900\t1500\n" +
	"null <&> \"ceiling\"\t64\t1000\t1\t31000\t1800\t3500\t6100\n" +
	"memory\t64\t1000\t1\t28000\t1900\t3800\t6800\n" +
	"memory\t1\t1000\t1\t1900\t450\t500\t600\n" +
	"memory\t16\t1000\t1\t18000\t800\t1000\t1700\n" +
	"memory\t4\t1000\t1\t7000\t500\t560\t800\n"

// TestPlotSVG: the plot is well-formed SVG with, in each of its two
// charts, a line and a point per run of each target, inside the chart.
func TestPlotSVG(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "runs.tsv"), filepath.Join(dir, "plot.svg")
	if err := os.WriteFile(in, []byte(plotTSV), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	if code := run([]string{"plot", "-in", in, "-o", out, "-title", "a <test>"}, io.Discard, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	svg, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	var texts []string
	dec := xml.NewDecoder(strings.NewReader(string(svg)))
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = el.Name.Space + " " + el.Name.Local
			}
			count[el.Name.Local]++
			if el.Name.Local == "polyline" {
				for _, a := range el.Attr {
					if a.Name.Local == "points" {
						checkInPlot(t, a.Value)
					}
				}
			}
		case xml.CharData:
			texts = append(texts, string(el))
		}
	}
	if root != "http://www.w3.org/2000/svg svg" {
		t.Errorf("root element %q, want an SVG svg", root)
	}
	if count["polyline"] != 4 || count["circle"] != 16 {
		t.Errorf("%d lines and %d points, want 4 and 16: two charts, two targets, four runs each", count["polyline"], count["circle"])
	}
	all := strings.Join(texts, "|")
	for _, want := range []string{"a <test>", `null <&> "ceiling"`, "memory", "Throughput (requests/s)", "p99 latency (ms, log scale)", "concurrent calls (-c)", "64", "40k", "0.5", "10"} {
		if !strings.Contains(all, want) {
			t.Errorf("no text %q in the plot: %s", want, all)
		}
	}
}

// checkInPlot checks that the points of a polyline are in one of the two
// plot areas, with x growing along the line.
func checkInPlot(t *testing.T, points string) {
	t.Helper()
	lastX := -1.0
	for _, p := range strings.Fields(points) {
		xs, ys, _ := strings.Cut(p, ",")
		x, err1 := strconv.ParseFloat(xs, 64)
		y, err2 := strconv.ParseFloat(ys, 64)
		inX := x >= marginL && x <= marginL+plotW || x >= chartW+marginL && x <= chartW+marginL+plotW
		if err1 != nil || err2 != nil || !inX || y < marginT || y > marginT+plotH || x <= lastX {
			t.Errorf("point %s of %q outside the plot area or out of order", p, points)
		}
		lastX = x
	}
}

func TestPlotBadInput(t *testing.T) {
	for _, c := range []struct{ tsv, want string }{
		{"", "no runs"},
		{"target\tc\trps\tp99_us\n", "no runs"},
		{"target\tc\trps\nnull\t1\t5\n", "no p99_us column"},
		{"target\tc\trps\tp99_us\nnull\tmany\t5\t1\n", `row 2: c "many" is not a concurrency`},
		{"target\tc\trps\tp99_us\nnull\t0\t5\t1\n", `row 2: c "0" is not a concurrency`},
		{"target\tc\trps\tp99_us\nnull\t1\tfast\t1\n", `row 2: rps "fast" and p99_us "1" must be numbers`},
		{"target\tc\trps\tp99_us\nnull\t1\t5\t-1\n", `must be numbers, 0 or more`},
		{"target\tc\trps\tp99_us\nnull\t1\t5\n", `p99_us "" must be numbers`},
	} {
		in := filepath.Join(t.TempDir(), "runs.tsv")
		os.WriteFile(in, []byte(c.tsv), 0o644)
		var stdout, stderr strings.Builder
		if code := run([]string{"plot", "-in", in}, &stdout, &stderr); code != exitError || !strings.Contains(stderr.String(), c.want) || stdout.Len() != 0 {
			t.Errorf("%q: exit %d, stderr %q, want exit %d and %q", c.tsv, code, stderr.String(), exitError, c.want)
		}
	}
	var stderr strings.Builder
	if code := run([]string{"plot"}, io.Discard, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "want -in FILE") {
		t.Errorf("no -in: exit %d, %q", code, stderr.String())
	}
}

func TestAxes(t *testing.T) {
	pos, ticks := logAxis([]float64{0.52, 6.8, 0})
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if fmt.Sprint(ticks) != "[0.1 0.2 0.5 1 2 5 10]" || !near(pos(0.1), 0) || !near(pos(10), 1) || !near(pos(1), 0.5) || pos(0) != 0 {
		t.Errorf("log axis: ticks %v, pos(0.1) %g, pos(1) %g, pos(10) %g, pos(0) %g", ticks, pos(0.1), pos(1), pos(10), pos(0))
	}
	pos, ticks = linearAxis([]float64{31000, 2100})
	if fmt.Sprint(ticks) != "[0 10000 20000 30000 40000]" || pos(20000) != 0.5 {
		t.Errorf("linear axis: ticks %v, pos(20000) %g", ticks, pos(20000))
	}
	if pos, ticks = linearAxis([]float64{0, 0}); len(ticks) != 6 || pos(0) != 0 {
		t.Errorf("linear axis of zeros: ticks %v", ticks)
	}
}

func TestNiceStepAndLabels(t *testing.T) {
	for _, c := range []struct{ raw, want float64 }{{0.7, 1}, {1, 1}, {1.2, 2}, {2.2, 2.5}, {3, 5}, {6100, 10000}, {0.013, 0.02}, {0, 1}} {
		if got := niceStep(c.raw); got != c.want {
			t.Errorf("niceStep(%g) = %g, want %g", c.raw, got, c.want)
		}
	}
	for v, want := range map[float64]string{35000: "35k", 2500: "2.5k", 7: "7", 0.25: "0.25", 0: "0"} {
		if got := tickLabel(v); got != want {
			t.Errorf("tickLabel(%g) = %q, want %q", v, got, want)
		}
	}
}
