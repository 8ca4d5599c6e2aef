// Package toolcall reads the tool calls models write, each model family
// in its own markup, and writes the grammars that make a model call
// (tool_choice "required" or a named function) in that markup.
//
// A Format is one family's markup: its Parser splits an answer, as it
// arrives, into content and calls in OpenAI's streaming shape; its
// Grammar forces calls; its Markers are the markup the model writes as
// special tokens, which the engine must output as text for the parser
// to see. Detect picks the format a chat template implies, by the markup
// the template writes for the calls of earlier turns; Lookup finds one by
// name (corral serve's --tool-format).
//
// Adding a family: a file with a value implementing Format (an xmlCall
// table where a call is an element holding one per argument), its entry
// in families (where Detect tries it, before the formats its template
// could be mistaken for), and its parser table in the tests.
package toolcall

import (
	"crypto/rand"
	"fmt"
	"github.com/corral-llm/corral/grammar"
	"strings"
	"unicode/utf8"

	"github.com/corral-llm/corral/wire"
)

// Format is how a model family writes its tool calls.
type Format interface {
	// Name is the format's name, as --tool-format takes it.
	Name() string
	// Parser returns a parser for one answer that may call tools (the
	// request's, which formats that write arguments as text type by
	// their schemas), keeping at most max calls (0: all of them; 1 when
	// parallel calls are off).
	Parser(tools []wire.Tool, max int) Parser
	// Grammar returns a GBNF grammar under which the model's whole
	// answer is one call (parallel false) or one or more calls (parallel
	// true) of tools, in this format's markup, each call's arguments
	// following its function's parameters schema, each schema within lim
	// (a larger one: a *grammar.SchemaLimitError). A schema the grammar
	// cannot express is an error wrapping grammar.ErrInvalidSchema that
	// names the tool.
	Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error)
	// Markers are the markup the model writes, which it may write as
	// special tokens: the engine must output their text.
	Markers() []string
}

// Parser splits one answer, as it arrives, into content and tool calls.
// Push gives the pieces that are certain so far, in OpenAI's streaming
// shape: content text, and for each call its index, id and name first,
// then fragments of its arguments (the JSON text of an object). Text that
// may still turn out to be call markup is held back until it is decided,
// so that markup never reaches the content.
//
// A Parser belongs to one goroutine.
type Parser interface {
	// Push adds text to the answer and returns the pieces it decided.
	Push(text string) []wire.Delta
	// Finish ends the answer and returns the pieces still held. A call
	// cut off by the end stays as far as it was streamed, but is not
	// among Calls.
	Finish() []wire.Delta
	// Cut marks the answer as cut off (max_tokens, the end of the
	// context): at Finish, the first characters of a marker at its end
	// are markup that broke off, dropped rather than given as content.
	Cut()
	// Calls are the complete calls parsed so far.
	Calls() []wire.ToolCall
}

// family is a format and how Detect recognises its templates.
type family struct {
	format Format
	is     func(templateSource string) bool
}

// families are the formats Detect tries, in order: a template matching
// several (Qwen3-Coder's XML inside Hermes's <tool_call> tags) is the
// first one's. JSON, the fallback, is not among them.
var families = []family{
	{Harmony, isHarmony},
	{Gemma4, isGemma4},
	{DeepSeekV4, isDeepSeekV4},
	{DeepSeekV32, isDeepSeekV32},
	{DeepSeekR1, isDeepSeekR1},
	{DeepSeekV31, isDeepSeekV31},
	{SeedOSS, isSeedOSS},
	{Hy3, isHy3},
	{SolarOpen, isSolarOpen},
	{Apertus, isApertus},
	{NemotronV2, isNemotronV2},
	{Granite, isGranite},
	{Qwen3Coder, isQwen3Coder},
	{MistralV11, isMistralV11},
	{GLM, isGLM},
	{MiniMaxM3, isMiniMaxM3},
	{MiniMaxM2, isMiniMaxM2},
	{KimiK3, isKimiK3},
	{KimiK2, isKimiK2},
	{MiniMaxM1, isMiniMaxM1},
	{Apriel, isApriel}, // its instructions name <tool_call> too
	{MiniCPM, isMiniCPM},
	{Hermes, isHermes},
	{Mistral, isMistral},
	{LFM2, isLFM2},
	{CommandR7B, isCommandR7B}, // its instructions say "Action:" too
	{CommandRPlus, isCommandRPlus},
	{GigaChat31, isGigaChat31},
	{GigaChat3, isGigaChat3},
	// On Llama 3.1's headers, before Llama3.
	{FunctionaryV31, isFunctionaryV31},
	{FunctionaryV32, isFunctionaryV32},
	{FirefunctionV2, isFirefunctionV2},
	{Pythonic, isPythonic},
	{Llama3, isLlama3},
}

