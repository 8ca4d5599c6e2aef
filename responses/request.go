// Package responses is the translation layer of OpenAI's Responses API
// (POST /v1/responses, GET and DELETE /v1/responses/{id}), as Codex CLI and
// openai-go's Responses client speak it. It turns a request into
// dialect-neutral pieces (chat messages, function tools, a tool choice,
// sampling and output-format settings: Translate), a neutral answer (a
// sequence of wire.Delta and an end) into the Responses stream events and
// the whole Response object (Stream), and keeps the responses clients ask
// to store (Store). It has no HTTP handler and no engine: the generation
// core calls it.
package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"

	"github.com/corral-llm/corral/wire"
)

// Request is a POST /v1/responses body, as far as corral reads it.
// Fields it does not know are ignored (Codex sends its own, such as
// client_metadata).
type Request struct {
	Model string `json:"model"`
	// Input is a string (one user message) or an array of items.
	Input json.RawMessage `json:"input"`
	// Instructions become a system message before the input.
	Instructions *string `json:"instructions"`
	// Tools are the tools offered, each kept as sent (see Translate).
	Tools             []json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls *bool             `json:"parallel_tool_calls"`
	Stream            bool              `json:"stream"`
	// Store asks to keep the response for previous_response_id and GET;
	// OpenAI's default is true.
	Store              *bool      `json:"store"`
	PreviousResponseID string     `json:"previous_response_id"`
	Include            []string   `json:"include"`
	MaxOutputTokens    *int       `json:"max_output_tokens"`
	Temperature        *float64   `json:"temperature"`
	TopP               *float64   `json:"top_p"`
	Reasoning          *Reasoning `json:"reasoning"`
	Text               *Text      `json:"text"`
	// PromptCacheKey is OpenAI's routing hint for its caches. corral
	// reuses prompt prefixes by content whatever the key, so it is
	// accepted and ignored (it is not a cache salt).
	PromptCacheKey string `json:"prompt_cache_key"`
	// CacheSalt is vLLM's cache_salt (corral's extension here): requests
	// of another salt share no cached prefix with this one.
	CacheSalt *string `json:"cache_salt"`
	// Priority is vLLM's priority (corral's extension here): the
	// request's class, lower served first.
	Priority    *int              `json:"priority"`
	Metadata    map[string]string `json:"metadata"`
	User        string            `json:"user"`
	ServiceTier string            `json:"service_tier"`
	Truncation  string            `json:"truncation"`
	// Background, Conversation and Prompt are features corral does not
	// have; a request that uses them is refused.
	Background   *bool           `json:"background"`
	Conversation json.RawMessage `json:"conversation"`
	Prompt       json.RawMessage `json:"prompt"`
}

// Reasoning is the request's reasoning configuration.
type Reasoning struct {
	// Effort ("none", "minimal", "low", "medium", "high", "xhigh")
	// becomes the template argument reasoning_effort.
	Effort string `json:"effort,omitempty"`
	// Summary ("auto", "concise", "detailed") is accepted and echoed;
	// corral streams the reasoning itself, not a summary of it.
	Summary string `json:"summary,omitempty"`
}

// Text is the request's text output configuration.
type Text struct {
	Format    json.RawMessage `json:"format,omitempty"`
	Verbosity string          `json:"verbosity,omitempty"`
}

// Error is a request the dialect refuses, written as OpenAI's error
// envelope with HTTP status Status.
type Error struct {
	Status  int
	Message string
	Param   string // the request field at fault, "" when none
	Code    string // a machine-readable code, "" when none
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// Envelope is e as OpenAI's error envelope, {"error":{...}}.
func (e *Error) Envelope() wire.Envelope {
	return wire.Envelope{Error: wire.ErrorObject{Message: e.Message, Type: wire.ErrorType(e.Status), Param: nilIfEmpty(e.Param), Code: nilIfEmpty(e.Code)}}
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// invalid returns a 400 about param.
func invalid(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

// overLimit is the 400 for a request over one of corral serve's limits,
// worded as serving.OverLimit words it: what the request asks, the limit
// in unit, and the flag that sets it.
func overLimit(param, flag string, limit int, unit, format string, args ...any) *Error {
	e := invalid(param, "%s: at most %d %s (corral serve --%s)", fmt.Sprintf(format, args...), limit, unit, flag)
	e.Code = "limit_exceeded"
	return e
}

// ErrNotFound is returned (wrapped) for a response or item that is not
// stored, has expired, or belongs to another owner.
var ErrNotFound = errors.New("not found")

// notFound returns the 404 OpenAI answers for an unknown response or item.
func notFound(param, what, id string) *Error {
	return &Error{Status: http.StatusNotFound, Param: param, Message: fmt.Sprintf("%s with id '%s' not found.", what, id)}
}

// Decode decodes a request body. Input that is not JSON of the right
// shape is a 400.
func Decode(body []byte) (*Request, *Error) {
	var r Request
	if err := json.Unmarshal(body, &r); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, invalid(te.Field, "'%s' has the wrong type: %s", te.Field, err)
		}
		return nil, invalid("", "the request body is not valid JSON: %s", err)
	}
	return &r, nil
}

// functionName is OpenAI's rule for function names.
var functionName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}
