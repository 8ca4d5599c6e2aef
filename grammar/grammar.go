// Package grammar converts JSON Schema to GBNF grammars that llama.cpp's
// grammar sampler accepts.
//
// FromSchema supports the schemas that OpenAI structured outputs and
// llama-server clients send: type (one name or a list), properties,
// required, additionalProperties, items, prefixItems (and the older tuple
// form of items with additionalItems), minItems, maxItems, enum, const,
// anyOf, oneOf (treated as anyOf), allOf (merged into one schema), $ref to
// any location in the same document (recursion allowed), minLength,
// maxLength, pattern, the string formats date, time, date-time and uuid,
// and minimum and maximum (exclusive or not) on integers.
//
// The grammar is a little looser or stricter than the schema where the
// schema cannot be expressed as a grammar of reasonable size:
//
//   - Object properties must appear in a fixed order: required properties in
//     declaration order, then optional ones in declaration order, then
//     additional ones. Without additionalProperties, an object with
//     properties is closed and one without properties is open.
//   - Additional property names cannot repeat declared ones, unless a
//     declared name needs escapes in JSON.
//   - enum and const values must be written as compact JSON (with
//     WhitespaceSpaced, with a space after each ':' and ',').
//   - The formats time and date-time need a time zone offset (RFC 3339).
//   - prefixItems are all required; without items, no further items may
//     follow them.
//   - minimum and maximum are ignored for "number"; integers have at most 16
//     digits and numbers at most 16 integral and 16 fractional digits.
//   - A maxLength or maxItems above 2000 (the GBNF repetition limit) is not
//     enforced; minLength and minItems above 10000 are refused.
//   - pattern supports a regular expression subset: characters, '.',
//     classes, the escapes \d \w \s (and negations), groups, alternation
//     and quantifiers, with ^ and $ only at the ends of top-level
//     alternatives. Patterns using anything else (lookaround,
//     backreferences, \b, flags) are refused with ErrInvalidSchema. A
//     pattern overrides format, and both override minLength and maxLength.
//   - Keywords outside this list (not, if, uniqueItems, patternProperties,
//     multipleOf, ...) are ignored, so the grammar accepts more than the
//     schema does.
//
// By default the grammar allows no whitespace between the tokens of the
// JSON (compact JSON, {"a":1,"b":[2,3]}: a value in the fewest tokens).
// SchemaLimits.Whitespace may ask for WhitespaceFree instead: after each
// token nothing, one space, or a line break and up to 20 spaces or tabs,
// so models can write indented JSON; or for WhitespaceSpaced: one space
// after each ':' and ',', {"a": 1, "b": [2, 3]}. The text inside strings
// is the schema's in every case.
package grammar

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrInvalidSchema is wrapped by every error of FromSchema: the schema is not
// valid JSON Schema, or uses a feature this package cannot express. The
// message names the JSON pointer (#/...) of the fault.
var ErrInvalidSchema = errors.New("invalid JSON schema")

// JSONObject is a GBNF grammar accepting any JSON object, written compact
// (response_format {"type":"json_object"}). It is what FromSchema returns
// for {"type":"object"}.
const JSONObject = `root ::= object
object ::= "{" (string ":" value ("," string ":" value)*)? "}"
string ::= "\"" char* "\""
value ::= object | array | string | number | boolean | null
char ::= [^"\\\x7F\x00-\x1F] | escape
array ::= "[" (value ("," value)*)? "]"
number ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [+-]? [0-9]{1,3})?
boolean ::= "true" | "false"
null ::= "null"
escape ::= "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
`

// JSONObjectFree is JSONObject with whitespace between the tokens
// (WhitespaceFree).
const JSONObjectFree = `root ::= object
object ::= "{" space (string ":" space value ("," space string ":" space value)*)? "}" space
space ::= "" | " " | "\n" [ \t]{0,20}
string ::= "\"" char* "\"" space
value ::= object | array | string | number | boolean | null
char ::= [^"\\\x7F\x00-\x1F] | escape
array ::= "[" space (value ("," space value)*)? "]" space
number ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [+-]? [0-9]{1,3})? space
boolean ::= ("true" | "false") space
null ::= "null" space
escape ::= "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
`

