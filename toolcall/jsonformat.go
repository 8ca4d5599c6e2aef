package toolcall

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/wire"
)

// jsonFormat is a format that writes each call as a JSON object, {"name":
// ..., "arguments": {...}} (or "parameters"), after a marker or bare, one
// or several in a list: hermes, llama3, mistral and json. They share one
// parser (jsonParser) and one grammar, and differ in their syntax.
type jsonFormat struct {
	name    string
	sx      syntax
	markers []string
}

// syntax is the markup of a jsonFormat.
type syntax struct {
	start   []string // markers that open the calls anywhere in the answer
	end     string   // the tag that closes what a marker opened ("": none)
	bare    bool     // the calls may also open the answer without a marker, with '{' (or '[')
	argsKey string   // the key of the arguments in a call object
	// keyed: a call object is {"NAME": {arguments}} (Apertus), or else
	// the usual {"name": ..., argsKey: ...}.
	keyed bool
	frame grammar.Frame
}

// Name is the format's name.
func (f jsonFormat) Name() string { return f.name }

// Parser returns the format's parser; the calls' JSON needs no tool
// definitions to be read.
func (f jsonFormat) Parser(_ []wire.Tool, max int) Parser { return newJSONParser(f.sx, max) }

// Markers are the markup tokens the format writes.
func (f jsonFormat) Markers() []string { return f.markers }

// localRef matches the start of a "$ref" to the same document.
var localRef = regexp.MustCompile(`("\$ref"\s*:\s*")#`)

// Grammar returns a GBNF grammar under which the model's whole answer is
// one call (parallel false) or one or more calls (parallel true) of the
// given tools, in this format's markup, each call's arguments following
// its function's parameters schema, each within lim, and the schema of
// the calls that joins them too. A parameters schema the grammar
// converter cannot express is an error wrapping grammar.ErrInvalidSchema
// that names the tool.
func (f jsonFormat) Grammar(tools []wire.Tool, parallel bool, lim grammar.SchemaLimits) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("tool-call grammar: no tools")
	}
	sx := f.sx
	if sx.keyed {
		return keyedGrammar(sx.frame, tools, parallel, lim)
	}
	calls := make([]json.RawMessage, len(tools))
	for i, t := range tools {
		params := parameters(t)
		// Check each schema alone, so that an error names its tool.
		if _, err := grammar.FromSchemaLimits(params, lim); err != nil {
			return "", fmt.Errorf("tool %q: parameters: %w", t.Function.Name, err)
		}
		name, err := json.Marshal(t.Function.Name)
		if err != nil {
			return "", err
		}
		key, _ := json.Marshal(sx.argsKey)
		// References within the parameters ("#/$defs/...") now point
		// inside the call's schema.
		at := "#/properties/" + sx.argsKey
		if len(tools) > 1 {
			at = fmt.Sprintf("#/anyOf/%d/properties/%s", i, sx.argsKey)
		}
		params = localRef.ReplaceAll(params, []byte("${1}"+at))
		calls[i] = json.RawMessage(fmt.Sprintf(`{"type": "object", "properties": {"name": {"const": %s}, %s: %s}, "required": ["name", %s]}`, name, key, params, key))
	}
	schema := calls[0]
	if len(calls) > 1 {
		list, err := json.Marshal(calls)
		if err != nil {
			return "", err
		}
		schema = json.RawMessage(`{"anyOf": ` + string(list) + `}`)
	}
	frame := sx.frame
	if !parallel {
		frame.Max = 1
	}
	return grammar.FromSchemaFramedLimits(schema, frame, lim)
}

// parameters is a tool's parameters schema, {"type": "object"} when it
// has none.
func parameters(t wire.Tool) json.RawMessage {
	params := bytes.TrimSpace(t.Function.Parameters)
	if len(params) == 0 || bytes.Equal(params, []byte("null")) {
		return json.RawMessage(`{"type": "object"}`)
	}
	return params
}

// schemaCalls returns, for each tool in turn, the grammar of a call as
// call writes it around args, the grammar of its arguments, which follow
// its function's parameters schema.
func schemaCalls(b *grammar.Builder, tools []wire.Tool, call func(name string, args grammar.Expr) grammar.Expr) ([]grammar.Expr, error) {
	calls := make([]grammar.Expr, len(tools))
	for i, t := range tools {
		args, err := b.Schema(parameters(t), "#")
		if err != nil {
			return nil, fmt.Errorf("tool %q: parameters: %w", t.Function.Name, err)
		}
		calls[i] = call(t.Function.Name, args)
	}
	return calls, nil
}
