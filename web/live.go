package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/openai"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// Defaults for zero LiveConfig fields.
const (
	DefaultInterval     = time.Second
	DefaultPoll         = 100 * time.Millisecond
	DefaultWriteTimeout = serving.DefaultWriteTimeout
)

// LiveConfig configures Live.
type LiveConfig struct {
	// Models returns the models the stream shows, nil while the server
	// is loading. Required.
	Models func() Models
	// Done is closed when the server starts shutting down: each stream
	// then sends a last snapshot, with status "draining", and ends, so
	// that it does not hold up the shutdown; later requests get 503.
	Done <-chan struct{}
	// Interval is the time between periodic snapshots, the ones that
	// carry a Rate. Default DefaultInterval.
	Interval time.Duration
	// Poll is how often the stream looks for a change (a slot starting,
	// advancing or ending a request, a queue, a model loading) to send
	// between periodic snapshots: at most one snapshot per Poll while
	// things change, none while nothing does. Default DefaultPoll.
	Poll time.Duration
	// WriteTimeout bounds each write: a client that stops reading ends
	// its stream. Default DefaultWriteTimeout.
	WriteTimeout time.Duration
}

// Live serves the live view's event stream (GET /v1/live): server-sent
// events, each "data: <Snapshot JSON>\n\n". The first snapshot goes out at
// once; then one every Interval, with the Rate of the interval, and in
// between one whenever what it shows changes, at most every Poll. The
// server owns the timer: the client only listens. A stream ends when its
// client goes away or when cfg.Done is closed.
//
// A snapshot shows every slot's cached tokens, the queue of each priority
// class and why a model failed to load (which names files): on a server
// with API keys only an admin caller (gate.Caller.Admin) may open the
// stream; any other gets 403 admin_required.
func Live(cfg LiveConfig) http.Handler {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !gate.FromContext(r.Context()).Admin() {
			openai.WriteError(w, &serving.Error{Status: http.StatusForbidden, Code: "admin_required",
				Message: "GET /v1/live (the live view of the server: slots, queues, model load errors) needs an admin API key"})
			return
		}
		select {
		case <-cfg.Done:
			openai.WriteError(w, &serving.Error{Status: http.StatusServiceUnavailable,
				Code: "unavailable", Message: "the server is shutting down"})
			return
		default:
		}
		st := &liveStream{cfg: cfg, w: w, rc: http.NewResponseController(w)}
		// A write error means the client is gone or does not read:
		// there is nobody to tell.
		_ = st.run(r)
	})
}

// liveStream is one client's stream.
type liveStream struct {
	cfg LiveConfig
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte
}

// run streams snapshots until the client goes, cfg.Done is closed, or a
// write fails.
func (s *liveStream) run(r *http.Request) error {
	ctx := r.Context()
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)

	status := func() string {
		if s.cfg.Models() == nil {
			return "loading"
		}
		return "ok"
	}
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	poll := time.NewTicker(s.cfg.Poll)
	defer poll.Stop()

	from := time.Now()
	last, counts := snapshot(ctx, s.cfg.Models(), status(), from)
	if err := s.send(last); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.cfg.Done:
			snap, _ := snapshot(ctx, s.cfg.Models(), "draining", time.Now())
			return s.send(snap)
		case now := <-tick.C:
			snap, cur := snapshot(ctx, s.cfg.Models(), status(), now)
			snap.Rate = rate(counts, cur, from, now)
			from, counts, last = now, cur, snap
			if err := s.send(snap); err != nil {
				return err
			}
		case now := <-poll.C:
			snap, _ := snapshot(ctx, s.cfg.Models(), status(), now)
			if !changed(last, snap) {
				continue
			}
			last = snap
			if err := s.send(snap); err != nil {
				return err
			}
		}
	}
}

// send writes snap as one event, flushed, within the write timeout.
func (s *liveStream) send(snap Snapshot) error {
	b, err := json.Marshal(snap)
	if err != nil {
		return fmt.Errorf("encode snapshot: %w", err)
	}
	s.buf = wire.AppendData(s.buf[:0], b)
	if err := s.rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("live stream: %w", err)
	}
	if _, err := s.w.Write(s.buf); err != nil {
		return fmt.Errorf("live stream: %w", err)
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("live stream: %w", err)
	}
	return nil
}
