package reasoning

import (
	"strings"
	"unicode"
)

// dropFormat is a tag format whose content has framing markup, taken out
// of it: Command R7B's <|START_RESPONSE|> and <|END_RESPONSE|>, Apriel's
// [END FINAL RESPONSE].
type dropFormat struct {
	*tagFormat
	drop []string
}

// Splitter returns a splitter of one answer.
func (f *dropFormat) Splitter(opened bool) Splitter {
	return &dropSplitter{Splitter: f.tagFormat.Splitter(opened), drop: f.drop}
}

// dropSplitter takes markup out of the content a splitter gives, holding
// back the end of the content while it may be the start of some.
type dropSplitter struct {
	Splitter
	drop    []string
	pending string
}

func (s *dropSplitter) Push(text string) (reasoning, content string) {
	r, c := s.Splitter.Push(text)
	return r, s.take(c, false)
}

func (s *dropSplitter) Finish() (reasoning, content string) {
	r, c := s.Splitter.Finish()
	return r, s.take(c, true)
}

// take returns the content that is decided, less the markup and the
// whitespace before it (held back while markup may follow); at the end,
// all of it.
func (s *dropSplitter) take(content string, end bool) string {
	s.pending += content
	var b strings.Builder
	for {
		at, marker := -1, ""
		for _, m := range s.drop {
			if i := strings.Index(s.pending, m); i >= 0 && (at < 0 || i < at) {
				at, marker = i, m
			}
		}
		if at < 0 {
			break
		}
		b.WriteString(strings.TrimRightFunc(s.pending[:at], unicode.IsSpace))
		s.pending = s.pending[at+len(marker):]
	}
	n := len(s.pending)
	if !end {
		n -= heldPrefix(s.pending, s.drop...)
		n = len(strings.TrimRightFunc(s.pending[:n], unicode.IsSpace))
	}
	b.WriteString(s.pending[:n])
	s.pending = s.pending[n:]
	return b.String()
}
