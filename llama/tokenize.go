package llama

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// Tokenization errors.
var (
	// ErrTokenize: the text has a character the vocabulary cannot encode
	// and the vocabulary has no unknown token to stand for it.
	ErrTokenize = errors.New("llama: tokenize failed")
	// ErrTooManyTokens: the text needs more than TokenizeOptions.MaxTokens
	// (a *TooManyTokensError, which has the counts, but for a text over
	// 1 GiB, which is not tokenized at all).
	ErrTooManyTokens = errors.New("llama: too many tokens")
)

// TooManyTokensError is the error of a text that needs more tokens than
// TokenizeOptions.MaxTokens: Tokens, its exact count, more than Max. It
// wraps ErrTooManyTokens.
type TooManyTokensError struct {
	Tokens, Max int
}

// Error names the counts.
func (e *TooManyTokensError) Error() string {
	return fmt.Sprintf("%v: %d tokens, at most %d", ErrTooManyTokens, e.Tokens, e.Max)
}

// Unwrap returns ErrTooManyTokens, for errors.Is.
func (e *TooManyTokensError) Unwrap() error { return ErrTooManyTokens }

// Span is a byte range [Start, End) of a text.
type Span struct{ Start, End int }

// TokenizeOptions control TokenizeText.
type TokenizeOptions struct {
	// AddSpecial adds BOS/EOS as the model's vocabulary wants.
	AddSpecial bool
	// ParseSpecial turns special-token text (e.g. "<|im_end|>") into the
	// special token instead of plain text.
	ParseSpecial bool
	// Plain are byte ranges, sorted and disjoint, tokenized as plain text
	// even when ParseSpecial is set: text a client wrote, inside a prompt
	// whose template markers must stay special.
	Plain []Span
	// MaxTokens bounds the result (0: no bound); more is a
	// *TooManyTokensError with the text's exact count, found without
	// allocating for all of its tokens.
	MaxTokens int
}

// Tokenize converts text to tokens (see TokenizeOptions for the flags).
func (m *Model) Tokenize(text string, addSpecial, parseSpecial bool) ([]Token, error) {
	return m.TokenizeText(text, TokenizeOptions{AddSpecial: addSpecial, ParseSpecial: parseSpecial})
}

// TokenizeText converts text to tokens. A character the vocabulary cannot
// encode (a SentencePiece vocabulary without byte fallback) becomes the
// unknown token, as SentencePiece itself does; llama.cpp would throw.
func (m *Model) TokenizeText(text string, o TokenizeOptions) ([]Token, error) {
	if len(text) > 1<<30 {
		return nil, fmt.Errorf("%w: text of %d bytes", ErrTooManyTokens, len(text))
	}
	if len(o.Plain) > 0 && (!o.ParseSpecial || !m.specialIn(text, o.Plain)) {
		o.Plain = nil // nothing to protect: llama.cpp's own path is the same
	}
	if len(o.Plain) == 0 {
		toks, err := m.tokenizeRaw(text, o.AddSpecial, o.ParseSpecial, o.MaxTokens)
		if !errors.Is(err, errUnencodable) {
			return toks, err
		}
	}
	return m.tokenizeFragments(text, o)
}

// errUnencodable is llama.cpp's exception for a character without a token.
var errUnencodable = errors.New("llama: character without a token")

