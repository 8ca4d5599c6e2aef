package supervisor

import (
	"testing"
	"time"
)

func TestJudge(t *testing.T) {
	p := TimeoutProfile{
		Connect: 5 * time.Second, Headers: 30 * time.Second, PrefillLiveness: 60 * time.Second,
		IdleStream: 20 * time.Second, ProbeInterval: time.Second,
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var never time.Time
	tests := []struct {
		name     string
		p        TimeoutProfile
		now      int
		tl       timeline
		liveness time.Time
		others   time.Time  // last byte of any stream of the worker
		want     FailReason // "" = no timeout
		restart  bool
	}{
		{"connecting, in time", p, 4, timeline{dispatched: t0}, never, never, "", false},
		{"connect timeout", p, 5, timeline{dispatched: t0}, never, never, FailConnectFailed, true},
		{"waiting for headers", p, 29, timeline{dispatched: t0, connected: t0}, never, never, "", false},
		{"headers timeout", p, 31, timeline{dispatched: t0, connected: at(1)}, never, never, FailHeadersTimeout, true},
		{"headers extended by CPU progress", p, 100, timeline{dispatched: t0, connected: t0}, at(90), never, "", false},
		{"headers timeout after CPU stopped", p, 130, timeline{dispatched: t0, connected: t0}, at(90), never, FailHeadersTimeout, true},
		// A ten-minute prefill with CPU advancing every probe: no timeout,
		// although it is far longer than every limit in the profile.
		{"long prefill burning CPU", p, 600, timeline{dispatched: t0, connected: t0, headers: at(1)}, at(599), never, "", false},
		{"prefill stalled", p, 600, timeline{dispatched: t0, connected: t0, headers: at(1)}, at(540), never, FailStallTimeout, true},
		{"prefill stalled, CPU never seen", p, 61, timeline{dispatched: t0, connected: t0, headers: at(1)}, never, never, FailStallTimeout, true},
		{"prefill keepalive bytes", p, 600, timeline{dispatched: t0, connected: t0, headers: at(1), lastByte: at(590)}, never, never, "", false},
		{"streaming", p, 100, timeline{dispatched: t0, connected: t0, headers: t0, firstToken: at(50), lastByte: at(90)}, never, never, "", false},
		{"idle stream", p, 111, timeline{dispatched: t0, connected: t0, headers: t0, firstToken: at(50), lastByte: at(90)}, never, never, FailStallTimeout, true},
		{"idle stream but CPU advancing", p, 111, timeline{dispatched: t0, connected: t0, headers: t0, firstToken: at(50), lastByte: at(90)}, at(110), never, "", false},
		// Judged on its own bytes: other streams of the child got bytes
		// while this one got none for IdleStream, so it is stuck although
		// the CPU advances. Only the request fails.
		{"one stream stuck while others flow", p, 111, timeline{dispatched: t0, connected: t0, headers: t0, firstToken: at(50), lastByte: at(90)}, at(110), at(110), FailStallTimeout, false},
		{"one stream stuck, others flowed once since", p, 111, timeline{dispatched: t0, connected: t0, headers: t0, firstToken: at(50), lastByte: at(90)}, never, at(91), FailStallTimeout, false},
		{"others flow, own bytes recent", p, 109, timeline{dispatched: t0, connected: t0, headers: t0, firstToken: at(50), lastByte: at(90)}, at(108), at(108), "", false},
		{"all streams quiet, CPU advancing", p, 111, timeline{dispatched: t0, connected: t0, headers: t0, firstToken: at(50), lastByte: at(90)}, at(110), at(90), "", false},
		{"stuck right after the first token", p, 71, timeline{dispatched: t0, connected: t0, headers: t0, firstToken: at(50)}, at(70), at(70), FailStallTimeout, false},
		// A prefill sends nothing while the other slots decode: the
		// per-stream rule waits for the first token.
		{"prefill while others flow", p, 600, timeline{dispatched: t0, connected: t0, headers: at(1)}, at(599), at(599), "", false},
		{"prefill awaiting headers while others flow", p, 600, timeline{dispatched: t0, connected: t0}, at(599), at(599), "", false},
		{"between turns (tool running)", p, 1000, timeline{}, never, never, "", false},
		// TTFT counts from dispatch in every phase: before the
		// connection, before the headers (servers that send them with the
		// first token), after them.
		{"ttft before the connection", TimeoutProfile{TTFT: 10 * time.Second}, 10, timeline{dispatched: t0}, never, never, FailTTFTTimeout, false},
		{"connect timeout before ttft", TimeoutProfile{Connect: 5 * time.Second, TTFT: 5 * time.Second}, 5, timeline{dispatched: t0}, never, never, FailConnectFailed, true},
		{"ttft awaiting headers", TimeoutProfile{TTFT: 10 * time.Second, Headers: time.Hour}, 10, timeline{dispatched: t0, connected: t0}, at(9), never, FailTTFTTimeout, false},
		{"ttft awaiting headers, in time", TimeoutProfile{TTFT: 10 * time.Second}, 9, timeline{dispatched: t0, connected: t0}, never, never, "", false},
		{"ttft", TimeoutProfile{TTFT: 10 * time.Second}, 10, timeline{dispatched: t0, connected: t0, headers: t0}, at(10), never, FailTTFTTimeout, false},
		{"ttft met", TimeoutProfile{TTFT: 10 * time.Second}, 30, timeline{dispatched: t0, connected: t0, headers: t0, firstToken: at(9)}, never, never, "", false},
		{"absolute", TimeoutProfile{Absolute: time.Minute, IdleStream: time.Hour}, 60, timeline{dispatched: at(50), connected: at(50), headers: at(50), firstToken: at(51), lastByte: at(59)}, never, never, FailAbsoluteTimeout, false},
		{"absolute applies during a tool round", TimeoutProfile{Absolute: time.Minute}, 61, timeline{}, never, never, FailAbsoluteTimeout, false},
		{"all disabled", TimeoutProfile{}, 1 << 20, timeline{dispatched: t0}, never, never, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, ok := tt.p.judge(at(tt.now), t0, tt.tl, tt.liveness, tt.others)
			if ok != (tt.want != "") || v.reason != tt.want || v.restart != tt.restart {
				t.Fatalf("judge = %+v, %v; want reason %q restart %v", v, ok, tt.want, tt.restart)
			}
			if ok && v.detail == "" {
				t.Error("verdict without detail")
			}
		})
	}
}

