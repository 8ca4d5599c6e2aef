package reasoning

import (
	"strings"
	"unicode"
)

// tagFormat is a format that writes the reasoning between two tags at the
// start of the answer: <think>...</think> and its kin. The reasoning is
// read only at the start (after whitespace): a start tag later in the
// answer is content.
type tagFormat struct {
	name       string
	start, end string
	close      string   // what ends a reasoning the model must stop
	markers    []string // the special tokens among the tags
}

// Name is the format's name.
func (f *tagFormat) Name() string { return f.name }

// Start is the start tag.
func (f *tagFormat) Start() string { return f.start }

// End is the end tag.
func (f *tagFormat) End() string { return f.end }

// Close is the end tag and what follows it.
func (f *tagFormat) Close() string { return f.close }

// Markers are the tags' special tokens.
func (f *tagFormat) Markers() []string { return f.markers }

// Splitter returns a splitter of one answer.
func (f *tagFormat) Splitter(opened bool) Splitter {
	s := &tagSplitter{f: f, state: tagBefore}
	if opened {
		s.state, s.trim = tagInside, true
	}
	return s
}

// The states of a tagSplitter.
const (
	tagBefore = iota // at the start of the answer: the reasoning may open
	tagInside        // inside the reasoning
	tagAfter         // in the content
)

type tagSplitter struct {
	f       *tagFormat
	state   int
	pending string // text not decided yet
	trim    bool   // drop the whitespace at the start of the pending text
}

func (s *tagSplitter) Push(text string) (reasoning, content string) {
	s.pending += text
	return s.step(false)
}

func (s *tagSplitter) Finish() (reasoning, content string) { return s.step(true) }

func (s *tagSplitter) step(end bool) (reasoning, content string) {
	var r, c strings.Builder
	for {
		if s.trim {
			s.pending = strings.TrimLeftFunc(s.pending, unicode.IsSpace)
			if s.pending == "" && !end {
				return r.String(), c.String()
			}
			s.trim = false
		}
		switch s.state {
		case tagBefore:
			t := strings.TrimLeftFunc(s.pending, unicode.IsSpace)
			switch {
			case strings.HasPrefix(t, s.f.start):
				s.pending, s.state, s.trim = t[len(s.f.start):], tagInside, true
				continue
			case !end && strings.HasPrefix(s.f.start, t):
				return r.String(), c.String() // the tag may be arriving
			}
			s.state = tagAfter
		case tagInside:
			text, rest, closed := takeReasoning(s.pending, s.f.end, end)
			r.WriteString(text)
			s.pending = rest
			if closed {
				s.state, s.trim = tagAfter, true
				continue
			}
			return r.String(), c.String()
		case tagAfter:
			c.WriteString(s.pending)
			s.pending = ""
			return r.String(), c.String()
		}
	}
}

// takeReasoning reads pending, text inside a reasoning that the tag
// endTag ends: the reasoning up to the tag, less the whitespace before
// it, and the text after the tag (closed); before the tag has come, the
// reasoning as far as it is certain, holding back what may begin the tag
// and the whitespace before it, and the text held (none at the answer's
// end).
func takeReasoning(pending, endTag string, end bool) (reasoning, rest string, closed bool) {
	if i := strings.Index(pending, endTag); i >= 0 {
		return strings.TrimRightFunc(pending[:i], unicode.IsSpace), pending[i+len(endTag):], true
	}
	n := len(pending)
	if !end {
		n -= heldPrefix(pending, endTag)
	}
	n = len(strings.TrimRightFunc(pending[:n], unicode.IsSpace))
	if end {
		return pending[:n], "", false
	}
	return pending[:n], pending[n:], false
}
