package toolcall

import (
	"fmt"
	"strings"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// Harmony is gpt-oss's format: a call is a message on the commentary
// channel addressed to the function, its arguments JSON, ended by
// <|call|> (an end-of-generation token, so the engine does not output
// it):
//
//	<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>
//
// The recipient may also come first (<|start|>assistant
// to=functions.get_weather<|channel|>commentary json<|message|>...), as
// the template writes earlier calls. The reasoning splitter of harmony
// (package reasoning) passes such messages on whole, and the answer's
// other channels apart; this parser reads them out of what it passes. A
// harmony answer makes one call at most: <|call|> ends it.
var Harmony Format = harmonyFormat{}

// isHarmony reports a template with harmony's channels and function
// recipients.
func isHarmony(src string) bool {
	return strings.Contains(src, "<|channel|>") && strings.Contains(src, "to=")
}

// Harmony's markup.
const (
	harmonyStart     = "<|start|>"
	harmonyChannel   = "<|channel|>"
	harmonyMessage   = "<|message|>"
	harmonyConstrain = "<|constrain|>"
	harmonyEnd       = "<|end|>"
	harmonyCall      = "<|call|>"
	harmonyReturn    = "<|return|>"
	// harmonyMaxHeader bounds a message's header: longer, it is no markup.
	harmonyMaxHeader = 512
)

// harmonyEnds are the tokens that end a message.
var harmonyEnds = []string{harmonyCall, harmonyEnd, harmonyReturn}

type harmonyFormat struct{}

// Name is the format's name.
func (harmonyFormat) Name() string { return "harmony" }

// Markers are harmony's special tokens.
func (harmonyFormat) Markers() []string {
	return []string{harmonyStart, harmonyChannel, harmonyMessage, harmonyConstrain, harmonyEnd, harmonyCall, harmonyReturn}
}

// Parser returns a parser of tool messages; max does not matter, as an
// answer makes one call at most.
func (harmonyFormat) Parser(_ []wire.Tool, max int) Parser {
	return newMarkupParser(harmonyScanner{}, []string{harmonyStart, harmonyChannel}, max)
}

type harmonyScanner struct{}

func (harmonyScanner) scan(_, s string, end, cut bool) callScan {
	var r callScan
	h := strings.Index(s, harmonyMessage)
	if h < 0 {
		r.bad = len(s) > harmonyMaxHeader
		return r
	}
	name, ok := harmonyRecipient(s[:h])
	if !ok {
		r.bad = true
		return r
	}
	r.name = name
	bodyAt := h + len(harmonyMessage)
	body := s[bodyAt:]
	at, term := -1, ""
	for _, e := range harmonyEnds {
		if i := strings.Index(body, e); i >= 0 && (at < 0 || i < at) {
			at, term = i, e
		}
	}
	switch {
	case at >= 0:
		r.args, r.complete = strings.TrimSpace(body[:at]), true
		r.closed, r.end = true, bodyAt+at+len(term)
	case end && !cut:
		r.args, r.complete = strings.TrimSpace(body), true
	default:
		r.args = strings.TrimSpace(body[:len(body)-heldPrefix(body, harmonyEnds)])
	}
	return r
}

// harmonyRecipient reads a header's recipient, to=functions.NAME, and
// reports whether it addresses a function.
func harmonyRecipient(header string) (string, bool) {
	i := strings.Index(header, "to=")
	if i < 0 {
		return "", false
	}
	rest, ok := strings.CutPrefix(header[i+len("to="):], "functions.")
	if !ok {
		return "", false
	}
	if e := strings.IndexAny(rest, " \t\n<"); e >= 0 {
		rest = rest[:e]
	}
	return rest, rest != ""
}

// Grammar forces one call (harmony answers make one), on the commentary
// channel, its arguments following the function's schema; the engine's
// end-of-generation token (<|call|>) follows.
func (harmonyFormat) Grammar(tools []wire.Tool, _ bool, lim grammar.SchemaLimits) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	b := grammar.NewBuilder(lim)
	calls, err := schemaCalls(b, tools, func(name string, args grammar.Expr) grammar.Expr {
		return grammar.Seq(grammar.Lit(name+" "+harmonyConstrain+"json"+harmonyMessage), args)
	})
	if err != nil {
		return "", err
	}
	return b.Grammar(grammar.Seq(grammar.Lit(harmonyChannel+"commentary to=functions."), grammar.Alt(calls...)))
}