// tokenizeRaw is one llama_tokenize call, with a buffer of at most
// maxTokens+1 tokens.
func (m *Model) tokenizeRaw(text string, addSpecial, parseSpecial bool, maxTokens int) ([]Token, error) {
	size := len(text) + 2 // a token covers at least one byte, plus BOS/EOS
	if maxTokens > 0 {
		size = min(size, maxTokens+1)
	}
	toks := make([]Token, size)
	n, err := m.tokenize(text, toks, addSpecial, parseSpecial)
	if err != nil {
		return nil, err
	}
	if n < 0 {
		if maxTokens > 0 && -n > maxTokens {
			// llama_tokenize counted them all: -n is the exact count.
			return nil, &TooManyTokensError{Tokens: -n, Max: maxTokens}
		}
		toks = make([]Token, -n)
		if n, err = m.tokenize(text, toks, addSpecial, parseSpecial); err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, fmt.Errorf("%w: llama_tokenize disagrees with itself on %d bytes", ErrTokenize, len(text))
		}
	}
	if maxTokens > 0 && n > maxTokens {
		return nil, &TooManyTokensError{Tokens: n, Max: maxTokens}
	}
	return toks[:n], nil
}

func (m *Model) tokenize(text string, toks []Token, addSpecial, parseSpecial bool) (int, error) {
	var ctext *C.char
	if len(text) > 0 {
		ctext = (*C.char)(unsafe.Pointer(unsafe.StringData(text)))
	}
	var failed C.int
	n := C.corral_tokenize(m.vocab, ctext, C.int32_t(len(text)), (*C.llama_token)(unsafe.Pointer(unsafe.SliceData(toks))),
		C.int32_t(len(toks)), C.bool(addSpecial), C.bool(parseSpecial), &failed)
	runtime.KeepAlive(text)
	runtime.KeepAlive(toks)
	if failed != 0 {
		return 0, errUnencodable
	}
	if n == C.INT32_MIN {
		return 0, fmt.Errorf("%w: %d bytes of text overflow the token count", ErrTokenize, len(text))
	}
	return int(n), nil
}

// fragment is a piece of text to tokenize: raw text, or one special token.
type fragment struct {
	text  string
	tok   Token // >= 0 for a special token
	plain bool  // raw text that special-token text must not be found in
	// lstrip and rstrip, for a special token, drop the whitespace before
	// and after it, as llama.cpp does for tokens with those attributes.
	lstrip, rstrip bool
}

// tokenizeFragments does what llama_tokenize does, in Go: split the text at
// special-token text (longest tokens first, outside the Plain spans), then
// tokenize each run of raw text on its own. Doing it here lets client text
// stay plain and lets an unencodable character become the unknown token.
func (m *Model) tokenizeFragments(text string, o TokenizeOptions) ([]Token, error) {
	m.specialsOnce.Do(m.loadSpecials)
	frags, err := splitPlain(text, o.Plain)
	if err != nil {
		return nil, err
	}
	if o.ParseSpecial {
		for _, sp := range m.specials {
			frags = splitSpecial(frags, sp)
		}
		stripAround(frags)
	}
	// Past MaxTokens the tokens are only counted, for the error's exact
	// count: memory stays within MaxTokens and one run of text.
	var out []Token
	n := 0
	add := func(toks ...Token) {
		n += len(toks)
		if o.MaxTokens <= 0 || n <= o.MaxTokens {
			out = append(out, toks...)
		}
	}
	if o.AddSpecial {
		add(m.first...)
	}
	for i := 0; i < len(frags); {
		if frags[i].tok >= 0 {
			add(frags[i].tok)
			i++
			continue
		}
		// Adjacent raw fragments, plain or not, are one run of text.
		var run strings.Builder
		for ; i < len(frags) && frags[i].tok < 0; i++ {
			run.WriteString(frags[i].text)
		}
		toks, err := m.tokenizeRun(run.String())
		if err != nil {
			return nil, err
		}
		add(toks...)
	}
	if o.AddSpecial {
		add(m.last...)
	}
	if o.MaxTokens > 0 && n > o.MaxTokens {
		return nil, &TooManyTokensError{Tokens: n, Max: o.MaxTokens}
	}
	return out, nil
}

