package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// A Target sends one request and reports what it observed. With
// cancelAfter > 0 it hangs up after that many content chunks and returns a
// Cancelled record. It must be safe for concurrent use.
type Target interface {
	Do(ctx context.Context, p Prompt, cancelAfter int) Record
}

// Config is the load shape of one run.
type Config struct {
	// Concurrency is the number of clients of a closed loop, each sending
	// its next request when the previous one ends. In an open loop it caps
	// the requests in flight (0: no cap), as vllm's --max-concurrency does.
	Concurrency int `json:"concurrency"`
	// NumRequests stops the run after this many requests (0: no limit,
	// Duration must be set).
	NumRequests int `json:"num_requests"`
	// RequestRate > 0 makes an open loop: requests arrive at this mean rate
	// per second regardless of completions (+Inf: all at once).
	RequestRate float64 `json:"request_rate"`
	// Burstiness is the gamma shape of the open loop's arrival gaps
	// (1 or 0: Poisson).
	Burstiness float64 `json:"burstiness"`
	// Duration stops issuing requests after this long (0: no limit);
	// requests in flight still finish.
	Duration time.Duration `json:"-"`
	// Warmup requests run first, in a closed loop, and are not measured.
	// They take their prompts from the end of the list, so give Run
	// NumRequests+Warmup prompts to keep warmup prompts out of the
	// measured ones (a repeated prompt hits the server's prefix cache).
	Warmup int `json:"warmup"`
	// Seed drives the arrival gaps and the choice of cancelled requests.
	Seed uint64 `json:"seed"`
	// CancelFraction of requests hang up after CancelAfterTokens chunks.
	CancelFraction    float64 `json:"cancel_fraction"`
	CancelAfterTokens int     `json:"cancel_after_tokens"`
	// Timeout bounds each request (0: none).
	Timeout time.Duration `json:"-"`
}

// MarshalJSON writes durations in seconds and an infinite rate as "inf".
func (c Config) MarshalJSON() ([]byte, error) {
	type plain Config
	var rate any = c.RequestRate
	if math.IsInf(c.RequestRate, 1) {
		rate = "inf"
	}
	return json.Marshal(struct {
		plain
		RequestRate any     `json:"request_rate"`
		DurationS   float64 `json:"duration_s"`
		TimeoutS    float64 `json:"timeout_s"`
	}{plain(c), rate, c.Duration.Seconds(), c.Timeout.Seconds()})
}

func (c Config) validate() error {
	switch {
	case c.Concurrency < 0:
		return fmt.Errorf("concurrency %d: must not be negative", c.Concurrency)
	case c.RequestRate == 0 && c.Concurrency == 0:
		return errors.New("closed loop needs a concurrency of at least 1 (or set a request rate)")
	case c.RequestRate < 0 || math.IsNaN(c.RequestRate):
		return fmt.Errorf("request rate %v: must be positive", c.RequestRate)
	case c.Burstiness < 0 || math.IsNaN(c.Burstiness) || math.IsInf(c.Burstiness, 0):
		return fmt.Errorf("burstiness %v: must be positive", c.Burstiness)
	case c.NumRequests < 0 || c.Duration < 0 || c.Warmup < 0 || c.Timeout < 0:
		return errors.New("num-requests, duration, warmup and timeout must not be negative")
	case c.NumRequests == 0 && c.Duration == 0:
		return errors.New("set a number of requests or a duration")
	case c.CancelFraction < 0 || c.CancelFraction > 1 || math.IsNaN(c.CancelFraction):
		return fmt.Errorf("cancel fraction %v: must be in [0, 1]", c.CancelFraction)
	case c.CancelFraction > 0 && c.CancelAfterTokens < 1:
		return errors.New("cancel fraction needs cancel-after-tokens of at least 1")
	}
	return nil
}

// Outcome is what a run collected.
type Outcome struct {
	// Records holds one record per measured request, in order of sending.
	Records []Record
	// Duration is the wall time from the first send to the last response.
	Duration time.Duration
}

// Run drives t with the load shape cfg, sending prompts in turn from the
// first (cycling when there are fewer prompts than requests). observe, when non-nil, sees
// each measured record as it completes, from several goroutines at once.
// If ctx ends, requests in flight are aborted and Run returns what it
// collected along with ctx's error.
func Run(ctx context.Context, t Target, prompts []Prompt, cfg Config, observe func(Record)) (Outcome, error) {
	if err := cfg.validate(); err != nil {
		return Outcome{}, err
	}
	if len(prompts) == 0 {
		return Outcome{}, errors.New("no prompts")
	}
	if cfg.Warmup > 0 {
		warm := Config{Concurrency: max(1, cfg.Concurrency), NumRequests: cfg.Warmup, Timeout: cfg.Timeout}
		first := len(prompts) - cfg.Warmup%len(prompts)
		if _, err := run(ctx, t, prompts, first, warm, nil); err != nil {
			return Outcome{}, fmt.Errorf("warmup: %w", err)
		}
	}
	return run(ctx, t, prompts, 0, cfg, observe)
}

