package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	servedmodel "github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/serving"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/wire"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Helpers for the end-to-end tests (golden_test.go, api_test.go,
// load_test.go), which run the real engine on a real model behind the
// real server on a loopback port.

// golden are TinyStories656K's greedy continuations from GOLDEN.md.
var golden = testmodel.GoldensFor(testmodel.TinyStories656K)

// testServer is a running server over a real engine.
type testServer struct {
	url    string
	client *http.Client
	info   engine.ModelInfo
	stop   func() error // shuts the server down; returns Serve's error
}

// startServer loads TinyStories656K with cfg and serves it on 127.0.0.1.
func startServer(t *testing.T, cfg engine.Config) *testServer {
	t.Helper()
	return startModel(t, testmodel.TinyStories656K, cfg)
}

// startModel serves the named test model (or the model at an absolute
// path) with cfg on 127.0.0.1.
func startModel(t *testing.T, model string, cfg engine.Config) *testServer {
	t.Helper()
	ts, _ := startListener(t, model, cfg, Config{}, nil)
	return ts
}

// startListener serves model (a test model's name or an absolute path)
// with the engine config ecfg and the server config scfg on wrap(a
// loopback listener), wrap nil meaning the listener itself.
func startListener(t *testing.T, model string, ecfg engine.Config, scfg Config, wrap func(net.Listener) net.Listener) (*testServer, *Server) {
	t.Helper()
	return startOptions(t, model, ecfg, servedmodel.Options{}, scfg, wrap)
}

// startOptions is startListener with the model's options (chat template,
// tool-call format).
func startOptions(t *testing.T, model string, ecfg engine.Config, mopt servedmodel.Options, scfg Config, wrap func(net.Listener) net.Listener) (*testServer, *Server) {
	t.Helper()
	ecfg.ModelPath = model
	if !filepath.IsAbs(model) {
		ecfg.ModelPath = testmodel.Path(t, model)
	}
	// One compute thread: the tiny models gain nothing from more, and
	// spinning thread pools crawl on a loaded machine.
	ecfg.Threads = 1
	ecfg.Name = "tiny"
	eng, err := engine.New(context.Background(), ecfg)
	if err != nil {
		t.Fatal(err)
	}
	log := scfg.Logger
	if log == nil {
		log, _ = newLogger()
	}
	mopt.Logger = log
	api, err := serving.ForEngine(eng, mopt)
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	scfg.Logger = log
	s := New(scfg)
	s.SetCore(api)
	ts := serveTest(t, s, wrap, eng.Close)
	ts.info = eng.Info()
	return ts, s
}

// serveTest serves s on wrap(a loopback listener), wrap nil meaning the
// listener itself, until the test ends (or ts.stop); then, once Serve has
// returned, closeModels frees what s served.
func serveTest(t *testing.T, s *Server, wrap func(net.Listener) net.Listener, closeModels func() error) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		closeModels()
		t.Fatal(err)
	}
	if wrap != nil {
		ln = wrap(ln)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	ts := &testServer{
		url:    "http://" + ln.Addr().String(),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}},
	}
	ts.stop = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() {
		ts.client.CloseIdleConnections()
		if err := ts.stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
		if err := closeModels(); err != nil {
			t.Errorf("close the models: %v", err)
		}
	})
	return ts
}

// post sends body as JSON and returns the whole response.
func (ts *testServer) post(t *testing.T, path string, body any) (*http.Response, []byte) {
	t.Helper()
	return ts.do(t, context.Background(), http.MethodPost, path, body)
}

func (ts *testServer) do(t *testing.T, ctx context.Context, method, path string, body any) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, ts.url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, b
}

// get fetches path and decodes its JSON body into v.
func (ts *testServer) get(t *testing.T, path string, v any) {
	t.Helper()
	resp, b := ts.do(t, context.Background(), http.MethodGet, path, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, b)
		}
	}
}

// openStream posts body and returns the response of a stream, status 200
// checked, for reading with readEvents.
func (ts *testServer) openStream(t *testing.T, ctx context.Context, path string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.url+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("POST %s: %d %s %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return resp
}

// readEvents reads a whole event stream, checking its framing, and
// returns the data of each event.
func readEvents(t *testing.T, resp *http.Response) []string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read stream: %v", err)
	}
	if !bytes.HasSuffix(b, []byte("\n\n")) {
		t.Fatalf("stream does not end with a blank line: %q", b)
	}
	r := wire.NewReader(bytes.NewReader(b))
	r.Comments = true
	var events []string
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return events
		}
		if err != nil || ev.IsComment || bytes.Contains(ev.Data, []byte("\n")) {
			t.Fatalf("malformed event %+v, %v in %q", ev, err, b)
		}
		events = append(events, string(ev.Data))
	}
}

