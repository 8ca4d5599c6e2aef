package grammar

import (
	"math"
	"strconv"
	"strings"
)

// maxInt is the largest integer the "integer" rule can write (16 digits).
const maxInt = 9999999999999999

// integer returns an expression for JSON integers matching the minimum and
// maximum of s, written without leading zeros.
func (c *converter) integer(s *schema) (*expr, error) {
	if s.minimum == nil && s.maximum == nil {
		return ref("integer"), nil
	}
	lo, hi := int64(-maxInt), int64(maxInt)
	if b := s.minimum; b != nil {
		f := math.Ceil(b.v)
		if b.exclusive && f == b.v {
			f++
		}
		lo = int64(math.Max(math.Min(f, maxInt+1), -maxInt))
	}
	if b := s.maximum; b != nil {
		f := math.Floor(b.v)
		if b.exclusive && f == b.v {
			f--
		}
		hi = int64(math.Min(math.Max(f, -maxInt-1), maxInt))
	}
	if lo > hi {
		return nil, invalid(s.ptr, "no integer with at most 16 digits lies between minimum and maximum")
	}
	return seq(intRange(lo, hi), c.g.space()), nil
}

// intRange matches the integers from lo to hi.
func intRange(lo, hi int64) *expr {
	switch {
	case hi < 0:
		return seq(lit("-"), natRange(-hi, -lo))
	case lo < 0:
		return alt(seq(lit("-"), natRange(1, -lo)), natRange(0, hi))
	}
	return natRange(lo, hi)
}

// natRange matches the integers from lo to hi, both non-negative, one
// alternative per number of digits.
func natRange(lo, hi int64) *expr {
	var alts []*expr
	for d := len(strconv.FormatInt(lo, 10)); d <= len(strconv.FormatInt(hi, 10)); d++ {
		first, last := int64(0), int64(9)
		if d > 1 {
			first = int64(math.Pow10(d - 1))
			last = first*10 - 1
		}
		alts = append(alts, digitRange(strconv.FormatInt(max(lo, first), 10), strconv.FormatInt(min(hi, last), 10)))
	}
	return alt(alts...)
}

// digitRange matches the digit strings from a to b, which have equal length.
func digitRange(a, b string) *expr {
	i := 0
	for i < len(a) && a[i] == b[i] {
		i++
	}
	if i == len(a) {
		return lit(a)
	}
	prefix, a, b := lit(a[:i]), a[i:], b[i:]
	n := len(a) - 1
	if n == 0 {
		return seq(prefix, digits(a[0], b[0]))
	}
	zeros, nines := strings.Repeat("0", n), strings.Repeat("9", n)
	var alts []*expr
	low, high := a[0], b[0]
	if a[1:] != zeros { // a[0] followed by at least a[1:]
		alts = append(alts, seq(lit(a[:1]), digitRange(a[1:], nines)))
		low++
	}
	var top *expr
	if b[1:] != nines { // b[0] followed by at most b[1:]
		top = seq(lit(b[:1]), digitRange(zeros, b[1:]))
		high--
	}
	if low <= high {
		alts = append(alts, seq(digits(low, high), rep(digit, n, n)))
	}
	if top != nil {
		alts = append(alts, top)
	}
	return seq(prefix, alt(alts...))
}

// digits matches one digit from lo to hi.
func digits(lo, hi byte) *expr {
	if lo == hi {
		return lit(string(lo))
	}
	return class(runeRange{rune(lo), rune(hi)})
}