func TestProgressAt(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := (timeline{dispatched: t0}).progressAt(t0.Add(time.Second)); !got.IsZero() {
		t.Errorf("before headers: %v, want zero", got)
	}
	tl := timeline{dispatched: t0, headers: t0.Add(2 * time.Second), lastByte: t0.Add(3 * time.Second)}
	if got := tl.progressAt(t0.Add(time.Second)); !got.Equal(tl.lastByte) {
		t.Errorf("stale liveness: %v, want last byte", got)
	}
	if got := tl.progressAt(t0.Add(9 * time.Second)); !got.Equal(t0.Add(9 * time.Second)) {
		t.Errorf("fresh liveness: %v, want it", got)
	}
}

func TestAllowRestart(t *testing.T) {
	p := TimeoutProfile{RestartWindow: time.Minute, MaxRestartsPerWindow: 2}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if !p.allowRestart(nil, t0) {
		t.Fatal("first restart refused")
	}
	h := []time.Time{t0, t0.Add(10 * time.Second)}
	if p.allowRestart(h, t0.Add(20*time.Second)) {
		t.Fatal("third restart within the window allowed")
	}
	if !p.allowRestart(h, t0.Add(61*time.Second)) {
		t.Fatal("restart refused after the oldest left the window")
	}
	if (TimeoutProfile{RestartWindow: time.Minute}).allowRestart(nil, t0) {
		t.Fatal("restart allowed with max_restarts_per_window 0")
	}
}