// JSONObjectSpaced is JSONObject with a space after each ':' and ','
// (WhitespaceSpaced).
const JSONObjectSpaced = `root ::= object
object ::= "{" (string ": " value (", " string ": " value)*)? "}"
string ::= "\"" char* "\""
value ::= object | array | string | number | boolean | null
char ::= [^"\\\x7F\x00-\x1F] | escape
array ::= "[" (value (", " value)*)? "]"
number ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [+-]? [0-9]{1,3})?
boolean ::= "true" | "false"
null ::= "null"
escape ::= "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
`

// JSONObjectGrammar is the grammar of any JSON object with the
// whitespace lim allows: JSONObject, JSONObjectFree or JSONObjectSpaced.
func JSONObjectGrammar(lim SchemaLimits) string {
	switch lim.Whitespace {
	case WhitespaceFree:
		return JSONObjectFree
	case WhitespaceSpaced:
		return JSONObjectSpaced
	}
	return JSONObject
}

// Whitespace is the whitespace a grammar of JSON lets a model write
// between the JSON's tokens (keys, values, ':', ',', brackets and
// braces). The text inside strings is the schema's either way.
type Whitespace uint8

const (
	// WhitespaceCompact allows none: compact JSON, {"a":1,"b":[2,3]},
	// the fewest tokens a value takes. It is the zero value, the
	// default.
	WhitespaceCompact Whitespace = iota
	// WhitespaceFree allows, after each token, nothing, one space, or a
	// line break and up to 20 spaces or tabs (the rule of llama.cpp's
	// converter), so a model may indent. A model that lays out its JSON
	// on its own can then spend many tokens on it: a small one may
	// write a line break and 20 spaces after every value.
	WhitespaceFree
	// WhitespaceSpaced has one space after each ':' and ',' and none
	// elsewhere, {"a": 1, "b": [2, 3]}: JSON as Python's json.dumps and
	// chat templates' tojson write it, so the calls in a model's prompt
	// look the same. The spaces are forced text, not the model's choice.
	WhitespaceSpaced
)

// whitespaceNames are the names String gives and ParseWhitespace reads.
var whitespaceNames = [...]string{WhitespaceCompact: "compact", WhitespaceFree: "free", WhitespaceSpaced: "spaced"}

// String is w's name: compact, free or spaced.
func (w Whitespace) String() string {
	if int(w) < len(whitespaceNames) {
		return whitespaceNames[w]
	}
	return fmt.Sprintf("Whitespace(%d)", w)
}

// ParseWhitespace reads a Whitespace's name: compact, free or spaced.
func ParseWhitespace(name string) (Whitespace, error) {
	for w, n := range whitespaceNames {
		if n == name {
			return Whitespace(w), nil
		}
	}
	return 0, fmt.Errorf("%q: want compact, free or spaced", name)
}

// SchemaLimits bound the schema documents FromSchemaLimits converts. They
// are checked while the document is read, before any conversion, and the
// conversion takes time and memory linear in the document within them.
// A zero (or negative) field means the value in DefaultSchemaLimits.
type SchemaLimits struct {
	// MaxNodes bounds the JSON values in the document: every object,
	// array, string, number, boolean and null, at any depth.
	MaxNodes int
	// MaxProperties bounds the members of "properties" objects, all of
	// them together.
	MaxProperties int
	// Whitespace is not a bound but the one choice every conversion
	// takes, carried with the bounds to each of them: the whitespace the
	// grammar allows between the JSON's tokens. The zero value is
	// DefaultSchemaLimits', WhitespaceCompact.
	Whitespace Whitespace
}

// DefaultSchemaLimits are the limits of FromSchema and FromSchemaFramed,
// and those FromSchemaLimits applies in place of zero fields: far above
// the schemas of structured outputs and tools (OpenAI allows 5000
// properties in a schema), while a document over them would give a
// grammar over DefaultLimits anyway.
var DefaultSchemaLimits = SchemaLimits{MaxNodes: 100000, MaxProperties: 10000}

// withDefaults returns l with zero fields replaced by DefaultSchemaLimits.
func (l SchemaLimits) withDefaults() SchemaLimits {
	if l.MaxNodes <= 0 {
		l.MaxNodes = DefaultSchemaLimits.MaxNodes
	}
	if l.MaxProperties <= 0 {
		l.MaxProperties = DefaultSchemaLimits.MaxProperties
	}
	return l
}

// The names a SchemaLimitError gives the limits.
const (
	LimitNodes      = "node count"     // SchemaLimits.MaxNodes
	LimitProperties = "property count" // SchemaLimits.MaxProperties
)

