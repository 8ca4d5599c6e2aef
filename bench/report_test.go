package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func fixtureReport() *Report {
	out := Outcome{Records: fixture(), Duration: 2 * time.Second}
	return &Report{
		Settings: Settings{URL: "http://127.0.0.1:1", API: APIChat, Model: "m", Goodput: "ttft:60", Sweep: []int{1, 4}},
		Runs: []RunReport{
			NewRunReport(Config{Concurrency: 1, NumRequests: 5}, out, SLO{TTFT: msd(60)}),
			NewRunReport(Config{Concurrency: 4, NumRequests: 5, RequestRate: math.Inf(1)}, out, SLO{TTFT: msd(60)}),
		},
	}
}

func TestReportJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.json")
	if err := fixtureReport().WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	runs := doc["runs"].([]any)
	if len(runs) != 2 {
		t.Fatalf("%d runs in JSON, want 2", len(runs))
	}
	run1 := runs[1].(map[string]any)
	if got := run1["load"].(map[string]any)["request_rate"]; got != "inf" {
		t.Errorf("infinite rate written as %v, want \"inf\"", got)
	}
	if got := run1["goodput"]; got != 1.0 { // B and C meet TTFT ≤ 60ms, over 2 s
		t.Errorf("goodput %v, want 1", got)
	}
	if got := run1["ttft_ms"].(map[string]any)["p99"]; got != 99.0 {
		t.Errorf("ttft_ms.p99 = %v, want 99", got)
	}
	checkReportFields(t, doc)
}

// reportFields are the JSON fields every report has: the configuration
// and, per run, the load and every figure.
var reportFields = struct{ config, load, run, stats, request []string }{
	config: []string{"model", "in_process", "input_len", "output_len", "ignore_eos", "shared_prefix_len",
		"prompt_tokenizer", "load"},
	load: []string{"concurrency", "num_requests", "request_rate", "burstiness", "duration_s", "warmup", "seed",
		"cancel_fraction", "cancel_after_tokens", "timeout_s"},
	run: []string{"load", "completed", "failed", "cancelled", "errors", "duration_s", "token_source",
		"total_input_tokens", "total_output_tokens", "total_cached_tokens", "request_throughput",
		"output_throughput", "total_token_throughput", "goodput", "ttft_ms", "tpot_ms", "itl_ms", "e2el_ms",
		"submit_ms", "submit_wall_s", "requests"},
	stats:   []string{"n", "mean", "median", "p90", "p95", "p99", "min", "max"},
	request: []string{"start_ms", "submit_ms", "ttft_ms", "e2el_ms", "chunks", "prompt_tokens", "output_tokens", "cached_tokens"},
}

// checkReportFields fails t for every field of reportFields missing in doc.
func checkReportFields(t *testing.T, doc map[string]any) {
	t.Helper()
	has := func(where string, m map[string]any, keys []string) {
		t.Helper()
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				t.Errorf("JSON %s lacks %q", where, k)
			}
		}
	}
	config, _ := doc["config"].(map[string]any)
	has("config", config, reportFields.config)
	load, _ := config["load"].(map[string]any)
	has("config.load", load, reportFields.load)
	runs, _ := doc["runs"].([]any)
	if len(runs) == 0 {
		t.Fatal("JSON has no runs")
	}
	for _, r := range runs {
		run := r.(map[string]any)
		has("run", run, reportFields.run)
		runLoad, _ := run["load"].(map[string]any)
		has("run.load", runLoad, reportFields.load)
		for _, name := range []string{"ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "submit_ms"} {
			st, _ := run[name].(map[string]any)
			has("run."+name, st, reportFields.stats)
		}
		reqs, _ := run["requests"].([]any)
		if len(reqs) == 0 {
			t.Fatal("JSON run has no requests")
		}
		for _, q := range reqs {
			has("request", q.(map[string]any), reportFields.request)
		}
	}
}

