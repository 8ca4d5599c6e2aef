package agent

import "strings"

// maxLineBytes bounds the unterminated line the detector keeps: a model
// that writes one endless line cannot grow it without bound. Only lines
// of that length or shorter are compared.
const maxLineBytes = 16 << 10

// RepeatedLineGuard configures the repeated-line loop detector: a request is
// canceled with repeated_line_loop when the same line of at least MinChars
// characters (after trimming spaces) arrives Repeats times in a row. Shorter
// lines (blank ones, separators, a lone comma of pretty-printed JSON) are
// ignored: they neither count nor break a run. Repeats 0 disables the guard.
type RepeatedLineGuard struct {
	MinChars int `yaml:"min_chars"`
	Repeats  int `yaml:"repeats"`
}

// LineLoopDetector applies a RepeatedLineGuard to streamed text. Its zero
// value (no guard) never trips.
type LineLoopDetector struct {
	Guard   RepeatedLineGuard
	partial strings.Builder // the current, unterminated line (bounded)
	last    string          // the last long line
	run     int             // how many times last came in a row
}

// Feed adds streamed text and reports the looping line once the guard trips.
func (d *LineLoopDetector) Feed(text string) (line string, looping bool) {
	if d.Guard.Repeats <= 0 {
		return "", false
	}
	for {
		i := strings.IndexByte(text, '\n')
		if i < 0 {
			if room := maxLineBytes - d.partial.Len(); room > 0 {
				d.partial.WriteString(text[:min(len(text), room)])
			}
			return "", false
		}
		if room := maxLineBytes - d.partial.Len(); room > 0 {
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
func (d *LineLoopDetector) endLine(l string) bool {
	switch {
	case l == "" || len([]rune(l)) < d.Guard.MinChars:
		return false
	case l == d.last:
		d.run++
	default:
		d.last, d.run = l, 1
	}
	return d.run >= d.Guard.Repeats
}
