package reasoning

import (
	"strings"
	"unicode"
)

// answerFormat is a tag format whose answer, after the reasoning, comes
// in markup of its own: Granite 3.3's <response>...</response>, Solar
// Open's <|begin|>assistant<|content|>...<|end|>. Its splitter drops that
// markup from the content.
type answerFormat struct {
	*tagFormat
	open  []string // markers that may open the answer, each optional, in this order
	close string   // the marker that may close it, at its end
}

// Markers are the tags' special tokens and the answer's markup.
func (f *answerFormat) Markers() []string {
	return append(append(append([]string{}, f.markers...), f.open...), f.close)
}

// Splitter returns a splitter of one answer.
func (f *answerFormat) Splitter(opened bool) Splitter {
	return &answerSplitter{f: f, inner: f.tagFormat.Splitter(opened)}
}

// answerSplitter is a tag splitter whose content goes on through a filter
// of the answer's markup.
type answerSplitter struct {
	f       *answerFormat
	inner   Splitter
	next    int    // the next of f.open that may come
	pending string // content not decided yet
	trim    bool   // drop the whitespace at the start of the pending text
}

func (s *answerSplitter) Push(text string) (reasoning, content string) {
	r, c := s.inner.Push(text)
	return r, s.content(c, false)
}

func (s *answerSplitter) Finish() (reasoning, content string) {
	r, c := s.inner.Finish()
	return r, s.content(c, true)
}

// content passes c on, less the opening markers at the start of the
// content and the closing one at its end (and the whitespace around
// them), holding back what may still be either.
func (s *answerSplitter) content(c string, end bool) string {
	s.pending += c
	for s.next < len(s.f.open) {
		t := strings.TrimLeftFunc(s.pending, unicode.IsSpace)
		m := s.f.open[s.next]
		switch {
		case strings.HasPrefix(t, m):
			s.pending, s.trim = t[len(m):], true
		case !end && strings.HasPrefix(m, t):
			return "" // the marker may be arriving
		}
		s.next++
	}
	if s.trim {
		s.pending = strings.TrimLeftFunc(s.pending, unicode.IsSpace)
		if s.pending == "" && !end {
			return ""
		}
		s.trim = false
	}
	if end {
		out := s.pending
		if t := strings.TrimRightFunc(out, unicode.IsSpace); strings.HasSuffix(t, s.f.close) {
			out = strings.TrimRightFunc(t[:len(t)-len(s.f.close)], unicode.IsSpace)
		}
		s.pending = ""
		return out
	}
	// Hold what may be the closing marker, with the whitespace before it.
	hold := heldPrefix(s.pending, s.f.close)
	if i := strings.LastIndex(s.pending, s.f.close); i >= 0 && strings.TrimSpace(s.pending[i+len(s.f.close):]) == "" {
		hold = len(s.pending) - i
	}
	n := len(strings.TrimRightFunc(s.pending[:len(s.pending)-hold], unicode.IsSpace))
	out := s.pending[:n]
	s.pending = s.pending[n:]
	return out
}
