package main

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// barsTSV has two workloads and three targets, several rounds each, in
// runs.tsv's layout; "memory <&>" tests escaping. The medians: turn:10
// null 30000, memory 20000, redis 5000; zipf1.1:100 null 32000, memory
// 25000 (of two rounds: 24000 and 26000), redis 9000.
const barsTSV = "workload\ttarget\tround\trps\tp50_us\n" +
	"turn:10\tnull\t1\t30000\t1\n" +
	"turn:10\tmemory <&>\t1\t21000\t1\n" +
	"turn:10\tredis\t1\t5000\t1\n" +
	"turn:10\tnull\t2\t29000\t1\n" +
	"turn:10\tmemory <&>\t2\t20000\t1\n" +
	"turn:10\tredis\t2\t4000\t1\n" +
	"turn:10\tnull\t3\t31000\t1\n" +
	"turn:10\tmemory <&>\t3\t1000\t1\n" +
	"turn:10\tredis\t3\t6000\t1\n" +
	"zipf1.1:100\tnull\t1\t32000\t1\n" +
	"zipf1.1:100\tmemory <&>\t1\t24000\t1\n" +
	"zipf1.1:100\tmemory <&>\t2\t26000\t1\n" +
	"zipf1.1:100\tredis\t1\t9000\t1\n"

type svgBar struct {
	title  string
	height float64
}

// TestBarsSVG: the chart is well-formed SVG with one bar per workload and
// target, whose heights order as the medians do.
func TestBarsSVG(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "runs.tsv"), filepath.Join(dir, "bars.svg")
	if err := os.WriteFile(in, []byte(barsTSV), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	if code := run([]string{"bars", "-in", in, "-o", out, "-title", "bars <test>"}, io.Discard, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	svg, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var bars []svgBar
	var texts []string
	root, inBar := "", false
	dec := xml.NewDecoder(strings.NewReader(string(svg)))
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
			attr := map[string]string{}
			for _, a := range el.Attr {
				attr[a.Name.Local] = a.Value
			}
			if el.Name.Local == "rect" && attr["class"] == "bar" {
				h, err1 := strconv.ParseFloat(attr["height"], 64)
				y, err2 := strconv.ParseFloat(attr["y"], 64)
				if err1 != nil || err2 != nil || h < 0 || y < barMarginT || y+h > barMarginT+barPlotH+0.05 {
					t.Errorf("bar %v: height or y out of the plot", attr)
				}
				bars = append(bars, svgBar{height: h})
				inBar = true
			}
		case xml.EndElement:
			if el.Name.Local == "rect" {
				inBar = false
			}
		case xml.CharData:
			texts = append(texts, string(el))
			if inBar {
				bars[len(bars)-1].title += string(el)
			}
		}
	}
	if root != "http://www.w3.org/2000/svg svg" {
		t.Errorf("root element %q, want an SVG svg", root)
	}
	want := []string{
		"turn:10, null: 30k req/s", "turn:10, memory <&>: 20k req/s", "turn:10, redis: 5k req/s",
		"zipf1.1:100, null: 32k req/s", "zipf1.1:100, memory <&>: 25k req/s", "zipf1.1:100, redis: 9k req/s",
	}
	if len(bars) != len(want) {
		t.Fatalf("%d bars, want %d: one per workload and target: %v", len(bars), len(want), bars)
	}
	for i, w := range want {
		if bars[i].title != w {
			t.Errorf("bar %d is %q, want %q", i, bars[i].title, w)
		}
	}
	// By value: zipf null > turn null > zipf memory > turn memory > zipf
	// redis > turn redis, and heights in proportion.
	order := []int{3, 0, 4, 1, 5, 2}
	for i := 1; i < len(order); i++ {
		if bars[order[i-1]].height <= bars[order[i]].height {
			t.Errorf("bar %q (%.1f high) not higher than %q (%.1f)", bars[order[i-1]].title, bars[order[i-1]].height, bars[order[i]].title, bars[order[i]].height)
		}
	}
	if r := bars[0].height / bars[2].height; r < 5.9 || r > 6.1 {
		t.Errorf("null's bar is %.2f times redis's on turn:10, want 6", r)
	}
	all := strings.Join(texts, "|")
	for _, w := range []string{"bars <test>", "turn:10", "zipf1.1:100", "memory <&>", "redis", "40k", "requests/s"} {
		if !strings.Contains(all, w) {
			t.Errorf("no text %q in the chart: %s", w, all)
		}
	}
}

// TestBarsMissingRuns: a target that ran on one workload only has one bar.
func TestBarsMissingRuns(t *testing.T) {
	d, err := readBars(strings.NewReader("target\tworkload\trps\nnull\ta\t10\nmemory\ta\t5\nnull\tb\t7\n"))
	if err != nil {
		t.Fatal(err)
	}
	var svg strings.Builder
	if err := writeBars(&svg, "t", d); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(svg.String(), `class="bar"`); n != 3 || strings.Join(d.workloads, ",") != "a,b" || strings.Join(d.targets, ",") != "null,memory" {
		t.Errorf("%d bars, workloads %q, targets %q; want 3, a b, null memory", n, d.workloads, d.targets)
	}
}

func TestBarsBadInput(t *testing.T) {
	for _, c := range []struct{ tsv, want string }{
		{"", "no runs"},
		{"workload\ttarget\trps\n", "no runs"},
		{"target\trps\nnull\t5\n", "no workload column"},
		{"workload\ttarget\trps\na\tnull\tfast\n", `row 2: rps "fast" must be a number`},
		{"workload\ttarget\trps\na\tnull\t1\na\tnull\t-1\n", `row 3: rps "-1" must be a number, 0 or more`},
		{"workload\ttarget\trps\na\tnull\tNaN\n", `rps "NaN"`},
	} {
		in := filepath.Join(t.TempDir(), "runs.tsv")
		os.WriteFile(in, []byte(c.tsv), 0o644)
		var stdout, stderr strings.Builder
		if code := run([]string{"bars", "-in", in}, &stdout, &stderr); code != exitError || !strings.Contains(stderr.String(), c.want) || stdout.Len() != 0 {
			t.Errorf("%q: exit %d, stderr %q, want exit %d and %q", c.tsv, code, stderr.String(), exitError, c.want)
		}
	}
	var stderr strings.Builder
	if code := run([]string{"bars", "-in"}, io.Discard, &stderr); code != exitUsage {
		t.Errorf("-in without a value: exit %d, %q", code, stderr.String())
	}
	if code := run([]string{"bars"}, io.Discard, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "want -in FILE") {
		t.Errorf("no -in: exit %d, %q", code, stderr.String())
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		v    []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.v); got != c.want {
			t.Errorf("median(%v) = %g, want %g", c.v, got, c.want)
		}
	}
}