// runState is shared by the goroutines of one run.
type runState struct {
	t       Target
	prompts []Prompt
	first   int // index of the first prompt to send
	cfg     Config
	observe func(Record)
	start   time.Time

	mu        sync.Mutex
	issued    int
	cancelRNG *rand.Rand
	records   []Record
}

func run(ctx context.Context, t Target, prompts []Prompt, first int, cfg Config, observe func(Record)) (Outcome, error) {
	s := &runState{
		t: t, prompts: prompts, first: first, cfg: cfg, observe: observe,
		cancelRNG: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed+2)),
	}
	// issuing stops when ctx ends or the duration is over; requests in
	// flight run on ctx and finish.
	issuing, stop := context.WithCancel(ctx)
	if cfg.Duration > 0 {
		issuing, stop = context.WithTimeout(ctx, cfg.Duration)
	}
	defer stop()

	s.start = time.Now()
	var wg sync.WaitGroup
	if cfg.RequestRate > 0 {
		if err := s.openLoop(ctx, issuing, &wg); err != nil {
			return Outcome{}, err
		}
	} else {
		for range cfg.Concurrency {
			wg.Go(func() {
				for {
					i, cancelAfter, ok := s.next(issuing)
					if !ok {
						return
					}
					s.do(ctx, i, cancelAfter)
				}
			})
		}
	}
	wg.Wait()
	out := Outcome{Records: s.records, Duration: time.Since(s.start)}
	slices.SortStableFunc(out.Records, func(a, b Record) int { return cmp.Compare(a.Start, b.Start) })
	return out, ctx.Err()
}

// openLoop sends requests at the times drawn from the arrival generator,
// each on its own goroutine (waiting for a concurrency slot if capped).
func (s *runState) openLoop(ctx, issuing context.Context, wg *sync.WaitGroup) error {
	burst := s.cfg.Burstiness
	if burst == 0 {
		burst = 1
	}
	arr, err := NewArrivals(s.cfg.RequestRate, burst, s.cfg.Seed)
	if err != nil {
		return err
	}
	var slots chan struct{}
	if s.cfg.Concurrency > 0 {
		slots = make(chan struct{}, s.cfg.Concurrency)
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for first := true; ; first = false {
		if !first {
			if gap := arr.Next(); gap > 0 {
				timer.Reset(gap)
				select {
				case <-timer.C:
				case <-issuing.Done():
					return nil
				}
			}
		}
		i, cancelAfter, ok := s.next(issuing)
		if !ok {
			return nil
		}
		wg.Go(func() {
			if slots != nil {
				select {
				case slots <- struct{}{}:
					defer func() { <-slots }()
				case <-ctx.Done():
					s.add(Record{Start: time.Since(s.start), Err: ErrKindAborted, ErrMsg: ctx.Err().Error()})
					return
				}
			}
			s.do(ctx, i, cancelAfter)
		})
	}
}

// next reserves the next request: its index and, when it is to be
// cancelled, after how many chunks. ok is false when issuing is over.
func (s *runState) next(issuing context.Context) (i, cancelAfter int, ok bool) {
	if issuing.Err() != nil {
		return 0, 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.NumRequests > 0 && s.issued >= s.cfg.NumRequests {
		return 0, 0, false
	}
	i = s.issued
	s.issued++
	if s.cfg.CancelFraction > 0 && s.cancelRNG.Float64() < s.cfg.CancelFraction {
		cancelAfter = s.cfg.CancelAfterTokens
	}
	return i, cancelAfter, true
}

// do sends request i and records the result.
func (s *runState) do(ctx context.Context, i, cancelAfter int) {
	if s.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
	}
	sent := time.Since(s.start)
	rec := s.t.Do(ctx, s.prompts[(s.first+i)%len(s.prompts)], cancelAfter)
	rec.Start = sent
	s.add(rec)
}

func (s *runState) add(rec Record) {
	s.mu.Lock()
	s.records = append(s.records, rec)
	s.mu.Unlock()
	if s.observe != nil {
		s.observe(rec)
	}
}
