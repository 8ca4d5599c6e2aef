package bench

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// WritePlot draws the report to path, in the format its extension names:
// .png, .svg, or .html (a page holding the SVG).
func WritePlot(path string, r *Report) error {
	var buf bytes.Buffer
	var err error
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".png":
		err = WritePNG(&buf, r)
	case ".svg":
		err = WriteSVG(&buf, r)
	case ".html", ".htm":
		buf.WriteString("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>corral bench</title></head>\n<body>\n")
		err = WriteSVG(&buf, r)
		buf.WriteString("</body></html>\n")
	default:
		return fmt.Errorf("plot %s: format %q not supported (use .png, .svg or .html)", path, ext)
	}
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	return nil
}

// WriteSVG draws the report's plots (see figure) as SVG.
func WriteSVG(w io.Writer, r *Report) error {
	c := vgsvg.New(figureSize(r))
	if err := figure(draw.New(c), r); err != nil {
		return err
	}
	_, err := c.WriteTo(w)
	return err
}

// WritePNG draws the report's plots (see figure) as a PNG image at
// 96 dots per inch.
func WritePNG(w io.Writer, r *Report) error {
	width, height := figureSize(r)
	c := vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(96), vgimg.UseBackgroundColor(color.White))}
	if err := figure(draw.New(c), r); err != nil {
		return err
	}
	_, err := c.WriteTo(w)
	return err
}

// The figure: two panels a row, each panelW × panelH, under a title line.
const (
	cols           = 2
	panelW, panelH = 6 * vg.Inch, 4 * vg.Inch
	titleH         = 0.4 * vg.Inch
)

func figureSize(r *Report) (vg.Length, vg.Length) {
	rows := (len(panels(r)) + cols - 1) / cols
	return cols * panelW, vg.Length(rows)*panelH + titleH
}

// figure draws the latency CDFs (TTFT, TPOT, ITL, E2EL) of every run and,
// for a sweep, output throughput and TTFT p99 against concurrency.
func figure(dc draw.Canvas, r *Report) error {
	ps := panels(r)
	rows := (len(ps) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
	}
	for i, p := range ps {
		pl, err := p.plot()
		if err != nil {
			return err
		}
		grid[i/cols][i%cols] = pl
	}
	title := draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 14), Handler: plot.DefaultTextHandler}
	dc.FillText(title, vg.Point{X: dc.Min.X + 10, Y: dc.Max.Y - titleH + 8}, "corral bench: "+r.target()+", model "+r.Settings.Model)
	body := draw.Crop(dc, 0, 0, 0, -titleH)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align(grid, tiles, body)
	for i, row := range grid {
		for j, pl := range row {
			if pl != nil {
				pl.Draw(canvases[i][j])
			}
		}
	}
	return nil
}

// panels are the report's plots, before drawing.
func panels(r *Report) []panel {
	ps := []panel{
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
		ps = append(ps,
			panel{title: "Output throughput", xlabel: "concurrency", ylabel: "tokens/s",
				series: []series{{name: "output tok/s", xs: conc, ys: tput, markers: true}}},
			panel{title: "TTFT p99", xlabel: "concurrency", ylabel: "ms",
				series: []series{{name: "TTFT p99", xs: conc, ys: ttft, markers: true}}},
		)
	}
	return ps
}

type series struct {
	name    string
	xs, ys  []float64
	markers bool
}

type panel struct {
	title, xlabel, ylabel string
	series                []series
}

// plot builds the panel's gonum plot: a line per series, in the plot
// palette's colours, with a legend.
func (p panel) plot() (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = p.title
	pl.X.Label.Text, pl.Y.Label.Text = p.xlabel, p.ylabel
	pl.X.Min, pl.Y.Min = 0, 0
	pl.Add(plotter.NewGrid())
	// The legend sits bottom right, under rising curves (CDFs, and
	// throughput or latency against concurrency).
	if len(p.series) == 0 {
		pl.Title.Text += " (no data)"
		return pl, nil
	}
	for i, s := range p.series {
		xys := make(plotter.XYs, len(s.xs))
		for j := range s.xs {
			xys[j] = plotter.XY{X: s.xs[j], Y: s.ys[j]}
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.title, err)
		}
		line.Color = plotColor(i)
		line.Width = vg.Points(1.5)
		pl.Add(line)
		pl.Legend.Add(s.name, line)
		if s.markers {
			dots, err := plotter.NewScatter(xys)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.title, err)
			}
			dots.Color, dots.Shape = plotColor(i), draw.CircleGlyph{}
			pl.Add(dots)
		}
	}
	return pl, nil
}

// plotColor is the i-th colour of the palette matplotlib made familiar.
func plotColor(i int) color.Color {
	palette := []uint32{0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd, 0x8c564b, 0xe377c2, 0x7f7f7f}
	c := palette[i%len(palette)]
	return color.RGBA{R: uint8(c >> 16), G: uint8(c >> 8), B: uint8(c), A: 0xff}
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
