package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// WritePlot draws the report to path: SVG for .svg, an HTML page holding
// the SVG for .html. Other formats (PNG) are not supported.
func WritePlot(path string, r *Report) error {
	var buf bytes.Buffer
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".svg":
		WriteSVG(&buf, r)
	case ".html", ".htm":
		buf.WriteString("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>corral bench</title></head>\n<body>\n")
		WriteSVG(&buf, r)
		buf.WriteString("</body></html>\n")
	default:
		return fmt.Errorf("plot %s: format %q not supported (use .svg or .html)", path, ext)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	return nil
}

// WriteSVG draws the latency CDFs (TTFT, TPOT, ITL, E2EL) of every run
// and, for a sweep, output throughput and TTFT p99 against concurrency.
func WriteSVG(w io.Writer, r *Report) {
	panels := []panel{
		cdfPanel("TTFT", r.Runs, func(rec Record) []time.Duration { return []time.Duration{rec.TTFT()} }),
		cdfPanel("TPOT", r.Runs, func(rec Record) []time.Duration {
			if d, ok := rec.TPOT(); ok {
				return []time.Duration{d}
			}
			return nil
		}),
		cdfPanel("ITL", r.Runs, Record.ITL),
		cdfPanel("E2EL", r.Runs, func(rec Record) []time.Duration { return []time.Duration{rec.End} }),
	}
	if len(r.Runs) > 1 {
		var conc, tput, ttft []float64
		for _, run := range r.Runs {
			conc = append(conc, float64(run.Load.Concurrency))
			tput = append(tput, run.OutputThroughput)
			ttft = append(ttft, run.TTFT.P99)
		}
		panels = append(panels,
			panel{title: "Output throughput", xlabel: "concurrency", ylabel: "tokens/s",
				series: []series{{name: "output tok/s", xs: conc, ys: tput, markers: true}}},
			panel{title: "TTFT p99", xlabel: "concurrency", ylabel: "ms",
				series: []series{{name: "TTFT p99", xs: conc, ys: ttft, markers: true}}},
		)
	}
	const cols = 2
	rows := (len(panels) + cols - 1) / cols
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n",
		cols*panelW, rows*panelH+30)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(w, `<text x="10" y="20" font-size="14">%s</text>`+"\n", esc("corral bench: "+r.target()+", model "+r.Settings.Model))
	for i, p := range panels {
		p.draw(w, float64((i%cols)*panelW), float64(30+(i/cols)*panelH))
	}
	fmt.Fprintln(w, "</svg>")
}

const (
	panelW, panelH                     = 480, 330
	marginL, marginR, marginT, marginB = 60, 20, 30, 45
)

var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

type series struct {
	name    string
	xs, ys  []float64
	markers bool
}

type panel struct {
	title, xlabel, ylabel string
	series                []series
}

// cdfPanel builds the empirical CDF of the values pick returns for the
// completed requests of each run.
func cdfPanel(name string, runs []RunReport, pick func(Record) []time.Duration) panel {
	p := panel{title: name + " CDF", xlabel: name + " (ms)", ylabel: "fraction of requests"}
	if name == "ITL" {
		p.ylabel = "fraction of gaps"
	}
	for _, run := range runs {
		var vals []float64
		for _, rec := range run.records {
			if rec.ok() {
				for _, d := range pick(rec) {
					vals = append(vals, ms(d))
				}
			}
		}
		if len(vals) == 0 {
			continue
		}
		slices.Sort(vals)
		// At most ~1000 steps: evenly spaced ranks.
		step := max(1, len(vals)/1000)
		var s series
		s.name = runLabel(run.Load)
		for i := 0; i < len(vals); i += step {
			s.xs = append(s.xs, vals[i], vals[i])
			s.ys = append(s.ys, float64(i)/float64(len(vals)), float64(i+1)/float64(len(vals)))
		}
		s.xs = append(s.xs, vals[len(vals)-1])
		s.ys = append(s.ys, 1)
		p.series = append(p.series, s)
	}
	return p
}

func runLabel(c Config) string {
	if c.RequestRate > 0 && !math.IsInf(c.RequestRate, 1) {
		return fmt.Sprintf("%.3g req/s", c.RequestRate)
	}
	return fmt.Sprintf("concurrency %d", c.Concurrency)
}

// draw renders the panel with its top-left corner at (x0, y0).
func (p panel) draw(w io.Writer, x0, y0 float64) {
	left, top := x0+marginL, y0+marginT
	width, height := float64(panelW-marginL-marginR), float64(panelH-marginT-marginB)
	fmt.Fprintf(w, `<text x="%.1f" y="%.1f" font-size="13" text-anchor="middle">%s</text>`+"\n", left+width/2, y0+18, esc(p.title))
	fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#888"/>`+"\n", left, top, width, height)
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), 0.0, math.Inf(-1)
	for _, s := range p.series {
		for i := range s.xs {
			xmin, xmax = min(xmin, s.xs[i]), max(xmax, s.xs[i])
			ymax = max(ymax, s.ys[i])
		}
	}
	if len(p.series) == 0 {
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#888">no data</text>`+"\n", left+width/2, top+height/2)
		return
	}
	xmin = min(xmin, 0)
	xt, yt := ticks(xmin, xmax), ticks(ymin, ymax)
	xmin, xmax = xt[0], xt[len(xt)-1]
	ymin, ymax = yt[0], yt[len(yt)-1]
	px := func(x float64) float64 { return left + (x-xmin)/(xmax-xmin)*width }
	py := func(y float64) float64 { return top + height - (y-ymin)/(ymax-ymin)*height }
	for _, t := range xt {
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`, px(t), top, px(t), top+height)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(t), top+height+14, fmtTick(t))
	}
	for _, t := range yt {
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`, left, py(t), left+width, py(t))
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-4, py(t)+4, fmtTick(t))
	}
	fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", left+width/2, top+height+32, esc(p.xlabel))
	fmt.Fprintf(w, `<text transform="translate(%.1f,%.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", x0+14, top+height/2, esc(p.ylabel))
	for i, s := range p.series {
		color := palette[i%len(palette)]
		var pts strings.Builder
		for j := range s.xs {
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(s.xs[j]), py(s.ys[j]))
		}
		fmt.Fprintf(w, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", color, strings.TrimSpace(pts.String()))
		if s.markers {
			for j := range s.xs {
				fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`, px(s.xs[j]), py(s.ys[j]), color)
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="118" height="%d" fill="white" fill-opacity="0.85" stroke="#ccc"/>`+"\n",
		left+width-124, top+3, 14*len(p.series)+4)
	for i, s := range p.series {
		color := palette[i%len(palette)]
		ly := top + 14 + float64(i)*14
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`, left+width-120, ly-4, left+width-104, ly-4, color)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f">%s</text>`+"\n", left+width-100, ly, esc(s.name))
	}
}

// ticks returns about five round tick values spanning [lo, hi].
func ticks(lo, hi float64) []float64 {
	if hi <= lo {
		hi = lo + 1
	}
	raw := (hi - lo) / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ts []float64
	for t := math.Floor(lo/step) * step; ; t += step {
		ts = append(ts, t)
		if t >= hi-step*1e-9 {
			break
		}
	}
	return ts
}

func fmtTick(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}

func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
