package toolcall

import (
	"strings"

	"github.com/corral-llm/corral/grammar"
)

// GLM is the format of GLM 4.5 and later: each call in <tool_call> tags,
// the function's name first, then a key and a value element per
// argument, the value as text:
//
//	<tool_call>get_weather
//	<arg_key>city</arg_key>
//	<arg_value>Paris</arg_value>
//	<arg_key>days</arg_key>
//	<arg_value>3</arg_value>
//	</tool_call>
//
// GLM 4.5 and 4.6 write the line breaks, GLM 4.7 none
// (<tool_call>get_time<arg_key>...); Poolside's Laguna writes it too. A
// value is typed by its parameter's schema, as Qwen3Coder's are: a string
// stays the text, anything else is read as JSON.
var GLM Format = &xmlCall{
	name:    "glm",
	markers: []string{glmOpen, glmClose, glmKey, glmKeyEnd, glmValue, glmValueEnd},
	opens:   []string{glmOpen}, head: glmName, callEnd: glmClose,
	param: glmKey, key: glmKeyName, valueTag: glmValue, paramEnd: glmValueEnd,
	endTagCut: true, endOptional: true,
	// The line breaks between the tags are optional, as GLM 4.6 writes
	// them and 4.7 does not.
	writeCall: func(name string, params []grammar.Expr) grammar.Expr {
		return grammar.Seq(grammar.Lit(glmOpen+name), glmBreak(), grammar.Seq(params...), grammar.Lit(glmClose))
	},
	writeParam: func(key string, _ []string, value grammar.Expr) grammar.Expr {
		return grammar.Seq(grammar.Lit(glmKey+key+glmKeyEnd), glmBreak(), grammar.Lit(glmValue), value, grammar.Lit(glmValueEnd), glmBreak())
	},
	sep:  glmBreak,
	stop: glmValueEnd,
}

// isGLM reports a template that writes <arg_key> inside <tool_call>.
func isGLM(src string) bool {
	return strings.Contains(src, "<tool_call>") && strings.Contains(src, "<arg_key>")
}

// GLM's markup.
const (
	glmOpen     = "<tool_call>"
	glmClose    = "</tool_call>"
	glmKey      = "<arg_key>"
	glmKeyEnd   = "</arg_key>"
	glmValue    = "<arg_value>"
	glmValueEnd = "</arg_value>"
)

// glmName reads the function's name at s[i:], up to the line break or
// the tag after it; a call without arguments whose closing tag a stop
// string took ends with it at the answer's end.
func glmName(s string, i int, ended bool) (name string, _ map[string]string, next, state int) {
	e := strings.IndexAny(s[i:], "<\n")
	if e < 0 {
		switch name := strings.TrimSpace(s[i:]); {
		case len(s)-i > maxNameLen:
			return "", nil, 0, readBad
		case ended && validName(name, maxNameLen):
			return name, nil, len(s), readDone
		}
		return "", nil, 0, readMore
	}
	name = strings.TrimSpace(s[i : i+e])
	if !validName(name, maxNameLen) {
		return "", nil, 0, readBad
	}
	return name, nil, i + e, readDone
}

// glmKeyName reads an argument's key at s[i:], after <arg_key>, and its
// closing tag.
func glmKeyName(s string, i int, _ bool) (key string, _ map[string]string, next, state int) {
	k := strings.Index(s[i:], glmKeyEnd)
	if k < 0 {
		if len(s)-i > maxNameLen {
			return "", nil, 0, readBad
		}
		return "", nil, 0, readMore
	}
	key = strings.TrimSpace(s[i : i+k])
	if key == "" || len(key) > maxNameLen || strings.ContainsAny(key, "<>") {
		return "", nil, 0, readBad
	}
	return key, nil, i + k + len(glmKeyEnd), readDone
}

// glmBreak is a line break the grammar makes optional.
func glmBreak() grammar.Expr { return grammar.Opt(grammar.Lit("\n")) }