// A SchemaLimitError reports a schema document over one of the
// SchemaLimits. It wraps ErrInvalidSchema.
type SchemaLimitError struct {
	Limit string // LimitNodes or LimitProperties
	Max   int    // the limit
	Got   int    // how many were read when reading stopped: Max+1
}

func (e *SchemaLimitError) Error() string {
	what := "JSON values"
	if e.Limit == LimitProperties {
		what = "properties"
	}
	return fmt.Sprintf("%v: the schema has more than %d %s", ErrInvalidSchema, e.Max, what)
}

// Unwrap makes a SchemaLimitError match ErrInvalidSchema.
func (e *SchemaLimitError) Unwrap() error { return ErrInvalidSchema }

// FromSchema converts a JSON Schema to a GBNF grammar with root rule "root".
// Invalid or unsupported schemas give an error wrapping ErrInvalidSchema.
func FromSchema(data json.RawMessage) (string, error) {
	return convert(data, nil, DefaultSchemaLimits)
}

// FromSchemaLimits is FromSchema for a document within lim: a larger one
// gives a *SchemaLimitError.
func FromSchemaLimits(data json.RawMessage, lim SchemaLimits) (string, error) {
	return convert(data, nil, lim)
}

// Frame is literal text around the JSON documents of a grammar built by
// FromSchemaFramed: Open, then documents separated by Sep, each between
// Before and After, then Close. Tool calls use it to write a model's own
// call markup around the call objects.
type Frame struct {
	Open, Close   string // before the first document and after the last
	Before, After string // around each document
	Sep           string // between documents
	// Max bounds the number of documents: 1 allows exactly one, 0 any
	// number from one up.
	Max int
}

// FromSchemaFramed converts a JSON Schema like FromSchema, for one or more
// documents inside the literal text of f. With WhitespaceFree
// (FromSchemaFramedLimits) the documents' trailing whitespace rule stays,
// so a model may write a line break before After.
func FromSchemaFramed(data json.RawMessage, f Frame) (string, error) {
	return convert(data, &f, DefaultSchemaLimits)
}

// FromSchemaFramedLimits is FromSchemaFramed for a document within lim.
func FromSchemaFramedLimits(data json.RawMessage, f Frame, lim SchemaLimits) (string, error) {
	return convert(data, &f, lim)
}

func convert(data json.RawMessage, f *Frame, lim SchemaLimits) (string, error) {
	g, _, err := conversion(data, f, lim)
	return g, err
}

// conversion is convert, returning the converter too (nil when the
// document is no JSON or over lim), for the tests' look at its work.
func conversion(data json.RawMessage, f *Frame, lim SchemaLimits) (string, *converter, error) {
	doc, err := parseJSON(data, lim)
	if err != nil {
		var le *SchemaLimitError
		if errors.As(err, &le) {
			return "", nil, le
		}
		return "", nil, fmt.Errorf("%w: not JSON: %v", ErrInvalidSchema, err)
	}
	c := &converter{doc: doc, dec: newDecoder(), g: newRuleSet(lim.Whitespace), refs: map[*schema]string{}, defs: map[string]*schema{}, where: map[string]*path{}}
	g, err := c.convert(f)
	return g, c, err
}

// convert converts c's document, framed by f when not nil.
func (c *converter) convert(f *Frame) (string, error) {
	root, err := c.dec.schema(c.doc, rootPath)
	if err != nil {
		return "", err
	}
	c.g.reserve("root")
	top := "root"
	if f != nil {
		top = c.g.name("document")
	}
	c.defs["#"] = root
	c.refs[root] = top
	c.where[top] = rootPath
	e, err := c.body(root, top)
	if err != nil {
		return "", err
	}
	c.g.define(top, e)
	if f != nil {
		item := seq(lit(f.Before), ref(top), lit(f.After))
		body := item
		if f.Max != 1 {
			body = seq(item, star(seq(lit(f.Sep), item)))
		}
		c.g.define("root", seq(lit(f.Open), body, lit(f.Close)))
	}
	c.g.addBuiltins()
	if n := c.g.leftRecursive(); n != "" {
		ptr := c.where[n]
		if ptr == nil {
			ptr = rootPath
		}
		return "", invalid(ptr, "schema refers to itself before any JSON text is written")
	}
	if !c.g.productive()["root"] {
		return "", invalid(rootPath, "schema accepts no finite value (required properties or items recurse without end)")
	}
	return c.g.String(), nil
}
