package engine

import (
	"strings"
	"unicode/utf8"
)

// textOut turns generated token bytes into text that is safe to deliver:
// complete UTF-8 only, and never text that might still turn into a stop
// string (that part is held back until the next token decides).
type textOut struct {
	stops []string
	raw   []byte // token bytes not yet valid UTF-8 (a split multibyte char)
	held  string // decoded text that may be the start of a stop string
}

// push adds one token's bytes. It returns the text ready for delivery and,
// if a stop string matched, which one (text after the match is dropped).
func (t *textOut) push(piece []byte) (ready string, stop string) {
	t.raw = append(t.raw, piece...)
	n := completeUTF8(t.raw)
	if n == 0 {
		return "", ""
	}
	t.held += string(t.raw[:n])
	t.raw = append(t.raw[:0], t.raw[n:]...)

	// A full match anywhere in the held text ends generation.
	best, bestAt := "", -1
	for _, s := range t.stops {
		if i := strings.Index(t.held, s); i >= 0 && (bestAt < 0 || i < bestAt) {
			best, bestAt = s, i
		}
	}
	if bestAt >= 0 {
		ready = t.held[:bestAt]
		t.held = ""
		return ready, best
	}
	// Hold back the longest suffix that is a prefix of some stop string.
	keep := 0
	for _, s := range t.stops {
		if k := partialSuffix(t.held, s); k > keep {
			keep = k
		}
	}
	ready = t.held[:len(t.held)-keep]
	t.held = t.held[len(t.held)-keep:]
	return ready, ""
}

// holding reports whether text is held back: a possible stop string's
// start or a split character.
func (t *textOut) holding() bool { return t.held != "" || len(t.raw) > 0 }

// flush returns everything still held, at the end of generation. Invalid
// trailing bytes become U+FFFD.
func (t *textOut) flush() string {
	s := t.held + strings.ToValidUTF8(string(t.raw), "\uFFFD")
	t.held, t.raw = "", t.raw[:0]
	return s
}

// completeUTF8 is the length of the longest prefix of b that does not end
// inside a multibyte UTF-8 sequence. Invalid bytes count as complete.
func completeUTF8(b []byte) int {
	// Look back at most 3 bytes for the start of an unfinished sequence.
	for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
		c := b[i]
		if c < utf8.RuneSelf {
			return len(b) // ASCII: everything before is complete
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			return len(b)
		}
	}
	return len(b)
}

// partialSuffix is the length of the longest proper suffix of s that is a
// prefix of stop.
func partialSuffix(s, stop string) int {
	max := len(stop) - 1
	if max > len(s) {
		max = len(s)
	}
	for k := max; k > 0; k-- {
		if strings.HasSuffix(s, stop[:k]) {
			return k
		}
	}
	return 0
}

// commonPrefix is the number of leading tokens a and b share, short of
// a medium's chunk that only one of them holds whole (see snapMedia).
func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			n = i
			break
		}
	}
	return snapMedia(a, snapMedia(b, n))
}

// logprobQueue holds the logprobs entries of the tokens pushed into a
// textOut whose text has not been released yet: an entry goes out with
// its token's first released byte (see TokenLogprobs).
type logprobQueue struct {
	pending  []TokenLogprobs
	starts   []int           // byte offset of each pending token's text in the output
	out      []TokenLogprobs // release's result, reused
	pushed   int             // bytes pushed
	released int             // bytes released
}

// add queues the entry of a token of n bytes, pushed after those before.
func (q *logprobQueue) add(e TokenLogprobs, n int) {
	q.pending = append(q.pending, e)
	q.starts = append(q.starts, q.pushed)
	q.pushed += n
}

// release returns the entries of the tokens whose text begins within the
// first released+n bytes, after n more bytes were released. With cut (a
// stop string matched, and nothing after those bytes will be released)
// the rest are dropped; with all (the end of the text), every entry goes
// out. The result is valid until the next call.
func (q *logprobQueue) release(n int, cut, all bool) []TokenLogprobs {
	q.released += n
	k := 0
	for k < len(q.starts) && (all || q.starts[k] < q.released) {
		k++
	}
	clear(q.out)
	q.out = append(q.out[:0], q.pending[:k]...)
	if cut || all {
		k = len(q.pending)
	}
	rest := copy(q.pending, q.pending[k:])
	clear(q.pending[rest:])
	q.pending = q.pending[:rest]
	q.starts = q.starts[:copy(q.starts, q.starts[k:])]
	return q.out
}
