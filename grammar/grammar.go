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
//   - enum and const values must be written as compact JSON.
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
// Between tokens the grammar allows nothing, one space, or a line break and
// up to 20 spaces or tabs, so models can write indented JSON.
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

// JSONObject is a GBNF grammar accepting any JSON object (response_format
// {"type":"json_object"}). It is what FromSchema returns for
// {"type":"object"}.
const JSONObject = `root ::= object
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

// FromSchema converts a JSON Schema to a GBNF grammar with root rule "root".
// Invalid or unsupported schemas give an error wrapping ErrInvalidSchema.
func FromSchema(data json.RawMessage) (string, error) {
	return convert(data, nil)
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
// documents inside the literal text of f. The documents' trailing
// whitespace rule stays, so a model may write a line break before After.
func FromSchemaFramed(data json.RawMessage, f Frame) (string, error) {
	return convert(data, &f)
}

func convert(data json.RawMessage, f *Frame) (string, error) {
	doc, err := parseJSON(data)
	if err != nil {
		return "", fmt.Errorf("%w: not JSON: %v", ErrInvalidSchema, err)
	}
	root, err := decodeSchema(doc, "#")
	if err != nil {
		return "", err
	}
	c := &converter{doc: doc, g: newRuleSet(), refs: map[string]string{}, defs: map[string]*schema{}, where: map[string]string{}}
	c.g.reserve("root")
	top := "root"
	if f != nil {
		top = c.g.name("document")
	}
	c.defs["#"] = root
	c.refs["#"] = top
	c.where[top] = "#"
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
		if ptr == "" {
			ptr = "#"
		}
		return "", invalid(ptr, "schema refers to itself before any JSON text is written")
	}
	if !c.g.productive()["root"] {
		return "", invalid("#", "schema accepts no finite value (required properties or items recurse without end)")
	}
	return c.g.String(), nil
}
