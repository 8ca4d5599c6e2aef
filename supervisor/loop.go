package supervisor

import (
	"strings"

	"github.com/corral-llm/corral/supervisor/process"
)

// RepeatedLineGuard configures the repeated-line loop detector: a request is
// canceled with repeated_line_loop when the same line of at least MinChars
// characters (after trimming spaces) arrives Repeats times in a row. Shorter
// lines (blank ones, separators, a lone comma of pretty-printed JSON) are
// ignored: they neither count nor break a run. Repeats 0 disables the guard.
type RepeatedLineGuard struct {
	MinChars int `yaml:"min_chars"`
	Repeats  int `yaml:"repeats"`
}

// lineLoopDetector applies a RepeatedLineGuard to streamed text.
type lineLoopDetector struct {
	guard   RepeatedLineGuard
	partial strings.Builder // the current, unterminated line (bounded)
	last    string          // the last long line
	run     int             // how many times last came in a row
}

// Feed adds streamed text and reports the looping line once the guard trips.
func (d *lineLoopDetector) Feed(text string) (line string, looping bool) {
	if d.guard.Repeats <= 0 {
		return "", false
	}
	for {
		i := strings.IndexByte(text, '\n')
		if i < 0 {
			if room := process.MaxLineBytes - d.partial.Len(); room > 0 {
				d.partial.WriteString(text[:min(len(text), room)])
			}
			return "", false
		}
		if room := process.MaxLineBytes - d.partial.Len(); room > 0 {
			d.partial.WriteString(text[:min(i, room)])
		}
		text = text[i+1:]
		l := strings.TrimSpace(d.partial.String())
		d.partial.Reset()
		if d.endLine(l) {
			return l, true
		}
	}
}

// endLine accounts one complete, trimmed line.
func (d *lineLoopDetector) endLine(l string) bool {
	switch {
	case l == "" || len([]rune(l)) < d.guard.MinChars:
		return false
	case l == d.last:
		d.run++
	default:
		d.last, d.run = l, 1
	}
	return d.run >= d.guard.Repeats
}
