package reasoning

import (
	"strings"
	"unicode"
)

// KimiK3 is Kimi K3's answer, in its tagged markup (<|open|>NAME<|sep|>
// ... <|close|>NAME<|sep|>): the reasoning in a think element, then the
// answer's text in a response element, then any tool calls in a tools
// element, all inside the assistant's message:
//
//	<|open|>think<|sep|>REASONING<|close|>think<|sep|><|open|>response<|sep|>CONTENT<|close|>response<|sep|><|open|>tools<|sep|>...<|close|>tools<|sep|><|close|>message<|sep|>
//
// The generation prompt opens the message and the think element (or,
// without thinking, the response element). The splitter gives the think
// element's text as reasoning and drops the response element's tags and
// the message's end; the tools element passes on as content, tags and
// all, for the kimi-k3 tool-call format (package toolcall) to read.
var KimiK3 Format = kimiK3Format{}

// isKimiK3 reports a template that writes Kimi K3's tags and a think
// element.
func isKimiK3(src string) bool {
	return strings.Contains(src, k3Open) && strings.Contains(src, k3Sep) && strings.Contains(src, "'think'")
}

// Kimi K3's markup.
const (
	k3Open        = "<|open|>"
	k3Close       = "<|close|>"
	k3Sep         = "<|sep|>"
	k3EndOfMsg    = "<|end_of_msg|>"
	k3Think       = k3Open + "think" + k3Sep
	k3ThinkEnd    = k3Close + "think" + k3Sep
	k3Response    = k3Open + "response" + k3Sep
	k3ResponseEnd = k3Close + "response" + k3Sep
	k3MessageEnd  = k3Close + "message" + k3Sep
)

// k3Wrappers are the tags around the content that are not content.
var k3Wrappers = []string{k3Response, k3ResponseEnd, k3MessageEnd, k3EndOfMsg}

type kimiK3Format struct{}

func (kimiK3Format) Name() string  { return "kimi-k3" }
func (kimiK3Format) Start() string { return k3Think }
func (kimiK3Format) End() string   { return k3ThinkEnd }

// Close ends the think element and opens the response.
func (kimiK3Format) Close() string { return k3ThinkEnd + k3Response }

// Markers are Kimi K3's special tokens.
func (kimiK3Format) Markers() []string { return []string{k3Open, k3Close, k3Sep, k3EndOfMsg} }

// Splitter returns a splitter of one answer; opened: inside the think
// element.
func (kimiK3Format) Splitter(opened bool) Splitter {
	s := &k3Splitter{state: tagBefore}
	if opened {
		s.state, s.trim = tagInside, true
	}
	return s
}

type k3Splitter struct {
	state   int    // tagBefore, tagInside (the think element) or tagAfter
	pending string // text not decided yet
	trim    bool   // drop the whitespace at the start of the pending text
	said    bool   // content was given
}

func (s *k3Splitter) Push(text string) (reasoning, content string) {
	s.pending += text
	return s.step(false)
}

func (s *k3Splitter) Finish() (reasoning, content string) { return s.step(true) }

func (s *k3Splitter) step(end bool) (reasoning, content string) {
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
			case strings.HasPrefix(t, k3Think):
				s.pending, s.state, s.trim = t[len(k3Think):], tagInside, true
				continue
			case strings.HasPrefix(t, k3Response):
				s.pending, s.state, s.trim = t[len(k3Response):], tagAfter, true
				continue
			case !end && (strings.HasPrefix(k3Think, t) || strings.HasPrefix(k3Response, t)):
				return r.String(), c.String() // a tag may be arriving
			}
			s.state = tagAfter
		case tagInside:
			text, rest, closed := takeReasoning(s.pending, k3ThinkEnd, end)
			r.WriteString(text)
			s.pending = rest
			if closed {
				s.state, s.trim = tagAfter, true
				continue
			}
			return r.String(), c.String()
		case tagAfter:
			// Content, less the tags around it.
			at, tag := -1, ""
			for _, w := range k3Wrappers {
				if i := strings.Index(s.pending, w); i >= 0 && (at < 0 || i < at) {
					at, tag = i, w
				}
			}
			if at >= 0 {
				c.WriteString(s.pending[:at])
				s.said = s.said || at > 0
				s.pending = s.pending[at+len(tag):]
				s.trim = tag == k3Response && !s.said
				continue
			}
			n := len(s.pending)
			if !end {
				n -= heldPrefix(s.pending, k3Wrappers...)
			}
			c.WriteString(s.pending[:n])
			s.said = s.said || n > 0
			s.pending = s.pending[n:]
			return r.String(), c.String()
		}
	}
}
