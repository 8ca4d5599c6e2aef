package reasoning

import "strings"

// Harmony is gpt-oss's format, where the answer is a sequence of messages
// on channels, each a header, <|message|>, its text and an end token:
//
//	<|channel|>analysis<|message|>REASONING<|end|><|start|>assistant<|channel|>final<|message|>CONTENT<|return|>
//
// The analysis channel is the reasoning; the final channel, and a
// commentary without a recipient (a preamble to the user), are content. A
// message addressed to a function (to=functions.NAME: a tool call) is
// passed on whole as content, header and all, for the harmony tool-call
// format (package toolcall) to read. An answer that does not start with a
// header is content as it is.
var Harmony Format = harmonyFormat{}

// isHarmony reports a template with harmony's channels.
func isHarmony(src string) bool {
	return strings.Contains(src, "<|channel|>") && strings.Contains(src, "analysis")
}

// Harmony's markup.
const (
	hStart   = "<|start|>"
	hChannel = "<|channel|>"
	hMessage = "<|message|>"
	hEnd     = "<|end|>"
	hCall    = "<|call|>"
	hReturn  = "<|return|>"
	// hMaxHeader bounds a header: a longer one is no markup.
	hMaxHeader = 512
)

// hEnds are the tokens that end a message.
var hEnds = []string{hEnd, hCall, hReturn}

type harmonyFormat struct{}

func (harmonyFormat) Name() string  { return "harmony" }
func (harmonyFormat) Start() string { return hChannel + "analysis" + hMessage }
func (harmonyFormat) End() string   { return hEnd }

// Close ends the analysis message and opens the final one.
func (harmonyFormat) Close() string {
	return hEnd + hStart + "assistant" + hChannel + "final" + hMessage
}

// Markers are harmony's special tokens.
func (harmonyFormat) Markers() []string {
	return []string{hStart, hChannel, hMessage, hEnd, hCall, hReturn, "<|constrain|>"}
}

// Splitter returns a splitter of one answer, which the prompt (ending
// with <|start|>assistant) leaves at a header; opened: inside an analysis
// message.
func (harmonyFormat) Splitter(opened bool) Splitter {
	s := &harmonySplitter{state: hHeader}
	if opened {
		s.state, s.channel = hBody, hAnalysis
	}
	return s
}

// The states of a harmonySplitter.
const (
	hHeader  = iota // reading a header, up to <|message|>
	hBody           // in a message's text
	hBetween        // after a message, before the next <|start|>
	hPlain          // the answer is no harmony: all content
)

// What a message's text is.
const (
	hAnalysis = iota // reasoning
	hFinal           // content
	hTool            // a tool call: passed on as content, markup and all
)

type harmonySplitter struct {
	state   int
	channel int
	pending string // text not decided yet
	started bool   // a header was read: the answer is harmony
	trim    bool   // drop whitespace at the start of the pending text
}

func (s *harmonySplitter) Push(text string) (reasoning, content string) {
	s.pending += text
	return s.step(false)
}

func (s *harmonySplitter) Finish() (reasoning, content string) { return s.step(true) }

func (s *harmonySplitter) step(end bool) (reasoning, content string) {
	var r, c strings.Builder
	out := func(text string) {
		if s.channel == hAnalysis {
			r.WriteString(text)
		} else {
			c.WriteString(text)
		}
	}
	for {
		switch s.state {
		case hPlain:
			c.WriteString(s.pending)
			s.pending = ""
			return r.String(), c.String()
		case hBetween:
			// Between messages: <|start|> opens the next header; anything
			// else the model writes there is content, and so is the rest.
			t := strings.TrimLeft(s.pending, " \n")
			switch {
			case strings.HasPrefix(t, hStart):
				s.pending, s.state = t, hHeader
			case !end && strings.HasPrefix(hStart, t):
				return r.String(), c.String()
			default:
				s.pending, s.state = t, hPlain
			}
		case hHeader:
			t := strings.TrimLeft(s.pending, " \n")
			h := strings.Index(t, hMessage)
			if h < 0 {
				switch {
				case !s.started && !strings.HasPrefix(t, hStart) && !strings.HasPrefix(t, hChannel) &&
					!strings.HasPrefix(hStart, t) && !strings.HasPrefix(hChannel, t):
					s.state = hPlain // no header: not harmony
				case len(t) > hMaxHeader || end:
					// No header after all: what was held is content, markup
					// that broke off at the end is dropped.
					if !s.started || len(t) > hMaxHeader {
						c.WriteString(s.pending)
					}
					s.pending, s.state = "", hPlain
					if end {
						return r.String(), c.String()
					}
				default:
					return r.String(), c.String()
				}
				continue
			}
			header := t[:h]
			s.started = true
			s.pending = t[h+len(hMessage):]
			s.state = hBody
			switch {
			case strings.Contains(header, "to="):
				s.channel = hTool
				c.WriteString(header + hMessage) // the tool-call parser reads it
			case strings.Contains(header, hChannel+"analysis"):
				s.channel, s.trim = hAnalysis, true
			default:
				s.channel, s.trim = hFinal, true
			}
		case hBody:
			if s.trim {
				s.pending = strings.TrimLeft(s.pending, " \n")
				if s.pending == "" && !end {
					return r.String(), c.String()
				}
				s.trim = false
			}
			at, term := -1, ""
			for _, e := range hEnds {
				if i := strings.Index(s.pending, e); i >= 0 && (at < 0 || i < at) {
					at, term = i, e
				}
			}
			if at >= 0 {
				text := s.pending[:at]
				if s.channel == hTool {
					out(text + term)
				} else {
					out(strings.TrimRight(text, " \n"))
				}
				s.pending, s.state = s.pending[at+len(term):], hBetween
				continue
			}
			n := len(s.pending)
			if !end {
				n -= heldPrefix(s.pending, hEnds...)
				if s.channel != hTool {
					n = len(strings.TrimRight(s.pending[:n], " \n"))
				}
			} else if s.channel != hTool {
				n = len(strings.TrimRight(s.pending, " \n"))
			}
			out(s.pending[:n])
			s.pending = s.pending[n:]
			if end {
				s.pending = ""
			}
			return r.String(), c.String()
		}
	}
}
