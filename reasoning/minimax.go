package reasoning

import (
	"strings"
	"unicode"
)

// MiniMaxM3 is MiniMax M3's reasoning, between <mm:think> and
// </mm:think>. The answer may instead open with </mm:think> alone: no
// reasoning, as the template asks of a model that chose not to think
// (its thinking mode "adaptive"; "disabled" writes the tag in the
// prompt, "enabled" opens the reasoning there).
var MiniMaxM3 Format = minimaxM3Format{&tagFormat{
	name: "minimax-m3", start: "<mm:think>", end: "</mm:think>", close: "</mm:think>",
	markers: []string{"<mm:think>", "</mm:think>"},
}}

// isMiniMaxM1 reports MiniMax-M1's template, by the model's name in its
// default system prompt: the template writes no reasoning markup, but the
// model reasons in <think> tags (see Think).
func isMiniMaxM1(src string) bool { return strings.Contains(src, "MiniMax-M1") }

// isMiniMaxM3 reports a template that writes <mm:think>.
func isMiniMaxM3(src string) bool { return strings.Contains(src, "<mm:think>") }

type minimaxM3Format struct{ *tagFormat }

// Splitter returns a splitter of one answer.
func (f minimaxM3Format) Splitter(opened bool) Splitter {
	if opened {
		return f.tagFormat.Splitter(true)
	}
	return &bareEndSplitter{f: f.tagFormat, inner: f.tagFormat.Splitter(false)}
}

// bareEndSplitter is a tag splitter for an answer that may open with the
// end tag alone, which reads as an empty reasoning.
type bareEndSplitter struct {
	f       *tagFormat
	inner   Splitter
	pending string // the answer's start, until it is decided
	decided bool
}

func (s *bareEndSplitter) Push(text string) (reasoning, content string) {
	if s.decided {
		return s.inner.Push(text)
	}
	s.pending += text
	t := strings.TrimLeftFunc(s.pending, unicode.IsSpace)
	if strings.HasPrefix(s.f.end, t) && len(t) < len(s.f.end) {
		return "", "" // the end tag may be arriving
	}
	return s.decide()
}

func (s *bareEndSplitter) Finish() (reasoning, content string) {
	var r, c string
	if !s.decided {
		r, c = s.decide()
	}
	r2, c2 := s.inner.Finish()
	return r + r2, c + c2
}

// decide hands the answer's start to the tag splitter, the end tag alone
// as an empty reasoning.
func (s *bareEndSplitter) decide() (reasoning, content string) {
	s.decided = true
	text := s.pending
	s.pending = ""
	if t := strings.TrimLeftFunc(text, unicode.IsSpace); strings.HasPrefix(t, s.f.end) {
		text = s.f.start + t
	}
	return s.inner.Push(text)
}
