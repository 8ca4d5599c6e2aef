package engine

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// Defaults for the zero fields of Chunking.
	defaultFirstMinTokens = 10
	defaultFirstMaxTokens = 24
	defaultMaxChars       = 300

	chunkSpaces       = " \t\n\r\v\f" // whitespace that separates sentences
	strongTerminators = "!?！？"        // end a sentence whatever follows
	cjkTerminators    = "。！？"         // end one without whitespace after
)

// abbreviations are words, lower case without their final ".", whose "."
// does not end a sentence.
var abbreviations = map[string]bool{
	"mr": true, "mrs": true, "ms": true, "dr": true, "prof": true, "sr": true, "jr": true,
	"st": true, "vs": true, "fig": true, "approx": true, "dept": true, "est": true, "inc": true,
	"ltd": true, "co": true, "mt": true, "e.g": true, "i.e": true, "a.m": true, "p.m": true,
}

// chunker cuts a paced request's text into sentence-sized chunks (see
// Chunking). The scheduler pushes each token's text, calls next after every
// push and flush at the end of generation; the chunks it gets, joined,
// are exactly the text pushed. A boundary is decided with the least
// look-ahead that tells it apart: the first non-space character after it.
type chunker struct {
	minTok, maxTok, maxChars int

	buf       string // text pushed and not yet returned
	ends      []int  // where in buf each pending token's text ends, ascending
	pos       int    // buf[:pos] holds no boundary, decided or pending
	first     bool   // the first chunk is not out yet: its bounds apply
	lineStart bool   // buf begins a line
}

// newChunker returns a chunker for c, its zero fields set to the defaults.
func newChunker(c Chunking) *chunker {
	ch := &chunker{minTok: c.FirstMinTokens, maxTok: c.FirstMaxTokens, maxChars: c.MaxChars}
	if ch.minTok <= 0 {
		ch.minTok = defaultFirstMinTokens
	}
	if ch.maxTok <= 0 {
		ch.maxTok = defaultFirstMaxTokens
	}
	if ch.maxChars <= 0 {
		ch.maxChars = defaultMaxChars
	}
	ch.minTok = min(ch.minTok, ch.maxTok)
	ch.reset()
	return ch
}

// reset forgets all text, as before the first push.
func (c *chunker) reset() {
	c.buf, c.ends, c.pos = "", c.ends[:0], 0
	c.first, c.lineStart = true, true
}

// push appends the text that ntok tokens produced; ntok may be 0.
func (c *chunker) push(text string, ntok int) {
	c.buf += text
	for range ntok {
		c.ends = append(c.ends, len(c.buf))
	}
}

// next returns the next complete chunk, and the number of tokens it covers,
// once the text pushed holds a decided boundary or has outgrown the bounds
// of Chunking. The chunk is never empty nor only whitespace. ok is false
// when no chunk is complete yet.
func (c *chunker) next() (text string, ntok int, ok bool) {
	cut := c.scan()
	limit := -1
	if c.first && len(c.ends) >= c.maxTok {
		limit = c.ends[c.maxTok-1]
	}
	if len(c.buf) >= c.maxChars && (limit < 0 || c.maxChars < limit) {
		limit = c.maxChars
	}
	if limit >= 0 && (cut < 0 || cut > limit) {
		if f := forcedCut(c.buf, limit); f > 0 && (cut < 0 || f < cut) {
			cut = f
		}
	}
	if cut <= 0 {
		return "", 0, false
	}
	text, ntok = c.buf[:cut], c.tokensAt(cut)
	c.buf = c.buf[cut:]
	c.ends = c.ends[:copy(c.ends, c.ends[ntok:])]
	for i := range c.ends {
		c.ends[i] -= cut
	}
	c.pos, c.first, c.lineStart = 0, false, strings.HasSuffix(text, "\n")
	return text, ntok, true
}

// flush returns all the text left and the tokens it covers, at the end of
// generation, and resets the chunker.
func (c *chunker) flush() (text string, ntok int) {
	text, ntok = c.buf, len(c.ends)
	c.reset()
	return text, ntok
}

// tokensAt is how many pending tokens' text ends at or before byte p.
func (c *chunker) tokensAt(p int) int {
	n, _ := slices.BinarySearch(c.ends, p+1)
	return n
}

// enough reports whether a chunk cut at p may end there: the first chunk
// needs minTok tokens.
func (c *chunker) enough(p int) bool { return !c.first || c.tokensAt(p) >= c.minTok }

