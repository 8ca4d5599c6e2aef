// Package e2etest is the harness of the end-to-end tests (the e2e
// folder, and server's own tests of the gate and of signals): the real
// engine on a real test model behind the real server.Server on a loopback
// port, or a real `corral serve` process (Child), and what the tests need
// to talk to them: requests, event streams, /metrics, logs, error
// envelopes.
//
// It is not internal/servetest, whose fakes the dialect packages' own
// tests use: this package imports server, which imports those packages.
package e2etest

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

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/registry"
	"github.com/corral-llm/corral/server"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// Server is a running server.Server on a loopback port.
type Server struct {
	// URL is the server's base URL, http://127.0.0.1:port.
	URL string
	// Client is an HTTP client for the server; its idle connections are
	// closed when the test ends.
	Client *http.Client
	// Info describes the served model (Start only).
	Info engine.ModelInfo

	srv  *server.Server
	stop func() error
}

// Options configure Start. The zero value serves the model with the
// engine's, the model's and the server's defaults.
type Options struct {
	// Engine configures the engine. Start sets its ModelPath, and one
	// compute thread and the name "tiny" whatever it says.
	Engine engine.Config
	// Model are the served model's options (chat template, tool-call
	// format); Start sets its Logger to the server's.
	Model model.Options
	// Server configures the server; a nil Logger is a NewLogger's.
	Server server.Config
	// Wrap, when set, wraps the loopback listener the server accepts on.
	Wrap func(net.Listener) net.Listener
	// WrapEngine, when set, serves what it returns in place of the
	// engine: a test's stand-in that steers it. The engine is closed
	// when the test ends, as without it.
	WrapEngine func(*engine.Engine) model.Engine
}

// Start loads model (a test model's name, see testmodel, or an absolute
// path) with opt and serves it on 127.0.0.1 until the test ends (see
// StartServer).
func Start(t *testing.T, modelName string, opt Options) *Server {
	t.Helper()
	ecfg, scfg := opt.Engine, opt.Server
	ecfg.ModelPath = modelName
	if !filepath.IsAbs(modelName) {
		ecfg.ModelPath = testmodel.Path(t, modelName)
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
		log, _ = NewLogger()
	}
	mopt := opt.Model
	mopt.Logger = log
	var served model.Engine = eng
	if opt.WrapEngine != nil {
		served = opt.WrapEngine(eng)
	}
	api, err := serving.ForEngine(served, mopt)
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	scfg.Logger = log
	s := server.New(scfg)
	s.SetCore(api)
	ts := StartServer(t, s, opt.Wrap, eng.Close)
	ts.Info = eng.Info()
	return ts
}

// StartRegistry serves TinyStories656K as the one model "tiny" of a
// registry with strict names (another name is unknown), which loads it on
// the first request and unloads it after 5 minutes idle or on keep_alive
// 0. The server runs with scfg (its Logger replaced by a NewLogger's).
func StartRegistry(t *testing.T, scfg server.Config) *Server {
	t.Helper()
	log, _ := NewLogger()
	spec := registry.Spec{ID: "tiny", Engine: engine.Config{
		ModelPath: testmodel.Path(t, testmodel.TinyStories656K),
		Threads:   1, // see Start
		Parallel:  2,
	}}
	rcfg := registry.Config{StrictNames: true, KeepAlive: registry.DefaultKeepAlive, Estimate: registry.EstimateFromFile, Logger: log}
	reg, err := registry.New(rcfg, []registry.Spec{spec}, model.Loader(log))
	if err != nil {
		t.Fatal(err)
	}
	scfg.Logger = log
	s := server.New(scfg)
	s.SetCore(serving.New(reg, serving.Options{Logger: log}))
	return StartServer(t, s, nil, reg.Close)
}

