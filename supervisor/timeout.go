package supervisor

import (
	"fmt"
	"time"
)

// TimeoutProfile is the timeout and restart policy of a worker. A zero
// duration disables the timeout it names (the specification's None). There
// are no per-request overrides.
type TimeoutProfile struct {
	// Connect bounds establishing the TCP connection to the child.
	Connect time.Duration `yaml:"connect"`
	// Headers bounds the wait for response headers, measured from the
	// connection or from the last CPU progress of the child, whichever is
	// later: servers that hold headers until the first token are not
	// killed while they visibly work.
	Headers time.Duration `yaml:"headers"`
	// TTFT bounds the time from dispatch to the first token of each turn,
	// whether or not headers have arrived; the request fails (the child is
	// not restarted). Usually 0.
	TTFT time.Duration `yaml:"ttft"`
	// PrefillLiveness is how long the child may show no progress at all
	// (no response bytes and no CPU time) before the first token.
	PrefillLiveness time.Duration `yaml:"prefill_liveness"`
	// IdleStream is how long the child may show no progress once tokens
	// flow. A stream that gets no bytes for IdleStream while other streams
	// of the worker do is stalled even if the child's CPU advances; only
	// that request fails.
	IdleStream time.Duration `yaml:"idle_stream"`
	// Absolute bounds a whole request, tool rounds included. Usually 0.
	Absolute time.Duration `yaml:"absolute"`
	// ProbeInterval is the period of readiness probes, CPU liveness samples
	// and timeout checks.
	ProbeInterval time.Duration `yaml:"probe_interval"`
	// RestartBackoff is the pause between stopping and starting the child.
	RestartBackoff time.Duration `yaml:"restart_backoff"`
	// RestartWindow and MaxRestartsPerWindow bound crash loops: one restart
	// more than MaxRestartsPerWindow within RestartWindow makes the worker
	// FAILED.
	RestartWindow        time.Duration `yaml:"restart_window"`
	MaxRestartsPerWindow int           `yaml:"max_restarts_per_window"`
}

// DefaultTimeouts returns the profile used for fields a configuration omits.
func DefaultTimeouts() TimeoutProfile {
	return TimeoutProfile{
		Connect:              5 * time.Second,
		Headers:              time.Minute,
		PrefillLiveness:      5 * time.Minute,
		IdleStream:           2 * time.Minute,
		ProbeInterval:        time.Second,
		RestartBackoff:       2 * time.Second,
		RestartWindow:        10 * time.Minute,
		MaxRestartsPerWindow: 5,
	}
}

// timeline is what the worker knows about one upstream call (one turn of a
// request). Zero times have not happened yet.
type timeline struct {
	dispatched time.Time // request written
	connected  time.Time // connection to the child obtained
	headers    time.Time // response headers received
	firstToken time.Time // first text or tool-call delta
	lastByte   time.Time // last response body byte
}

// verdict is the outcome of judging a timeline.
type verdict struct {
	reason FailReason
	detail string
	// restart means the child is unhealthy: nuke and repave. Otherwise
	// only the request fails.
	restart bool
}

// judge decides whether a request has timed out at now. start is when the
// request was first dispatched (for Absolute); liveness is the last time the
// child's CPU time was seen advancing (zero if never); others is the last
// time any stream of the worker received response bytes (zero if never),
// this request's own included. It is a pure function of its arguments.
//
// Before the first token a request is judged by the child as a whole (CPU
// time), since prefill sends nothing; once tokens flow it is also judged on
// its own bytes: a stream that got nothing for IdleStream while other
// streams of the same child did get bytes is stuck, however busy the child
// is (on a multi-slot server the CPU time of the other slots would hide it
// forever). Only that request fails: the child demonstrably serves.
func (p TimeoutProfile) judge(now, start time.Time, t timeline, liveness, others time.Time) (verdict, bool) {
	over := func(limit time.Duration, since time.Time) bool {
		return limit > 0 && !since.IsZero() && now.Sub(since) >= limit
	}
	if over(p.Absolute, start) {
		return verdict{FailAbsoluteTimeout, fmt.Sprintf("request ran %s (absolute timeout %s)", now.Sub(start).Round(time.Millisecond), p.Absolute), false}, true
	}
	if t.dispatched.IsZero() {
		return verdict{}, false // between turns: a tool is running
	}
	if t.connected.IsZero() && over(p.Connect, t.dispatched) {
		return verdict{FailConnectFailed, fmt.Sprintf("no connection within %s", p.Connect), true}, true
	}
	// TTFT counts from dispatch whatever the phase: servers that send
	// headers with the first token (corral, llama-server) are still
	// waiting for headers when it runs out.
	if t.firstToken.IsZero() && over(p.TTFT, t.dispatched) {
		return verdict{FailTTFTTimeout, fmt.Sprintf("no token within %s of dispatch", p.TTFT), false}, true
	}
	switch {
	case t.connected.IsZero():
	case t.headers.IsZero():
		// Servers that hold headers until the first token (corral,
		// llama-server) prefill here: a child whose CPU stopped is stalled.
		if over(p.PrefillLiveness, latest(t.connected, liveness)) {
			return verdict{FailStallTimeout, fmt.Sprintf("prefill (awaiting headers): no CPU progress for %s", p.PrefillLiveness), true}, true
		}
		if over(p.Headers, latest(t.connected, liveness)) {
			return verdict{FailHeadersTimeout, fmt.Sprintf("no response headers and no CPU progress for %s", p.Headers), true}, true
		}
	case t.firstToken.IsZero():
		if over(p.PrefillLiveness, latest(t.headers, t.lastByte, liveness)) {
			return verdict{FailStallTimeout, fmt.Sprintf("prefill: no response bytes and no CPU progress for %s", p.PrefillLiveness), true}, true
		}
	default:
		own := latest(t.firstToken, t.lastByte)
		if over(p.IdleStream, own) && others.After(own) {
			return verdict{FailStallTimeout, fmt.Sprintf("stream: no response bytes for %s while other streams of the worker received bytes", p.IdleStream), false}, true
		}
		if over(p.IdleStream, latest(own, liveness)) {
			return verdict{FailStallTimeout, fmt.Sprintf("stream: no response bytes and no CPU progress for %s", p.IdleStream), true}, true
		}
	}
	return verdict{}, false
}

// progressAt is the request's last_progress_at: the latest response byte or
// CPU liveness after the headers arrived.
func (t timeline) progressAt(liveness time.Time) time.Time {
	if t.headers.IsZero() {
		return time.Time{}
	}
	if liveness.Before(t.headers) {
		liveness = time.Time{}
	}
	return latest(t.lastByte, liveness)
}

// allowRestart reports whether a restart at now stays within the crash-loop
// limit, given the times of earlier restarts.
func (p TimeoutProfile) allowRestart(history []time.Time, now time.Time) bool {
	n := 0
	for _, t := range history {
		if now.Sub(t) < p.RestartWindow {
			n++
		}
	}
	return n < p.MaxRestartsPerWindow
}

func latest(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}
