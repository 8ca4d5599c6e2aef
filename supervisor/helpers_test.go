package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"
)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronization
	}
}

// waitState waits for the worker to reach state.
func waitState(t *testing.T, w *Worker, state WorkerState, timeout time.Duration) WorkerStatus {
	t.Helper()
	var st WorkerStatus
	waitFor(t, timeout, fmt.Sprintf("worker %s to be %s", w.Name(), state), func() bool {
		st = w.WorkerStatus()
		return st.State == state
	})
	return st
}

// waitTerminal waits for a request to reach a terminal state.
func waitTerminal(t *testing.T, w *Worker, id int64, timeout time.Duration) RequestStatus {
	t.Helper()
	var st RequestStatus
	waitFor(t, timeout, fmt.Sprintf("request %d to finish", id), func() bool {
		var err error
		st, err = w.Status(id)
		if err != nil {
			t.Fatalf("Status(%d): %v", id, err)
		}
		return st.State.Terminal()
	})
	return st
}

// freePort returns a TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// liveGroupMembers lists the pids of live (non-zombie) processes in group
// pgid.
func liveGroupMembers(pgid int) []int {
	var pids []int
	procs, _ := procfs.AllProcs()
	for _, p := range procs {
		st, err := p.Stat()
		if err == nil && st.PGRP == pgid && st.State != "Z" {
			pids = append(pids, p.PID)
		}
	}
	return pids
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return false
	}
	st, err := p.Stat()
	return err == nil && st.State != "Z"
}

// stopWorker stops w at the end of a test.
func stopWorker(t *testing.T, w *Worker) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
}

// fastTimeouts is a profile for tests: quick probes and restarts.
func fastTimeouts() TimeoutProfile {
	return TimeoutProfile{
		Connect: 2 * time.Second, Headers: 30 * time.Second,
		PrefillLiveness: 30 * time.Second, IdleStream: 30 * time.Second,
		ProbeInterval: 50 * time.Millisecond, RestartBackoff: 10 * time.Millisecond,
		RestartWindow: time.Hour, MaxRestartsPerWindow: 5,
	}
}

// postJSON posts body as JSON to url with client (a worker's sends its
// key) and decodes a 200 answer into out.
func postJSON(t *testing.T, client *http.Client, url string, body, out any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: status %d: %s", url, resp.StatusCode, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("POST %s: decode %s: %v", url, data, err)
	}
}

// scrape reads GET /metrics from h and parses it.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", w.Code, w.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(w.Body)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	return fams
}

// sample is the value of the counter or gauge series of family name with
// exactly the given label pairs; ok is false when there is none.
func sample(fams map[string]*dto.MetricFamily, name string, labels ...string) (v float64, ok bool) {
	for _, m := range fams[name].GetMetric() {
		if len(m.GetLabel())*2 != len(labels) {
			continue
		}
		match := true
		for _, l := range m.GetLabel() {
			found := false
			for i := 0; i+1 < len(labels); i += 2 {
				found = found || (labels[i] == l.GetName() && labels[i+1] == l.GetValue())
			}
			match = match && found
		}
		if !match {
			continue
		}
		if c := m.GetCounter(); c != nil {
			return c.GetValue(), true
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

// checkMetrics checks the series of fams against want: name{labels} →
// value, the labels as in a selector (worker="w1",state="ready").
func checkMetrics(t *testing.T, fams map[string]*dto.MetricFamily, want map[string]float64) {
	t.Helper()
	for key, v := range want {
		name, sel, _ := strings.Cut(strings.TrimSuffix(key, "}"), "{")
		var labels []string
		for _, pair := range strings.Split(sel, ",") {
			if k, val, ok := strings.Cut(pair, "="); ok {
				labels = append(labels, k, strings.Trim(val, `"`))
			}
		}
		if got, ok := sample(fams, name, labels...); !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, v)
		}
	}
}
