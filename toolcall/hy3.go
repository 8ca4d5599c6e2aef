package toolcall

import (
	"strings"

	"github.com/corral-llm/corral/grammar"
)

// Tencent Hy3's markup: tags that end in its template's suffix,
// ":opensource" (special tokens of its vocabulary).
const (
	hy3CallsOpen  = "<tool_calls:opensource>"
	hy3CallsClose = "</tool_calls:opensource>"
	hy3CallOpen   = "<tool_call:opensource>"
	hy3CallClose  = "</tool_call:opensource>"
	hy3Sep        = "<tool_sep:opensource>"
	hy3KeyOpen    = "<arg_key:opensource>"
	hy3KeyClose   = "</arg_key:opensource>"
	hy3ValueOpen  = "<arg_value:opensource>"
	hy3ValueClose = "</arg_value:opensource>"
)

// Hy3 is Tencent Hy3's format: a block of calls, each the function's
// name, a separator, then each argument as a key and a value, the value
// as text (a string) or JSON (anything else: typed by the parameter's
// schema):
//
//	<tool_calls:opensource>
//	<tool_call:opensource>get_weather<tool_sep:opensource>
//	<arg_key:opensource>city</arg_key:opensource>
//	<arg_value:opensource>Paris</arg_value:opensource>
//	</tool_call:opensource>
//	</tool_calls:opensource>
var Hy3 Format = &xmlCall{
	name:    "hy3",
	markers: []string{hy3CallsOpen, hy3CallsClose, hy3CallOpen, hy3CallClose, hy3Sep, hy3KeyOpen, hy3KeyClose, hy3ValueOpen, hy3ValueClose},
	opens:   []string{hy3CallsOpen, hy3CallOpen}, call: hy3CallOpen, head: hy3Head, callEnd: hy3CallClose,
	listEnds: []string{hy3CallsClose},
	param:    hy3KeyOpen, key: hy3Key, valueTag: hy3ValueOpen, paramEnd: hy3ValueClose,
	writeCall: func(name string, params []grammar.Expr) grammar.Expr {
		return grammar.Seq(grammar.Lit(hy3CallOpen+name+hy3Sep+"\n"), grammar.Seq(params...), grammar.Lit(hy3CallClose+"\n"))
	},
	writeParam: func(key string, _ []string, value grammar.Expr) grammar.Expr {
		return grammar.Seq(grammar.Lit(hy3KeyOpen+key+hy3KeyClose+"\n"+hy3ValueOpen), value, grammar.Lit(hy3ValueClose+"\n"))
	},
	writeList: [2]string{hy3CallsOpen + "\n", hy3CallsClose},
	stop:      hy3ValueClose,
}

// isHy3 reports a template that writes Hy3's suffixed tags (it builds
// them with format(), so the source has "<arg_key{}>").
func isHy3(src string) bool {
	return strings.Contains(src, "<arg_key{}>") && strings.Contains(src, ":opensource")
}

// hy3Head reads a call's head at s[i:], after its tag: the function's
// name and the separator.
func hy3Head(s string, i int, _ bool) (name string, _ map[string]string, next, state int) {
	k := strings.Index(s[i:], hy3Sep)
	switch {
	case k < 0 && len(s)-i > dsMaxHead:
		return "", nil, 0, readBad
	case k < 0:
		return "", nil, 0, readMore
	}
	name = strings.TrimSpace(s[i : i+k])
	if !validHead(name) {
		return "", nil, 0, readBad
	}
	return name, nil, i + k + len(hy3Sep), readDone
}

// hy3Key reads an argument's key at s[i:], after its tag, and the key's
// closing tag.
func hy3Key(s string, i int, _ bool) (key string, _ map[string]string, next, state int) {
	e := strings.Index(s[i:], hy3KeyClose)
	switch {
	case e < 0:
		return "", nil, 0, readMore
	case e == 0 || e > dsMaxHead:
		return "", nil, 0, readBad
	}
	return s[i : i+e], nil, i + e + len(hy3KeyClose), readDone
}
