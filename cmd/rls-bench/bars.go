package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// barData is the median req/s of each target on each workload, from the
// runs of scripts/bench.sh.
type barData struct {
	workloads, targets []string // in the order they first appear
	rps                map[[2]string]float64
}

// readTable reads a TSV with a header row: the column of each name, and
// the rows after the header. Fields hold no tabs or newlines, so there is
// no quoting.
func readTable(r io.Reader, need ...string) (map[string]int, [][]string, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, nil, err
	}
	var rows [][]string
	for _, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		rows = append(rows, strings.Split(strings.TrimSuffix(line, "\r"), "\t"))
	}
	if len(rows) < 2 {
		return nil, nil, errors.New("no runs: want a header row and a row per run")
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	for _, name := range need {
		if _, ok := col[name]; !ok {
			return nil, nil, fmt.Errorf("the header has no %s column: %q", name, rows[0])
		}
	}
	return col, rows[1:], nil
}

// cell is row's field in the column of name, or "" if the row is short.
func cell(col map[string]int, row []string, name string) string {
	if i := col[name]; i < len(row) {
		return row[i]
	}
	return ""
}

// readBars reads runs with at least the columns workload, target and rps,
// and keeps the median rps of each workload and target.
func readBars(r io.Reader) (barData, error) {
	col, rows, err := readTable(r, "workload", "target", "rps")
	if err != nil {
		return barData{}, err
	}
	d := barData{rps: map[[2]string]float64{}}
	runs := map[[2]string][]float64{}
	for n, row := range rows {
		field := func(name string) string { return cell(col, row, name) }
		rps, err := strconv.ParseFloat(field("rps"), 64)
		if err != nil || !(rps >= 0) || math.IsInf(rps, 0) {
			return barData{}, fmt.Errorf("row %d: rps %q must be a number, 0 or more", n+2, field("rps"))
		}
		w, t := field("workload"), field("target")
		if !slices.Contains(d.workloads, w) {
			d.workloads = append(d.workloads, w)
		}
		if !slices.Contains(d.targets, t) {
			d.targets = append(d.targets, t)
		}
		runs[[2]string{w, t}] = append(runs[[2]string{w, t}], rps)
	}
	for k, v := range runs {
		d.rps[k] = median(v)
	}
	return d, nil
}

// median is the middle value, or the mean of the two middle ones.
func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Bar chart geometry, in SVG user units.
const (
	barW, barGap       = 32, 28 // a bar's width with the space beside it, the space between groups
	barMarginL         = 72
	barMarginR         = 16
	barMarginT         = 40
	barMarginB         = 44
	barPlotH           = 300
	barLegendW         = 150 // per entry, barLegendCols to a row
	barLegendCols      = 4
	barLegendRowH      = 20
	barMinPlotW        = barLegendCols*barLegendW - barMarginL
	barLegendTop       = barMarginT + barPlotH + barMarginB
	barLegendSwatchLen = 12
	labelStyle         = `font-family="sans-serif" font-size="10"`
)

// writeBars draws a grouped bar chart: a group per workload, a bar per
// target in each, its height the median req/s.
func writeBars(w io.Writer, title string, d barData) error {
	if len(d.rps) == 0 {
		return errors.New("no runs to plot")
	}
	groupW := len(d.targets)*barW + barGap
	plotW := max(len(d.workloads)*groupW, barMinPlotW)
	legendRows := (len(d.targets) + barLegendCols - 1) / barLegendCols
	width := barMarginL + plotW + barMarginR
	height := barLegendTop + legendRows*barLegendRowH + 8
	values := make([]float64, 0, len(d.rps))
	for _, v := range d.rps {
		values = append(values, v)
	}
	ypos, ticks := linearAxis(values)
	py := func(v float64) float64 { return barMarginT + barPlotH - ypos(v)*barPlotH }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<title>%s</title>`+"\n", escape(title))
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" %s>%s</text>`+"\n", barMarginL+plotW/2, barMarginT-16, titleStyle, escape(title))
	for _, v := range ticks {
		y := py(v)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", barMarginL, y, barMarginL+plotW, y, gridColor)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" %s>%s</text>`+"\n", barMarginL-6, y+4, fontStyle, tickLabel(v))
	}
	fmt.Fprintf(&b, `<text transform="translate(16 %d) rotate(-90)" text-anchor="middle" %s>requests/s (median of the rounds)</text>`+"\n",
		barMarginT+barPlotH/2, fontStyle)
	// The groups are spread over the plot's width, the bars of a group
	// side by side around its middle.
	slot := float64(plotW) / float64(len(d.workloads))
	for i, wl := range d.workloads {
		mid := barMarginL + slot*(float64(i)+0.5)
		x := mid - float64(len(d.targets)*barW)/2
		for j, t := range d.targets {
			v, ok := d.rps[[2]string{wl, t}]
			if ok {
				y := py(v)
				bx := x + float64(j*barW)
				fmt.Fprintf(&b, `<rect class="bar" x="%.1f" y="%.1f" width="%d" height="%.1f" fill="%s"><title>%s, %s: %s req/s</title></rect>`+"\n",
					bx, y, barW-4, barMarginT+barPlotH-y, palette[j%len(palette)], escape(wl), escape(t), tickLabel(v))
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" %s>%s</text>`+"\n", bx+barW/2-2, y-3, labelStyle, tickLabel(v))
			}
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" %s>%s</text>`+"\n", mid, barMarginT+barPlotH+18, fontStyle, escape(wl))
	}
	fmt.Fprintf(&b, `<path d="M%d %d V%d H%d" fill="none" stroke="%s"/>`+"\n", barMarginL, barMarginT, barMarginT+barPlotH, barMarginL+plotW, axisColor)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" %s>workload</text>`+"\n", barMarginL+plotW/2, barMarginT+barPlotH+36, fontStyle)
	for j, t := range d.targets {
		x := 16 + (j%barLegendCols)*barLegendW
		y := barLegendTop + (j/barLegendCols)*barLegendRowH
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", x, y, barLegendSwatchLen, barLegendSwatchLen, palette[j%len(palette)])
		fmt.Fprintf(&b, `<text x="%d" y="%d" %s>%s</text>`+"\n", x+barLegendSwatchLen+6, y+barLegendSwatchLen-1, fontStyle, escape(t))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// runBars renders the runs of -in as a bar chart SVG in -o.
func runBars(args []string, stdout, stderr io.Writer) int {
	return runChart("bars", "workload, target and rps, as scripts/bench.sh writes",
		"Throughput by workload", args, stdout, stderr,
		func(r io.Reader, w io.Writer, title string) error {
			data, err := readBars(r)
			if err != nil {
				return err
			}
			return writeBars(w, title, data)
		})
}
