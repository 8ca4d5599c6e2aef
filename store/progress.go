package store

import (
	"fmt"
	"io"
	"strings"
	"time"
)

const (
	// redrawEvery limits how often the status line is rewritten.
	redrawEvery = 100 * time.Millisecond
	// unknownStep is how often plain output reports a download of unknown
	// size.
	unknownStep = 100 << 20
	// clearLine returns to the start of the line and erases it.
	clearLine = "\r\x1b[K"
)

// progress reports one Pull to w: events on lines of their own and, on a
// terminal, a status line rewritten in place; elsewhere a line per 10%.
// The text is made by the pure functions below; progress only decides when.
type progress struct {
	w        io.Writer
	terminal bool
	name     string // the model id

	started  time.Time // when the first attempt began receiving
	fetched  int64     // bytes received by this Pull (not a resumed part)
	step     int64     // the last step printed (plain output)
	drawn    time.Time // when the status line was last written (terminal)
	onScreen bool      // the status line is on screen (terminal)
}

// event prints a line of its own.
func (p *progress) event(format string, args ...any) {
	if p.onScreen {
		fmt.Fprint(p.w, clearLine)
		p.onScreen = false
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}

// begin starts an attempt that continues from done of total bytes (-1:
// unknown).
func (p *progress) begin(done, total int64) {
	if p.started.IsZero() {
		p.started = time.Now()
	}
	if done > 0 {
		p.event("resuming %s at %s", p.name, fraction(done, total))
	} else if total >= 0 {
		p.event("pulling %s (%s)", p.name, humanBytes(float64(total)))
	} else {
		p.event("pulling %s (size unknown)", p.name)
	}
	p.step = step(done, total)
}

// update reports that n more bytes arrived, done of total in all.
func (p *progress) update(done, total, n int64) {
	p.fetched += n
	if p.terminal {
		now := time.Now()
		if now.Sub(p.drawn) >= redrawEvery {
			p.draw(done, total, now)
		}
		return
	}
	if s := step(done, total); s > p.step {
		p.step = s
		if total < 0 || s < 10 { // pull prints the end
			fmt.Fprintln(p.w, progressLine(p.name, done, total))
		}
	}
}

// end finishes an attempt that received the whole file, done bytes.
func (p *progress) end(done, total int64) {
	if p.terminal {
		p.draw(done, total, time.Now())
		fmt.Fprintln(p.w)
		p.onScreen = false
	}
}

// stop ends the status line, if it is on screen, for what follows to go
// on a line of its own.
func (p *progress) stop() {
	if p.onScreen {
		fmt.Fprintln(p.w)
		p.onScreen = false
	}
}

// draw rewrites the status line.
func (p *progress) draw(done, total int64, now time.Time) {
	fmt.Fprint(p.w, "\r"+statusLine(p.name, done, total, p.fetched, now.Sub(p.started))+"\x1b[K")
	p.drawn, p.onScreen = now, true
}

// step is which tenth of total done is in, or with total unknown, which
// 100 MiB.
func step(done, total int64) int64 {
	if total > 0 {
		return done * 10 / total
	}
	return done / unknownStep
}

// progressLine is a line of plain progress output:
// "pulling NAME: 10% (12.0 MiB of 120 MiB)".
func progressLine(name string, done, total int64) string {
	return "pulling " + name + ": " + fraction(done, total)
}

// fraction says how far a download is: "10% (12.0 MiB of 120 MiB)", or
// with total unknown (-1), "12.0 MiB".
func fraction(done, total int64) string {
	if total > 0 {
		return fmt.Sprintf("%d%% (%s of %s)", done*100/total, humanBytes(float64(done)), humanBytes(float64(total)))
	}
	return humanBytes(float64(done))
}

// statusLine is the terminal's status line after done of total bytes (-1:
// unknown), fetched of them in elapsed by this Pull:
// "pulling NAME:  10% 12.0 MiB/120 MiB  4.00 MiB/s  27s left".
func statusLine(name string, done, total, fetched int64, elapsed time.Duration) string {
	var b strings.Builder
	b.WriteString("pulling " + name + ": ")
	if total > 0 {
		fmt.Fprintf(&b, "%3d%% %s/%s", done*100/total, humanBytes(float64(done)), humanBytes(float64(total)))
	} else {
		b.WriteString(humanBytes(float64(done)))
	}
	if fetched > 0 && elapsed >= time.Second { // a speed over less is noise
		rate := float64(fetched) / elapsed.Seconds()
		fmt.Fprintf(&b, "  %s/s", humanBytes(rate))
		if total > done {
			fmt.Fprintf(&b, "  %s left", formatETA(time.Duration(float64(total-done)/rate*float64(time.Second))))
		}
	}
	return b.String()
}

// humanBytes formats n bytes with a binary unit and three significant
// digits: "512 B", "1.50 KiB", "12.0 MiB", "120 MiB".
func humanBytes(n float64) string {
	if n < 1024 {
		return fmt.Sprintf("%.0f B", n)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	u := 0
	for n /= 1024; n >= 999.5 && u < len(units)-1; u++ {
		n /= 1024
	}
	switch {
	case n >= 99.95:
		return fmt.Sprintf("%.0f %s", n, units[u])
	case n >= 9.995:
		return fmt.Sprintf("%.1f %s", n, units[u])
	default:
		return fmt.Sprintf("%.2f %s", n, units[u])
	}
}

// formatETA formats a time left to the second: "7s", "3m05s", "2h04m".
func formatETA(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	default:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
}