// Detect returns the format a chat template source implies, judged by the
// markup it writes for the calls of earlier turns; JSON when it writes
// none that corral knows.
func Detect(templateSource string) Format {
	for _, f := range families {
		if f.is(templateSource) {
			return f.format
		}
	}
	return JSON
}

// all lists every format, for Lookup and Names.
func all() []Format {
	out := make([]Format, 0, len(families)+1)
	for _, f := range families {
		out = append(out, f.format)
	}
	return append(out, JSON)
}

// Names lists the formats' names, for flags and error messages.
func Names() []string {
	var out []string
	for _, f := range all() {
		out = append(out, f.Name())
	}
	return out
}

// Lookup returns the format with the given name.
func Lookup(name string) (Format, error) {
	for _, f := range all() {
		if f.Name() == name {
			return f, nil
		}
	}
	return nil, fmt.Errorf("unknown tool-call format %q (known: %s)", name, strings.Join(Names(), ", "))
}

// Parse splits a whole answer in format f into its content and calls, as
// f's Parser fed the same text in pieces would, except that a call cut
// off by the answer's end is not among the calls (nothing of it was
// sent). cut says the answer was cut off (see Parser.Cut).
func Parse(f Format, tools []wire.Tool, text string, max int, cut bool) (content string, calls []wire.ToolCall) {
	content, p := parse(f, tools, text, max, cut)
	return content, p.Calls()
}

// Regions is where a whole answer's call markup lies, for repairing a
// call: Calls[i] began at Starts[i] in the answer (the start of its
// region of markup, with the whitespace before it), and the first region
// of markup that turned out not to be a call (given back as content)
// began at Failed, -1 when none did.
type Regions struct {
	Content string
	Calls   []wire.ToolCall
	Starts  []int
	Failed  int
}

// ParseRegions is Parse, with where the calls and the first failed
// region began, in text's offsets (framing a parser takes out included);
// ok is false for a format whose parser does not keep them.
func ParseRegions(f Format, tools []wire.Tool, text string, max int, cut bool) (r Regions, ok bool) {
	content, p := parse(f, tools, text, max, cut)
	sp, ok := p.(interface{ spans() ([]int, int) })
	if !ok {
		return Regions{Content: content, Calls: p.Calls(), Failed: -1}, false
	}
	starts, failed := sp.spans()
	return Regions{Content: content, Calls: p.Calls(), Starts: starts, Failed: failed}, true
}

// Failed reports whether a region of markup p read turned out not to be
// a call (and was given back as content); false for a format whose
// parser does not keep where its regions began (see ParseRegions).
func Failed(p Parser) bool {
	sp, ok := p.(interface{ spans() ([]int, int) })
	if !ok {
		return false
	}
	_, failed := sp.spans()
	return failed >= 0
}

// parse is Parse, giving the parser that read the answer.
func parse(f Format, tools []wire.Tool, text string, max int, cut bool) (string, Parser) {
	p := f.Parser(tools, max)
	if cut {
		p.Cut()
	}
	var ds []wire.Delta
	if w, ok := p.(interface{ whole(string) []wire.Delta }); ok {
		ds = w.whole(text)
	} else {
		ds = p.Push(text)
	}
	var b strings.Builder
	for _, d := range append(ds, p.Finish()...) {
		b.WriteString(d.Text())
	}
	return b.String(), p
}

// newCallID returns a call id in OpenAI's form: "call_" and 24 letters
// and digits.
func newCallID() string {
	const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 24)
	rand.Read(b)
	for i := range b {
		b[i] = chars[int(b[i])%len(chars)]
	}
	return "call_" + string(b)
}

// heldBack is how much of rest, the end of the answer so far, a parser
// holds back as the start of one of markers: before the answer's end,
// what may begin a marker as more arrives; at the end of an answer cut
// off, the marker it cut, which is dropped; at an answer's natural end,
// nothing. A cut that split one of the marker's characters ends the text
// with U+FFFD, which the engine writes in place of the character's first
// bytes: held back too, until the end says whether it was that.
func heldBack(rest string, markers []string, end, cut bool) int {
	if end && !cut {
		return 0
	}
	if s, ok := strings.CutSuffix(rest, "\uFFFD"); ok {
		for _, m := range markers {
			for n := min(len(m)-1, len(s)); n > 0; n-- {
				if m[n] >= utf8.RuneSelf && strings.HasSuffix(s, m[:n]) {
					return n + len("\uFFFD")
				}
			}
		}
	}
	return heldPrefix(rest, markers)
}

// heldPrefix is the length of the longest suffix of s that begins one of
// markers: text that cannot be sent until more arrives.
func heldPrefix(s string, markers []string) int {
	held := 0
	for _, m := range markers {
		for n := min(len(m)-1, len(s)); n > held; n-- {
			if strings.HasSuffix(s, m[:n]) {
				held = n
				break
			}
		}
	}
	return held
}