// tokenizeRun tokenizes raw text without special tokens. Characters the
// vocabulary cannot encode become the unknown token; without one, the error
// names the first such character.
func (m *Model) tokenizeRun(text string) ([]Token, error) {
	toks, err := m.tokenizeRaw(text, false, false, 0)
	if !errors.Is(err, errUnencodable) {
		return toks, err
	}
	var out []Token
	start := 0
	flush := func(end int) error {
		if end > start {
			t, err := m.tokenizeRaw(text[start:end], false, false, 0)
			if err != nil {
				return fmt.Errorf("%w: text at byte %d cannot be encoded", ErrTokenize, start)
			}
			out = append(out, t...)
		}
		return nil
	}
	for i, r := range text {
		if m.canEncode(r) {
			continue
		}
		if m.unk < 0 {
			return nil, fmt.Errorf("%w: the vocabulary cannot encode %q (byte %d) and has no unknown token", ErrTokenize, r, i)
		}
		if err := flush(i); err != nil {
			return nil, err
		}
		out = append(out, m.unk)
		start = i + utf8.RuneLen(r)
		if r == utf8.RuneError {
			start = i + 1
		}
	}
	if err := flush(len(text)); err != nil {
		return nil, err
	}
	return out, nil
}

// canEncode reports whether the vocabulary can tokenize r on its own.
func (m *Model) canEncode(r rune) bool {
	if v, ok := m.encodable.Load(r); ok {
		return v.(bool)
	}
	var buf [8]Token
	_, err := m.tokenize(string(r), buf[:], false, false)
	ok := err == nil
	m.encodable.Store(r, ok)
	return ok
}

// specialIn reports whether any span of text holds special-token text.
// It runs on every chat prompt, so it reads each span once and tries the
// specials only where one of their first bytes occurs.
func (m *Model) specialIn(text string, spans []Span) bool {
	m.specialsOnce.Do(m.loadSpecials)
	for _, sp := range spans {
		if sp.Start < 0 || sp.End > len(text) || sp.Start > sp.End {
			return true // let splitPlain report it
		}
		span := text[sp.Start:sp.End]
		for i := 0; i < len(span); i++ {
			if !m.firstBytes[span[i]] {
				continue
			}
			for _, s := range m.specials {
				if strings.HasPrefix(span[i:], s.text) {
					return true
				}
			}
		}
	}
	return false
}

// special is a control or unknown token and its text.
type special struct {
	id             Token
	text           string
	lstrip, rstrip bool // the LSTRIP and RSTRIP attributes
}

// loadSpecials lists the tokens llama.cpp parses out of text when asked to
// parse special tokens, longest text first as llama.cpp tries them.
func (m *Model) loadSpecials() {
	m.unk = -1
	n := m.NVocab()
	for id := range Token(n) {
		attr := C.llama_vocab_get_attr(m.vocab, C.llama_token(id))
		if attr&C.LLAMA_TOKEN_ATTR_UNKNOWN != 0 && m.unk < 0 {
			m.unk = id
		}
		if attr&(C.LLAMA_TOKEN_ATTR_CONTROL|C.LLAMA_TOKEN_ATTR_UNKNOWN) == 0 {
			continue
		}
		if text := C.GoString(C.llama_vocab_get_text(m.vocab, C.llama_token(id))); text != "" {
			m.specials = append(m.specials, special{id, text,
				attr&C.LLAMA_TOKEN_ATTR_LSTRIP != 0, attr&C.LLAMA_TOKEN_ATTR_RSTRIP != 0})
			m.firstBytes[text[0]] = true
		}
	}
	slices.SortStableFunc(m.specials, func(a, b special) int { return len(b.text) - len(a.text) })
	m.first, m.last = m.specialEnds()
	if m.unk >= 0 {
		return
	}
	// Some converted vocabularies mark <unk> as a control token; fall back
	// to the id the GGUF names, then to a token spelled "<unk>".
	if v, ok := m.Meta("tokenizer.ggml.unknown_token_id"); ok {
		if id, err := strconv.Atoi(v); err == nil && id >= 0 && id < n {
			m.unk = Token(id)
			return
		}
	}
	for _, sp := range m.specials {
		if sp.text == "<unk>" {
			m.unk = sp.id
			return
		}
	}
}

