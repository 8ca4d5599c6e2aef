package serving

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/media"
	"github.com/corral-llm/corral/wire"
)

// Limits bound what one request may ask of the API. Each is checked
// before the work it bounds, in time linear in the request, and a request
// over one gets a 400 (code "limit_exceeded", in the endpoint's error
// shape) that names the limit and the `corral serve` flag setting it. A
// zero (or negative) field means the value in DefaultLimits.
type Limits struct {
	// MaxTools bounds a chat request's tools (--max-tools).
	MaxTools int
	// MaxAllowedTools bounds the entries of tool_choice's allowed_tools
	// (--max-allowed-tools). A function named twice there counts once.
	MaxAllowedTools int
	// MaxMessages bounds a chat request's messages, a voice
	// conversation's included (--max-messages).
	MaxMessages int
	// MaxPromptBytes bounds a prompt's text before it is tokenized: what
	// the chat template renders, which stops once it is longer, or the
	// prompt a request gives (--max-prompt-bytes).
	MaxPromptBytes int
	// MaxSchemaNodes and MaxSchemaProperties bound each JSON schema a
	// request gives (response_format, json_schema, format, the tools a
	// tool_choice forces): its JSON values and its properties, counted as
	// it is read (--max-schema-nodes, --max-schema-properties; see
	// grammar.SchemaLimits).
	MaxSchemaNodes      int
	MaxSchemaProperties int
	// MaxLogprobs bounds the log-probability entries a request may get
	// back: (alternatives per token + 1) × the tokens it may generate,
	// its max tokens or else the slot's context (--max-logprobs).
	MaxLogprobs int
	// MaxEmbedInputs bounds the inputs of an embeddings request, at most
	// engine.MaxEmbedInputs (--max-embed-inputs).
	MaxEmbedInputs int
	// MaxEmbedBytes bounds an embeddings request's inputs together:
	// bytes of text, 4 bytes per token id (--max-embed-bytes).
	MaxEmbedBytes int
	// MaxDetokenizeBytes bounds the text /detokenize answers, the sum of
	// the tokens' pieces (--max-detokenize-bytes).
	MaxDetokenizeBytes int
	// MaxVoiceHistory bounds, in bytes, the conversation a voice socket
	// keeps (--max-voice-history; see package voice).
	MaxVoiceHistory int
	// GrammarWhitespace is no bound but rides with the schema bounds to
	// every grammar made from a JSON schema (SchemaLimits): the
	// whitespace the JSON of a forced tool call, response_format,
	// json_schema, Ollama's format, Anthropic's output_config.format and
	// the Responses API's text.format may have between its tokens
	// (--grammar-whitespace). The zero value, grammar.WhitespaceCompact,
	// allows none; grammar.WhitespaceFree allows llama.cpp's, and
	// grammar.WhitespaceSpaced writes ": " and ", ".
	GrammarWhitespace grammar.Whitespace
	// MaxMedia bounds the images and sounds of one request
	// (--max-media); Media bounds each (--max-image-bytes,
	// --max-image-pixels, --max-audio-bytes, --max-audio-seconds; see
	// package media).
	MaxMedia int
	Media    media.Limits
	// MaxMediaMemory bounds, in bytes, the decoded media (pixels, samples)
	// the requests being served hold together (--max-media-memory); a
	// request waits for its share, or gets a 400 when it alone is over.
	MaxMediaMemory int64
	// MediaFetcher is no bound but rides with them to every dialect:
	// it fetches the http(s) image URLs requests give
	// (--allowed-media-domains, --media-fetch-timeout); nil refuses
	// them.
	MediaFetcher MediaFetcher
}

// DefaultLimits are the limits in place of zero Limits fields. They are
// far above what real clients send: a coding agent sends about 60 tools
// and prompts of 25 to 31 thousand tokens (about 120 KB); OpenAI allows
// 128 tools, 2048 embedding inputs and 5000 properties in a schema.
var DefaultLimits = Limits{
	MaxTools:            1000,
	MaxAllowedTools:     1000,
	MaxMessages:         10000,
	MaxPromptBytes:      8 << 20,
	MaxSchemaNodes:      grammar.DefaultSchemaLimits.MaxNodes,
	MaxSchemaProperties: grammar.DefaultSchemaLimits.MaxProperties,
	MaxLogprobs:         1 << 20,
	MaxEmbedInputs:      engine.MaxEmbedInputs,
	MaxEmbedBytes:       4 << 20,
	MaxDetokenizeBytes:  8 << 20,
	MaxVoiceHistory:     4 << 20,
	MaxMedia:            16,
	Media:               media.DefaultLimits(),
	MaxMediaMemory:      1 << 30,
}

// WithDefaults returns l with zero fields replaced by DefaultLimits, and
// MaxEmbedInputs at most engine.MaxEmbedInputs.
func (l Limits) WithDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxTools, DefaultLimits.MaxTools)
	def(&l.MaxAllowedTools, DefaultLimits.MaxAllowedTools)
	def(&l.MaxMessages, DefaultLimits.MaxMessages)
	def(&l.MaxPromptBytes, DefaultLimits.MaxPromptBytes)
	def(&l.MaxSchemaNodes, DefaultLimits.MaxSchemaNodes)
	def(&l.MaxSchemaProperties, DefaultLimits.MaxSchemaProperties)
	def(&l.MaxLogprobs, DefaultLimits.MaxLogprobs)
	def(&l.MaxEmbedInputs, DefaultLimits.MaxEmbedInputs)
	def(&l.MaxEmbedBytes, DefaultLimits.MaxEmbedBytes)
	def(&l.MaxDetokenizeBytes, DefaultLimits.MaxDetokenizeBytes)
	def(&l.MaxVoiceHistory, DefaultLimits.MaxVoiceHistory)
	def(&l.MaxMedia, DefaultLimits.MaxMedia)
	if l.MaxMediaMemory <= 0 {
		l.MaxMediaMemory = DefaultLimits.MaxMediaMemory
	}
	l.Media = l.Media.WithDefaults()
	l.MaxEmbedInputs = min(l.MaxEmbedInputs, engine.MaxEmbedInputs)
	return l
}

