package grammar

// formats are the string formats with a grammar of their own; other formats
// are plain strings.
var formats = map[string]bool{"date": true, "time": true, "date-time": true, "uuid": true}

// str returns an expression for JSON strings matching s. A pattern takes
// precedence over a format, and both over minLength and maxLength.
func (c *converter) str(s *schema) (*expr, error) {
	if s.pattern != "" {
		e, err := patternExpr(s.pattern)
		if err != nil {
			return nil, invalid(s.ptr.child("pattern"), "%v", err)
		}
		return seq(quote, e, quote, c.g.space()), nil
	}
	if formats[s.format] {
		return ref(s.format), nil
	}
	if s.minLength == 0 && s.maxLength < 0 {
		return ref("string"), nil
	}
	return seq(quote, rep(ref("char"), s.minLength, s.maxLength), quote, c.g.space()), nil
}
