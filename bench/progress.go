package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Progress draws a one-line progress bar (requests done, errors, current
// request and token throughput) on w, usually stderr, redrawn a few times a
// second until Close.
type Progress struct {
	w        io.Writer
	total    int           // requests expected; 0 when the run is timed
	duration time.Duration // the run's duration limit, 0 when counted
	start    time.Time

	mu     sync.Mutex
	done   int
	failed int
	tokens int

	stop     chan struct{}
	finished chan struct{}
}

// NewProgress starts drawing. total is the number of requests expected, or
// 0 for a run bounded by duration only.
func NewProgress(w io.Writer, total int, duration time.Duration) *Progress {
	p := &Progress{
		w: w, total: total, duration: duration, start: time.Now(),
		stop: make(chan struct{}), finished: make(chan struct{}),
	}
	go p.loop()
	return p
}

func (p *Progress) loop() {
	defer close(p.finished)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			p.draw("\r")
		case <-p.stop:
			p.draw("\r")
			fmt.Fprintln(p.w)
			return
		}
	}
}

func (p *Progress) draw(prefix string) {
	p.mu.Lock()
	line := p.line(time.Since(p.start))
	p.mu.Unlock()
	fmt.Fprint(p.w, prefix+line)
}

// Observe counts a finished request. Safe for concurrent use.
func (p *Progress) Observe(r Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if r.Err != "" {
		p.failed++
	}
	p.tokens += r.OutputTokens
}

// Close draws the final state, ends the line and stops drawing.
func (p *Progress) Close() {
	close(p.stop)
	<-p.finished
}

// line renders the bar for the counts so far after elapsed; p.mu held.
func (p *Progress) line(elapsed time.Duration) string {
	const width = 30
	frac := 0.0
	switch {
	case p.total > 0:
		frac = float64(p.done) / float64(p.total)
	case p.duration > 0:
		frac = elapsed.Seconds() / p.duration.Seconds()
	}
	frac = min(max(frac, 0), 1)
	filled := int(frac * width)
	bar := strings.Repeat("#", filled) + strings.Repeat(".", width-filled)
	count := fmt.Sprintf("%d", p.done)
	if p.total > 0 {
		count = fmt.Sprintf("%d/%d", p.done, p.total)
	}
	rate, tps := 0.0, 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate, tps = float64(p.done)/s, float64(p.tokens)/s
	}
	return fmt.Sprintf("[%s] %s req  %d err  %.2f req/s  %.1f tok/s  %s",
		bar, count, p.failed, rate, tps, elapsed.Truncate(100*time.Millisecond))
}