// SchemaLimits are l's bounds on JSON schemas, with the whitespace their
// grammars allow.
func (l *Limits) SchemaLimits() grammar.SchemaLimits {
	return grammar.SchemaLimits{MaxNodes: l.MaxSchemaNodes, MaxProperties: l.MaxSchemaProperties, Whitespace: l.GrammarWhitespace}
}

// JSONObjectGrammar is the grammar of any JSON object (response_format
// json_object, Ollama's format "json"), with the whitespace l allows.
func (l *Limits) JSONObjectGrammar() string { return grammar.JSONObjectGrammar(l.SchemaLimits()) }

// Limits are the limits the Core applies (Options.Limits, defaults
// filled in); the caller does not change them.
func (c *Core) Limits() *Limits { return &c.limits }

// OverLimit is the 400 for a request over one of the Limits: what it
// asks ("'tools' has 1001 tools"), the limit in unit, and the `corral
// serve` flag that sets it.
func OverLimit(param, flag string, limit int, unit, format string, args ...any) *Error {
	e := Invalid(param, "%s: at most %d %s (corral serve --%s)", fmt.Sprintf(format, args...), limit, unit, flag)
	e.Code = "limit_exceeded"
	return e
}

// SchemaLimitError is the error for a JSON schema in param that the
// grammar converter refused for its size, nil for another error.
func SchemaLimitError(err error, param string) *Error {
	var le *grammar.SchemaLimitError
	if !errors.As(err, &le) {
		return nil
	}
	if le.Limit == grammar.LimitProperties {
		return OverLimit(param, "max-schema-properties", le.Max, "properties", "a JSON schema in '%s' has too many properties", param)
	}
	return OverLimit(param, "max-schema-nodes", le.Max, "JSON values", "a JSON schema in '%s' has too many JSON values", param)
}

// CheckPrompt refuses prompt text longer than l allows.
func (l *Limits) CheckPrompt(text, param string) *Error {
	if len(text) > l.MaxPromptBytes {
		return OverLimit(param, "max-prompt-bytes", l.MaxPromptBytes, "bytes", "'%s' is %d bytes long", param, len(text))
	}
	return nil
}

// CheckMessages refuses a chat request with more messages than l allows,
// before anything is rendered or loaded.
func (l *Limits) CheckMessages(msgs []chat.Message) *Error {
	if len(msgs) > l.MaxMessages {
		return OverLimit("messages", "max-messages", l.MaxMessages, "messages", "'messages' has %d messages", len(msgs))
	}
	return nil
}

// CheckTools refuses more tools than l allows.
func (l *Limits) CheckTools(tools []wire.Tool) *Error {
	if len(tools) > l.MaxTools {
		return OverLimit("tools", "max-tools", l.MaxTools, "tools", "'tools' has %d tools", len(tools))
	}
	return nil
}

// CheckLogprobs refuses a request whose log-probabilities, top
// alternatives with each of up to maxTokens tokens (0: the request's
// context), could number more than l allows; param names the field that
// asked for them.
func (l *Limits) CheckLogprobs(req *engine.Request, reqCtx int, param string) *Error {
	if !req.Logprobs {
		return nil
	}
	tokens := reqCtx
	if req.MaxTokens > 0 && req.MaxTokens < tokens {
		tokens = req.MaxTokens
	}
	if n := (req.TopLogprobs + 1) * tokens; n > l.MaxLogprobs {
		return OverLimit(param, "max-logprobs", l.MaxLogprobs, "log-probabilities (ask for fewer tokens or alternatives)",
			"'%s' asks for %d log-probabilities (%d alternatives and the token's own, for each of up to %d tokens)",
			param, n, req.TopLogprobs, tokens)
	}
	return nil
}

// RenderError maps an error of the chat template to an API error.
func RenderError(err error, l *Limits) *Error {
	switch {
	case errors.Is(err, chat.ErrTooLong):
		return OverLimit("messages", "max-prompt-bytes", l.MaxPromptBytes, "bytes", "the prompt the chat template renders from 'messages' and 'tools' is too long")
	case errors.Is(err, chat.ErrInvalidMessages):
		return Invalid("messages", "%v", err)
	case errors.Is(err, chat.ErrReservedKwarg):
		return Invalid("chat_template_kwargs", "%v", err)
	case errors.Is(err, chat.ErrNeedsTools):
		// A tools-only template (a tool_use one as the model's only
		// template) given a chat without tools.
		return &Error{Status: http.StatusBadRequest, Param: "tools", Code: "chat_template_error",
			Message: "the model's chat template renders only requests that offer 'tools' ('tool_choice' \"none\" hides them): " +
				strings.TrimPrefix(err.Error(), chat.ErrNeedsTools.Error()+": ")}
	}
	// A template that fails on the messages is the request's error:
	// retrying cannot help.
	return &Error{Status: http.StatusBadRequest, Param: "messages", Code: "chat_template_error",
		Message: "the model's chat template cannot render these messages: " + err.Error()}
}
