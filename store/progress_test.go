package store

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestHumanBytes(t *testing.T) {
	for n, want := range map[float64]string{
		0: "0 B", 512: "512 B", 1023: "1023 B", 1024: "1.00 KiB", 1536: "1.50 KiB",
		12 << 20: "12.0 MiB", 120 << 20: "120 MiB", 1023 << 20: "1.00 GiB",
		4.5 * (1 << 30): "4.50 GiB", 1 << 50: "1.00 PiB", 5 << 50: "5.00 PiB",
	} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%v) = %q, want %q", n, got, want)
		}
	}
}

func TestFormatETA(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 1400 * time.Millisecond: "1s", 59 * time.Second: "59s", 65 * time.Second: "1m05s",
		time.Hour + 4*time.Minute + 30*time.Second: "1h04m",
	} {
		if got := formatETA(d); got != want {
			t.Errorf("formatETA(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestProgressLines(t *testing.T) {
	const mib = 1 << 20
	for _, tt := range []struct {
		done, total, fetched int64
		elapsed              time.Duration
		plain, status        string
	}{
		{12 * mib, 120 * mib, 12 * mib, 3 * time.Second,
			"pulling m: 10% (12.0 MiB of 120 MiB)", "pulling m:  10% 12.0 MiB/120 MiB  4.00 MiB/s  27s left"},
		// Resumed at 100 MiB: the speed counts only what this pull fetched.
		{110 * mib, 120 * mib, 10 * mib, 5 * time.Second,
			"pulling m: 91% (110 MiB of 120 MiB)", "pulling m:  91% 110 MiB/120 MiB  2.00 MiB/s  5s left"},
		{120 * mib, 120 * mib, 120 * mib, time.Minute,
			"pulling m: 100% (120 MiB of 120 MiB)", "pulling m: 100% 120 MiB/120 MiB  2.00 MiB/s"},
		{5 * mib, -1, 5 * mib, time.Second,
			"pulling m: 5.00 MiB", "pulling m: 5.00 MiB  5.00 MiB/s"},
		{0, 120 * mib, 0, 0,
			"pulling m: 0% (0 B of 120 MiB)", "pulling m:   0% 0 B/120 MiB"},
		{1 * mib, 120 * mib, 1 * mib, 900 * time.Millisecond,
			"pulling m: 0% (1.00 MiB of 120 MiB)", "pulling m:   0% 1.00 MiB/120 MiB"},
	} {
		if got := progressLine("m", tt.done, tt.total); got != tt.plain {
			t.Errorf("progressLine(%d, %d) = %q, want %q", tt.done, tt.total, got, tt.plain)
		}
		if got := statusLine("m", tt.done, tt.total, tt.fetched, tt.elapsed); got != tt.status {
			t.Errorf("statusLine(%d, %d, %d, %v) = %q, want %q", tt.done, tt.total, tt.fetched, tt.elapsed, got, tt.status)
		}
	}
}

// Plain output: a line per 10% step crossed, none at 100% (Pull prints
// the end), none for the steps a resumed part had passed.
func TestProgressPlainSteps(t *testing.T) {
	var buf bytes.Buffer
	p := &progress{w: &buf, name: "m"}
	p.begin(250, 1000)
	for done := int64(250); done < 1000; {
		n := min(70, 1000-done)
		done += n
		p.update(done, 1000, n)
	}
	p.end(1000, 1000)
	var pcts []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if strings.HasPrefix(line, "pulling m: ") {
			pcts = append(pcts, strings.Fields(line)[2])
		}
	}
	want := "32% 46% 53% 60% 74% 81% 95%" // the first update past each step
	if got := strings.Join(pcts, " "); got != want {
		t.Errorf("steps %q, want %q; output:\n%s", got, want, buf.String())
	}
	if !strings.HasPrefix(buf.String(), "resuming m at 25% (250 B of 1000 B)\n") {
		t.Errorf("output does not start with the resume:\n%s", buf.String())
	}
	if strings.Contains(buf.String(), "\r") {
		t.Errorf("plain output rewrites lines:\n%q", buf.String())
	}
}

// On a terminal the status line is rewritten in place and cleared before
// an event line.
func TestProgressTerminal(t *testing.T) {
	var buf bytes.Buffer
	p := &progress{w: &buf, name: "m", terminal: true}
	p.begin(0, 100)
	p.update(100, 100, 100)
	p.event("hello")
	out := buf.String()
	if !strings.HasPrefix(out, "pulling m (100 B)\n\rpulling m: 100% 100 B/100 B") || !strings.HasSuffix(out, clearLine+"hello\n") {
		t.Errorf("terminal output %q", out)
	}
}