func unmarshal(t *testing.T, data string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(data), v); err != nil {
		t.Fatalf("%v in %s", err, data)
	}
}

type textCompletion = wire.TextCompletion

type llamaCompletion struct {
	Content         string `json:"content"`
	Stop            bool   `json:"stop"`
	TokensPredicted int    `json:"tokens_predicted"`
	TokensEvaluated int    `json:"tokens_evaluated"`
	StopType        string `json:"stop_type"`
	Timings         *struct {
		PredictedN int `json:"predicted_n"`
	} `json:"timings"`
}

// v1Stream reads a /v1/completions stream and returns its text, checking
// the finish chunk and the [DONE] marker.
func v1Stream(t *testing.T, resp *http.Response, finish string) string {
	t.Helper()
	events := readEvents(t, resp)
	if len(events) < 2 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", events)
	}
	var text strings.Builder
	for i, data := range events[:len(events)-1] {
		var c textCompletion
		unmarshal(t, data, &c)
		if c.Object != "text_completion" || len(c.Choices) != 1 || !strings.HasPrefix(c.ID, "cmpl-") {
			t.Fatalf("chunk %d: %s", i, data)
		}
		last := i == len(events)-2
		if got := c.Choices[0].FinishReason; (got != nil) != last || (last && *got != finish) {
			t.Fatalf("chunk %d of %d: finish_reason in %s, want %q on the last only", i, len(events)-1, data, finish)
		}
		text.WriteString(c.Choices[0].Text)
	}
	return text.String()
}

// llamaStream reads a /completion stream and returns its text and final
// object.
func llamaStream(t *testing.T, resp *http.Response) (string, llamaCompletion) {
	t.Helper()
	events := readEvents(t, resp)
	var text strings.Builder
	var c llamaCompletion
	for i, data := range events {
		c = llamaCompletion{}
		unmarshal(t, data, &c)
		if c.Stop != (i == len(events)-1) {
			t.Fatalf("event %d of %d: %s", i, len(events), data)
		}
		text.WriteString(c.Content)
	}
	return text.String(), c
}

type chatCompletion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Choices []struct {
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *wire.Usage `json:"usage"`
}

// sseEvents reads an event stream, comments included, failing t when
// the stream breaks or ends.
type sseEvents struct {
	t *testing.T
	r *wire.Reader
}

func newSSEEvents(t *testing.T, r io.Reader) sseEvents {
	sr := wire.NewReader(r)
	sr.Comments = true
	return sseEvents{t, sr}
}

// next returns the next event or comment.
func (s sseEvents) next() wire.Event {
	s.t.Helper()
	ev, err := s.r.Next()
	if err != nil {
		s.t.Fatalf("read stream: %v", err)
	}
	return ev
}

// isPing reports whether ev is the keep-alive comment, ": ping".
func isPing(ev wire.Event) bool { return ev.IsComment && ev.Comment == "ping" }

// metrics reads /metrics as name → value, summed over labels; a
// histogram gives name_count and name_sum.
func metrics(t *testing.T, ts *testServer) map[string]float64 {
	t.Helper()
	m := make(map[string]float64)
	for name, f := range metricFamilies(t, ts) {
		for _, x := range f.GetMetric() {
			switch {
			case x.Counter != nil:
				m[name] += x.Counter.GetValue()
			case x.Gauge != nil:
				m[name] += x.Gauge.GetValue()
			case x.Untyped != nil:
				m[name] += x.Untyped.GetValue()
			case x.Histogram != nil:
				m[name+"_count"] += float64(x.Histogram.GetSampleCount())
				m[name+"_sum"] += x.Histogram.GetSampleSum()
			}
		}
	}
	return m
}

// metricFamilies reads and parses /metrics.
func metricFamilies(t *testing.T, ts *testServer) map[string]*dto.MetricFamily {
	t.Helper()
	resp, b := ts.do(t, context.Background(), http.MethodGet, "/metrics", nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return parseMetrics(t, b)
}

// parseMetrics parses Prometheus' text exposition format.
func parseMetrics(t *testing.T, b []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("/metrics: %v\n%s", err, b)
	}
	return fams
}

// series finds the series of family name with the given labels (others
// may be present), failing t when there is none.
func series(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("/metrics has no %s", name)
	}
	for _, x := range f.GetMetric() {
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range x.GetLabel() {
				found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
			}
			ok = ok && found
		}
		if ok {
			return x
		}
	}
	t.Fatalf("/metrics has no %s%v", name, labels)
	return nil
}

// waitFor polls cond until it holds, failing t after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

func busySlots(t *testing.T, ts *testServer) int {
	t.Helper()
	var slots []struct {
		IsProcessing bool `json:"is_processing"`
	}
	ts.get(t, "/slots", &slots)
	n := 0
	for _, s := range slots {
		if s.IsProcessing {
			n++
		}
	}
	return n
}