// StartServer serves s on wrap(a loopback listener), wrap nil meaning the
// listener itself, until the test ends (or Stop). When the test ends it
// closes the client's idle connections, stops serving and, once Serve has
// returned, calls closeModels to free what s served.
func StartServer(t *testing.T, s *server.Server, wrap func(net.Listener) net.Listener, closeModels func() error) *Server {
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
	ts := &Server{
		URL:    "http://" + ln.Addr().String(),
		Client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}},
		srv:    s,
	}
	ts.stop = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() {
		ts.Client.CloseIdleConnections()
		if err := ts.stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
		if err := closeModels(); err != nil {
			t.Errorf("close the models: %v", err)
		}
	})
	return ts
}

// Stop shuts the server down and returns Serve's error; later calls
// return the same. The models stay open until the test ends.
func (ts *Server) Stop() error { return ts.stop() }

// Drain drains the server (see server.Server.Drain).
func (ts *Server) Drain() { ts.srv.Drain() }

// Post sends body as JSON and returns the whole response.
func (ts *Server) Post(t *testing.T, path string, body any) (*http.Response, []byte) {
	t.Helper()
	return ts.Do(t, context.Background(), http.MethodPost, path, body)
}

// Do sends a request, its body (unless nil) as JSON, and returns the
// whole response, failing t when there is none.
func (ts *Server) Do(t *testing.T, ctx context.Context, method, path string, body any) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, ts.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := ts.Client.Do(req)
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

// Get fetches path, failing t unless the status is 200, and decodes its
// JSON body into v (unless nil).
func (ts *Server) Get(t *testing.T, path string, v any) {
	t.Helper()
	resp, b := ts.Do(t, context.Background(), http.MethodGet, path, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, b)
		}
	}
}

// OpenStream posts body and returns the response of a stream, status 200
// and Content-Type text/event-stream checked, for reading with
// ReadEvents.
func (ts *Server) OpenStream(t *testing.T, ctx context.Context, path string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ts.Client.Do(req)
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

// ReadEvents reads a whole event stream, checking its framing (no
// comments, one data line an event, a blank line at the end), closes it
// and returns the data of each event.
func ReadEvents(t *testing.T, resp *http.Response) []string {
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

// Metrics reads /metrics as name → value, summed over labels; a
// histogram gives name_count and name_sum.
func (ts *Server) Metrics(t *testing.T) map[string]float64 {
	t.Helper()
	m := make(map[string]float64)
	for name, f := range ts.MetricFamilies(t) {
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

// MetricFamilies reads and parses /metrics, failing t unless it answers
// 200 in Prometheus' text format.
func (ts *Server) MetricFamilies(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	resp, b := ts.Do(t, context.Background(), http.MethodGet, "/metrics", nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return parseMetrics(t, b)
}

// parseMetrics parses Prometheus' text exposition format.
func parseMetrics(t *testing.T, b []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(prommodel.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("/metrics: %v\n%s", err, b)
	}
	return fams
}

// Series finds the series of family name with the given labels, as
// name, value pairs (others may be present), failing t when there is
// none.
func Series(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
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

// WaitFor polls cond every 5ms until it holds, failing t after a
// generous deadline (2 minutes).
func WaitFor(t *testing.T, what string, cond func() bool) {
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

// Marshal is v as JSON, failing t when it cannot be.
func Marshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// LlamaResult is the part of a /completion answer (or of a stream's
// event) that the checks look at.
type LlamaResult struct {
	Content         *string `json:"content"`
	Stop            bool    `json:"stop"`
	StopType        string  `json:"stop_type"`
	TokensPredicted int     `json:"tokens_predicted"`
	TokensEvaluated int     `json:"tokens_evaluated"`
}

// APIKey is a well-formed API key for KeyPolicy.
const APIKey = "sk-corral-test-0123456789"

// KeyPolicy is the gate's policy with the API keys specs (as
// --api-key takes them), allowed hosts and CORS origins, failing t when
// they are invalid.
func KeyPolicy(t *testing.T, hosts, origins []string, specs ...string) gate.Policy {
	t.Helper()
	keys, err := gate.LoadKeys(specs, "")
	if err != nil {
		t.Fatal(err)
	}
	p, err := gate.NewPolicy(keys, hosts, origins)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