func TestWriteTable(t *testing.T) {
	r := fixtureReport()
	var sweep bytes.Buffer
	r.WriteTable(&sweep)
	lines := strings.Split(strings.TrimSpace(sweep.String()), "\n")
	if len(lines) != 5 || !strings.HasPrefix(strings.TrimSpace(lines[2]), "1 ") || !strings.HasPrefix(strings.TrimSpace(lines[3]), "4 ") {
		t.Errorf("sweep table:\n%s\nwant a header, one row per concurrency and a note", sweep.String())
	}

	r.Runs = r.Runs[:1]
	var single bytes.Buffer
	r.WriteTable(&single)
	for _, want := range []string{
		"Successful requests:                     3\n",
		"Failed requests:                         1\n",
		"Cancelled requests:                      1\n",
		"Token counts from:                       usage\n",
		"Request goodput (req/s):                 1.00\n",
		"Output token throughput (tok/s):         4.00\n",
		"P99 TTFT (ms):                           99.00\n",
		"Median ITL (ms):                         20.00\n",
		"http_503:                                1\n",
	} {
		if !strings.Contains(single.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, single.String())
		}
	}

	var seed004 bytes.Buffer
	r.WriteSubmitTable(&seed004)
	for _, want := range []string{
		"Submit wall: 0.044000 s",
		"Submit latency p50/p95/p99: 2.00/4.70/4.94 ms",
		"TTFT p50/p95/p99: 50.00/95.00/99.00 ms",
		"Latency p50/p95/p99: 100.00/127.00/129.40 ms",
		"Throughput (completion, total): 4.00, 34.00 tokens/s",
	} {
		if !strings.Contains(seed004.String(), want) {
			t.Errorf("seed-004 table lacks %q:\n%s", want, seed004.String())
		}
	}
}

func TestWriteSVG(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSVG(&buf, fixtureReport()); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	elems := map[string]int{}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			elems[se.Name.Local]++
		}
	}
	if elems["svg"] != 1 {
		t.Errorf("elements %v, want one svg", elems)
	}
	// Four CDF panels and, for the sweep, two more; each run in the legend.
	for _, want := range []string{"TTFT CDF", "TPOT CDF", "ITL CDF", "E2EL CDF", "Output throughput", "TTFT p99", "concurrency 1", "concurrency 4"} {
		if !bytes.Contains(buf.Bytes(), []byte(want)) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

// TestWritePNG decodes the PNG: the figure's size at 96 dpi, and the two
// runs' line colours on a white background.
func TestWritePNG(t *testing.T) {
	var buf bytes.Buffer
	if err := WritePNG(&buf, fixtureReport()); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	// Three rows of two 6 × 4 inch panels under a 0.4 inch title.
	wantH := 1190 // 12.4 inches at 96 dpi, truncated
	if b := img.Bounds(); b.Dx() != 12*96 || b.Dy() != wantH {
		t.Errorf("size %v, want %dx%d", b, 12*96, wantH)
	}
	counts := map[color.RGBA]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			counts[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)]++
		}
	}
	white := color.RGBA{255, 255, 255, 255}
	if counts[white] < b.Dx()*b.Dy()/2 {
		t.Errorf("%d white pixels of %d: the background is not white", counts[white], b.Dx()*b.Dy())
	}
	for i := range 2 {
		c := plotColor(i).(color.RGBA)
		if counts[c] < 100 {
			t.Errorf("run %d's colour %v drawn on %d pixels", i, c, counts[c])
		}
	}
}

func TestWritePlot(t *testing.T) {
	dir := t.TempDir()
	html := filepath.Join(dir, "p.html")
	if err := WritePlot(html, fixtureReport()); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(html)
	if !bytes.HasPrefix(b, []byte("<!DOCTYPE html>")) || !bytes.Contains(b, []byte("<svg")) {
		t.Errorf("html plot does not embed an svg:\n%.200s", b)
	}
	pngPath := filepath.Join(dir, "p.png")
	if err := WritePlot(pngPath, fixtureReport()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(pngPath); !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("p.png is not a PNG: %.8q", b)
	}
	if err := WritePlot(filepath.Join(dir, "p.gif"), fixtureReport()); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Errorf("gif: error %v, want not supported", err)
	}
}

func TestProgressLine(t *testing.T) {
	p := &Progress{total: 10, done: 5, failed: 1, tokens: 100}
	want := "[###############...............] 5/10 req  1 err  2.50 req/s  50.0 tok/s  2s"
	if got := p.line(2 * time.Second); got != want {
		t.Errorf("line = %q\nwant   %q", got, want)
	}
	timed := &Progress{duration: 10 * time.Second, done: 3}
	if got := timed.line(5 * time.Second); !strings.HasPrefix(got, "[###############...............] 3 req") {
		t.Errorf("timed line = %q, want half full and an open count", got)
	}
}

func TestProgressDraws(t *testing.T) {
	var buf bytes.Buffer // written only by the progress goroutine until Close returns
	p := NewProgress(&buf, 2, 0)
	p.Observe(Record{OutputTokens: 4})
	p.Observe(Record{Err: "timeout"})
	p.Close()
	if got := buf.String(); !strings.Contains(got, "2/2 req  1 err") || !strings.HasSuffix(got, "\n") {
		t.Errorf("progress output %q, want the final counts and a newline", got)
	}
}