// scan returns the first decided boundary in buf that the chunk may end at,
// or -1. It resumes where the last scan stopped: at the end of buf or at a
// candidate that the text after it did not decide yet.
func (c *chunker) scan() int {
	s := c.buf
	for i := c.pos; i < len(s); {
		c.pos = i
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '\n':
			// The chunk ends after the newlines of this whitespace run.
			k := endOfSpace(s, i)
			if k == len(s) {
				return -1
			}
			if p := i + strings.LastIndexByte(s[i:k], '\n') + 1; notBlank(s[:p]) && c.enough(p) {
				return p
			}
			i = k
		case isTerminator(r):
			p, resume, decided := c.sentenceEnd(s, i)
			if !decided {
				return -1
			}
			if p > 0 && c.enough(p) {
				return p
			}
			i = resume
		default:
			i += size
		}
	}
	c.pos = len(s)
	return -1
}

// sentenceEnd looks at the run of terminators at s[i]. It returns the
// boundary after the run and its closing quotes or brackets, or -1 when
// the run ends no sentence; where to scan on; and whether the text that
// follows suffices to decide.
func (c *chunker) sentenceEnd(s string, i int) (p, resume int, decided bool) {
	j, cjk := i, false
	for j < len(s) {
		r, size := utf8.DecodeRuneInString(s[j:])
		if !isTerminator(r) {
			break
		}
		cjk = strings.ContainsRune(cjkTerminators, r)
		j += size
	}
	run := s[i:j]
	for j < len(s) {
		r, size := utf8.DecodeRuneInString(s[j:])
		if !isCloser(r) {
			break
		}
		j += size
	}
	k := endOfSpace(s, j)
	switch {
	case k == len(s):
		return -1, i, false
	case strings.Contains(s[j:k], "\n"): // the newline ends the chunk
		return -1, j, true
	case cjk || strings.ContainsAny(run, strongTerminators):
		return j, j, true
	case k == j: // 3.5, e.g., example.com
		return -1, j, true
	}
	next, _ := utf8.DecodeRuneInString(s[k:])
	if unicode.IsLower(next) || run == "." && c.keepsDot(s, i, next) {
		return -1, j, true
	}
	return j, j, true
}

// keepsDot reports whether the "." at s[i] ends an abbreviation, an
// initial or a list number at the start of a line rather than a sentence;
// next is the first character after the whitespace that follows it.
func (c *chunker) keepsDot(s string, i int, next rune) bool {
	start := strings.LastIndexAny(s[:i], chunkSpaces) + 1
	word := s[start:i]
	if word != "" && strings.Trim(word, "0123456789") == "" {
		nl := strings.LastIndexByte(s[:start], '\n')
		return (nl >= 0 || c.lineStart) && !notBlank(s[nl+1:start])
	}
	word = strings.TrimLeftFunc(word, unicode.IsPunct)
	if r, n := utf8.DecodeRuneInString(word); n == len(word) && unicode.IsUpper(r) && r != 'I' {
		return true // an initial, as in "J. K. Rowling"; "I." ends sentences
	}
	word = strings.ToLower(word)
	if word == "no" {
		return unicode.IsDigit(next) // "No. 5", but "The answer is no."
	}
	return abbreviations[word]
}

// forcedCut is where to cut s, which outgrew its bounds, at most at byte
// limit: before the last whitespace run that starts at or before limit,
// else at limit (down to a character boundary), else, when s[:limit] is
// blank, after all of s. It is -1 when s is blank.
func forcedCut(s string, limit int) int {
	limit = min(limit, len(s))
	for limit > 0 && limit < len(s) && !utf8.RuneStart(s[limit]) {
		limit--
	}
	if i := strings.LastIndexAny(s[:min(limit+1, len(s))], chunkSpaces); i >= 0 {
		for i > 0 && strings.IndexByte(chunkSpaces, s[i-1]) >= 0 {
			i--
		}
		if notBlank(s[:i]) {
			return i
		}
	}
	if notBlank(s[:limit]) {
		return limit
	}
	if notBlank(s) {
		return len(s)
	}
	return -1
}

// endOfSpace is the end of the whitespace run at s[i].
func endOfSpace(s string, i int) int {
	for i < len(s) && strings.IndexByte(chunkSpaces, s[i]) >= 0 {
		i++
	}
	return i
}

// notBlank reports whether s has something other than whitespace.
func notBlank(s string) bool { return strings.TrimLeft(s, chunkSpaces) != "" }

// isTerminator reports whether r ends a sentence.
func isTerminator(r rune) bool { return strings.ContainsRune(".!?…。！？", r) }

// isCloser reports whether r closes a quote or bracket.
func isCloser(r rune) bool { return strings.ContainsRune("\"'”’)]}»」』", r) }
