// Package reasoning splits the reasoning that models write before their
// answer ("thinking") from the answer itself, each model family in its
// own markup.
//
// A Format is one family's markup: its Splitter reads an answer as it
// arrives and gives the reasoning and the content apart, the markers in
// neither; Start and End are the markers that open and close the
// reasoning, Close what ends it when the model is made to stop (a
// reasoning budget spent, a forced grammar); Markers are the markup the
// model writes as special tokens, which the engine must output as text.
// Detect picks the format a chat template implies, by the markup it
// writes; Opened tells whether a rendered prompt already opened the
// reasoning, as templates that start the answer inside it do.
//
// Adding a family: a file with a value implementing Format, its entry in
// families (where Detect tries it), and its splitter table in the tests.
package reasoning

import (
	"fmt"
	"strings"
	"unicode"
)

// Format is how a model family writes its reasoning.
type Format interface {
	// Name is the format's name, as --reasoning-format takes it.
	Name() string
	// Start is the text that opens the reasoning.
	Start() string
	// End is the text that closes it, as the model writes it.
	End() string
	// Close is the text that ends an open reasoning and starts the
	// answer, written for the model when it must stop reasoning: End,
	// and what the model writes after it.
	Close() string
	// Markers are the markup the model writes, which it may write as
	// special tokens: the engine must output their text.
	Markers() []string
	// Splitter returns a splitter for one answer; opened says the prompt
	// opened the reasoning (see Opened), so the answer starts inside it.
	Splitter(opened bool) Splitter
}

// Splitter splits one answer, as it arrives, into reasoning and content.
// Text that may still be a marker is held back until it is decided, so
// that markers reach neither part and the reasoning never reaches the
// content. The whitespace around the reasoning is dropped.
//
// A Splitter belongs to one goroutine.
type Splitter interface {
	// Push adds text to the answer and returns what is decided of it.
	Push(text string) (reasoning, content string)
	// Finish ends the answer and returns what was held.
	Finish() (reasoning, content string)
}

// family is a format and how Detect recognises its templates.
type family struct {
	format Format
	is     func(templateSource string) bool
}

// families are the formats Detect tries, in order.
var families = []family{
	{Harmony, isHarmony},
	{Gemma4, isGemma4},
	{Seed, isSeed},
	{Magistral, isMagistral},
	{KimiK3, isKimiK3},
	{MiniMaxM3, isMiniMaxM3},
	{Hy3, isHy3},
	{Apertus, isApertus},
	{SolarOpen, isSolarOpen},
	{Granite, isGranite},
	{CommandR7B, isCommandR7B},
	{Apriel, isApriel},
	{Think, isThink},
}

// Detect returns the reasoning format a chat template source implies, by
// the markup it writes (for the reasoning of earlier turns, or to open
// the answer's); nil when it writes none that corral knows.
func Detect(templateSource string) Format {
	for _, f := range families {
		if f.is(templateSource) {
			return f.format
		}
	}
	return nil
}

// Names lists the formats' names.
func Names() []string {
	out := make([]string, len(families))
	for i, f := range families {
		out[i] = f.format.Name()
	}
	return out
}

// Lookup returns the format with the given name.
func Lookup(name string) (Format, error) {
	for _, f := range families {
		if f.format.Name() == name {
			return f.format, nil
		}
	}
	return nil, fmt.Errorf("unknown reasoning format %q (known: %s)", name, strings.Join(Names(), ", "))
}

// Opened reports whether a rendered prompt ends inside f's reasoning:
// with its start marker (and whitespace), as templates that make the
// model think (DeepSeek R1, QwQ, Qwen3.5 and later) end their generation
// prompt. The answer then starts inside the reasoning.
func Opened(f Format, prompt string) bool {
	return strings.HasSuffix(strings.TrimRightFunc(prompt, unicode.IsSpace), f.Start())
}

// Split splits a whole answer as f's Splitter fed it in pieces would.
func Split(f Format, opened bool, text string) (reasoning, content string) {
	s := f.Splitter(opened)
	r1, c1 := s.Push(text)
	r2, c2 := s.Finish()
	return r1 + r2, c1 + c2
}

// heldPrefix is the length of the longest suffix of s that begins one of
// markers: text that cannot be decided until more arrives.
func heldPrefix(s string, markers ...string) int {
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
