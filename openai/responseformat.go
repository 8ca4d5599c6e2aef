package openai

import (
	"encoding/json"

	"github.com/corral-llm/corral/serving"
)

// ResponseFormat is OpenAI's response_format.
type ResponseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict bool            `json:"strict"`
	} `json:"json_schema"`
	// Schema is llama-server's extension: {"type":"json_object","schema":{...}}.
	Schema json.RawMessage `json:"schema"`
}

// Grammar returns the GBNF grammar that enforces f, "" for plain text; a
// schema is bounded by lim.
func (f *ResponseFormat) Grammar(lim *serving.Limits) (string, *serving.Error) {
	if f == nil {
		return "", nil
	}
	switch f.Type {
	case "", "text":
		return "", nil
	case "json_object":
		if serving.IsNull(f.Schema) {
			return lim.JSONObjectGrammar(), nil
		}
		return serving.SchemaGrammar(f.Schema, "response_format", lim)
	case "json_schema":
		if f.JSONSchema == nil || serving.IsNull(f.JSONSchema.Schema) {
			return "", serving.Invalid("response_format", "'response_format' of type json_schema needs json_schema.schema")
		}
		return serving.SchemaGrammar(f.JSONSchema.Schema, "response_format", lim)
	}
	return "", serving.Invalid("response_format", "'response_format.type' must be text, json_object or json_schema, got %q", f.Type)
}