// splitPlain cuts text into fragments at the plain spans.
func splitPlain(text string, spans []Span) ([]fragment, error) {
	var frags []fragment
	at := 0
	for _, sp := range spans {
		if sp.Start < at || sp.End < sp.Start || sp.End > len(text) {
			return nil, fmt.Errorf("llama: plain span [%d, %d) out of order or outside %d bytes", sp.Start, sp.End, len(text))
		}
		if sp.Start > at {
			frags = append(frags, fragment{text: text[at:sp.Start], tok: -1})
		}
		if sp.End > sp.Start {
			frags = append(frags, fragment{text: text[sp.Start:sp.End], tok: -1, plain: true})
		}
		at = sp.End
	}
	if at < len(text) {
		frags = append(frags, fragment{text: text[at:], tok: -1})
	}
	return frags, nil
}

// splitSpecial cuts every occurrence of sp's text out of the raw fragments
// that are not plain.
func splitSpecial(frags []fragment, sp special) []fragment {
	var out []fragment
	for _, f := range frags {
		if f.tok >= 0 || f.plain || !strings.Contains(f.text, sp.text) {
			out = append(out, f)
			continue
		}
		rest := f.text
		for {
			i := strings.Index(rest, sp.text)
			if i < 0 {
				break
			}
			if i > 0 {
				out = append(out, fragment{text: rest[:i], tok: -1})
			}
			out = append(out, fragment{tok: sp.id, lstrip: sp.lstrip, rstrip: sp.rstrip})
			rest = rest[i+len(sp.text):]
		}
		if rest != "" {
			out = append(out, fragment{text: rest, tok: -1})
		}
	}
	return out
}

// stripAround drops the whitespace that special tokens with the LSTRIP or
// RSTRIP attribute take away on their left or right (Phi-3's markers drop
// the newline after them). As in llama.cpp, which strips within one piece
// of text, the whitespace goes up to the next non-space or special token,
// across the fragments (plain or not) that make up that piece here.
func stripAround(frags []fragment) {
	for i, f := range frags {
		if f.tok < 0 {
			continue
		}
		for j := i + 1; f.rstrip && j < len(frags) && frags[j].tok < 0; j++ {
			frags[j].text = strings.TrimLeft(frags[j].text, cSpace)
			if frags[j].text != "" {
				break
			}
		}
		for j := i - 1; f.lstrip && j >= 0 && frags[j].tok < 0; j-- {
			frags[j].text = strings.TrimRight(frags[j].text, cSpace)
			if frags[j].text != "" {
				break
			}
		}
	}
}

// cSpace are the bytes C's isspace matches, which llama.cpp strips.
const cSpace = " \t\n\v\f\r"

// specialEnds returns the tokens llama_tokenize puts before and after the
// text when asked to add special tokens: for WordPiece (BERT) the BOS
// (classifier) and separator tokens always, for RWKV and PLaMo-2 none, for
// the others BOS and EOS as the vocabulary's add_bos and add_eos say.
func (m *Model) specialEnds() (first, last []Token) {
	switch C.llama_vocab_type(m.vocab) {
	case C.LLAMA_VOCAB_TYPE_WPM:
		if bos := m.BOS(); bos >= 0 {
			first = []Token{bos}
		}
		if sep := Token(C.llama_vocab_sep(m.vocab)); sep >= 0 {
			last = []Token{sep}
		}
	case C.LLAMA_VOCAB_TYPE_RWKV, C.LLAMA_VOCAB_TYPE_PLAMO2:
	default:
		if bos := m.BOS(); m.AddBOS() && bos >= 0 {
			first = []Token{bos}
		}
		if eos := m.EOS(); bool(C.llama_vocab_get_add_eos(m.vocab)) && eos >= 0 {
			last = []Token{eos}
		}
	}
	return first, last
}
