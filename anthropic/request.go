// Package anthropic is the Anthropic dialect of corral's API: it
// translates the body of a Messages request (POST /v1/messages, POST
// /v1/messages/count_tokens) into the neutral request the core serves
// (chat messages, function tools, a tool choice, sampling and reasoning
// parameters), and encodes the core's answer, whole or as a stream of
// deltas, as Anthropic's Message object or its server-sent events, and
// errors as Anthropic's envelope. Routes serves both endpoints on package
// serving's core (serve.go); the translation and the encoders speak the
// neutral types of packages chat and wire, and none of package openai's.
package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/media"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// Limits on stop sequences, as corral's OpenAI side bounds "stop": they
// keep the per-token stop check cheap.
const (
	MaxStopSequences     = 16
	MaxStopSequenceBytes = 256
)

// Request is a Messages request translated into corral's neutral shape.
type Request struct {
	// Model is the model the request names.
	Model string
	// Messages are the conversation as chat messages: the system prompt
	// first (when there is one), then each message in order, a user
	// message's tool_result blocks becoming "tool" messages, an assistant
	// message's tool_use blocks its ToolCalls and its thinking blocks its
	// ReasoningContent.
	Messages []chat.Message
	// Tools are the custom tools as function tools, those with
	// defer_loading left out unless a tool_reference in the conversation
	// loaded them.
	Tools []wire.Tool
	// ToolChoice is tool_choice: "any" is serving.ToolsRequired, "tool"
	// serving.ToolsFunction, disable_parallel_tool_use Single.
	ToolChoice serving.ToolChoice
	// MaxTokens is max_tokens (0 for count_tokens, which has none).
	MaxTokens int
	// Sampling parameters; nil when absent.
	Temperature *float64
	TopP        *float64
	TopK        *int
	// StopSequences are stop_sequences: at most MaxStopSequences, each
	// of 1 to MaxStopSequenceBytes bytes.
	StopSequences []string
	// Thinking is the thinking type: true for "enabled", "adaptive" and
	// "between_tools", false for "disabled", nil when absent (the model's
	// default).
	Thinking *bool
	// Budget is thinking.budget_tokens of "enabled"; nil otherwise.
	Budget *int
	// OmitThinking is thinking.display "omitted": the answer's thinking
	// is not sent (see Meta.OmitThinking).
	OmitThinking bool
	// Effort is output_config.effort (one of Efforts), "" when absent:
	// the template's reasoning_effort, where the template reads one.
	Effort string
	// Format is the JSON schema of output_config.format, nil when absent.
	Format json.RawMessage
	// Stream is "stream": true.
	Stream bool
	// CacheSalt is cache_salt (vLLM's field, corral's extension here):
	// requests of another salt share no cached prefix with this one. Nil
	// when absent.
	CacheSalt *string
	// Priority is priority (vLLM's field, corral's extension here): the
	// request's class, lower served first. Nil when absent.
	Priority *int
	// Media are the images of image blocks (in user messages and
	// tool_result contents), not yet decoded: Media[k] is the image of
	// the content part chat.MediaPart(k) in Messages.
	Media []serving.MediaSource
}

// body is the JSON of a Messages or count_tokens request. Fields that no
// client needs corral to act on are accepted and ignored: metadata,
// context_management, cache_control, service_tier, inference_geo, speed,
// diagnostics, and any field corral does not know.
type body struct {
	Model         string          `json:"model"`
	Messages      []rawMessage    `json:"messages"`
	System        json.RawMessage `json:"system"`
	MaxTokens     *int            `json:"max_tokens"`
	StopSequences []string        `json:"stop_sequences"`
	Stream        bool            `json:"stream"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	Tools         []rawTool       `json:"tools"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	Thinking      json.RawMessage `json:"thinking"`
	OutputConfig  json.RawMessage `json:"output_config"`
	CacheSalt     *string         `json:"cache_salt"`
	Priority      *int            `json:"priority"`
	unsupported
}

// unsupported are fields of Anthropic's API that corral knows but does not
// implement: a request that sets one gets a 400 naming it.
type unsupported struct {
	Container  json.RawMessage `json:"container"`
	MCPServers json.RawMessage `json:"mcp_servers"`
}

func (u *unsupported) check() *Error {
	switch {
	case !isNull(u.Container):
		return invalid("container", "container: code execution containers are not supported: corral runs no tools itself")
	case !isNull(u.MCPServers):
		return invalid("mcp_servers", "mcp_servers: remote MCP servers are not supported: corral calls no tools itself; define them as tools")
	}
	return nil
}

type rawMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type rawTool struct {
	Type         string          `json:"type"`
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	DeferLoading bool            `json:"defer_loading"`
}

// block is any content block, each type using its own fields.
type block struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`        // text
	ID        string          `json:"id"`          // tool_use
	Name      string          `json:"name"`        // tool_use
	Input     json.RawMessage `json:"input"`       // tool_use
	ToolUseID string          `json:"tool_use_id"` // tool_result
	Content   json.RawMessage `json:"content"`     // tool_result
	IsError   bool            `json:"is_error"`    // tool_result
	Thinking  *string         `json:"thinking"`    // thinking
	ToolName  string          `json:"tool_name"`   // tool_reference
	Source    json.RawMessage `json:"source"`      // image
}

// ParseMessages translates the body of POST /v1/messages. A body that is
// not such a request gets a 400 *Error naming the field at fault. It
// takes time linear in the body.
func ParseMessages(b []byte) (*Request, *Error) {
	var raw body
	if e := decode(b, &raw); e != nil {
		return nil, e
	}
	if raw.MaxTokens == nil {
		return nil, invalid("max_tokens", "max_tokens: field required")
	}
	if *raw.MaxTokens < 1 {
		return nil, invalid("max_tokens", "max_tokens: must be at least 1, got %d", *raw.MaxTokens)
	}
	r, e := translate(&raw)
	if e != nil {
		return nil, e
	}
	r.MaxTokens, r.Stream, r.CacheSalt, r.Priority = *raw.MaxTokens, raw.Stream, raw.CacheSalt, raw.Priority
	return r, nil
}

// ParseCountTokens translates the body of POST /v1/messages/count_tokens:
// the same request as ParseMessages reads, without max_tokens and
// stream. The core renders Messages with Tools and counts the tokens.
func ParseCountTokens(b []byte) (*Request, *Error) {
	var raw body
	if e := decode(b, &raw); e != nil {
		return nil, e
	}
	return translate(&raw)
}

// TokenCount is the response of POST /v1/messages/count_tokens.
type TokenCount struct {
	InputTokens int `json:"input_tokens"`
}

// decode decodes b, one JSON object in valid UTF-8, into v.
func decode(b []byte, v *body) *Error {
	if !utf8.Valid(b) {
		return invalid("", "request body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("", "invalid JSON body: unexpected data after the top-level object")
	}
	return nil
}

func decodeError(err error) *Error {
	var (
		se *json.SyntaxError
		te *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, io.EOF):
		return invalid("", "request body is empty: expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "invalid JSON body: unexpected end of input")
	case errors.As(err, &se):
		return invalid("", "invalid JSON body at offset %d: %v", se.Offset, se)
	case errors.As(err, &te):
		if te.Field == "" {
			return invalid("", "request body must be a JSON object, got %s", te.Value)
		}
		field := strings.TrimPrefix(te.Field, "unsupported.")
		return invalid(field, "%s: expected %s, got %s", field, serving.JSONKind(te.Type.Kind()), te.Value)
	}
	return invalid("", "invalid JSON body: %v", err)
}

// translate checks and converts what both endpoints share.
func translate(raw *body) (*Request, *Error) {
	if e := raw.unsupported.check(); e != nil {
		return nil, e
	}
	r := &Request{Model: raw.Model, Temperature: raw.Temperature, TopP: raw.TopP, TopK: raw.TopK}
	switch {
	case raw.Model == "":
		return nil, invalid("model", "model: field required")
	case len(raw.Messages) == 0:
		return nil, invalid("messages", "messages: at least one message is required")
	case r.Temperature != nil && (*r.Temperature < 0 || *r.Temperature > 1):
		return nil, invalid("temperature", "temperature: must be between 0 and 1, got %g", *r.Temperature)
	case r.TopP != nil && (*r.TopP < 0 || *r.TopP > 1):
		return nil, invalid("top_p", "top_p: must be between 0 and 1, got %g", *r.TopP)
	case r.TopK != nil && *r.TopK < 0:
		return nil, invalid("top_k", "top_k: must be 0 or more, got %d", *r.TopK)
	case len(raw.StopSequences) > MaxStopSequences:
		return nil, invalid("stop_sequences", "stop_sequences: %d sequences; at most %d are allowed", len(raw.StopSequences), MaxStopSequences)
	}
	for i, s := range raw.StopSequences {
		if s == "" || len(s) > MaxStopSequenceBytes {
			return nil, invalid("stop_sequences", "stop_sequences.%d: must be 1 to %d bytes long, got %d", i, MaxStopSequenceBytes, len(s))
		}
	}
	r.StopSequences = raw.StopSequences
	var e *Error
	if e = r.thinking(raw.Thinking); e != nil {
		return nil, e
	}
	if e = r.outputConfig(raw.OutputConfig); e != nil {
		return nil, e
	}
	system, e := systemText(raw.System)
	if e != nil {
		return nil, e
	}
	c := converter{names: make(map[string]string), loaded: make(map[string]bool)}
	if system != nil {
		c.out = append(c.out, chat.Message{Role: "system", Content: jsonString(*system)})
	}
	for i := range raw.Messages {
		if e := c.message(i, &raw.Messages[i]); e != nil {
			return nil, e
		}
	}
	r.Messages, r.Media = c.out, c.media
	if r.Tools, e = tools(raw.Tools, c.loaded); e != nil {
		return nil, e
	}
	if r.ToolChoice, e = toolChoice(raw.ToolChoice, raw.Tools); e != nil {
		return nil, e
	}
	return r, nil
}

// thinking reads the thinking field.
func (r *Request) thinking(raw json.RawMessage) *Error {
	if isNull(raw) {
		return nil
	}
	var t struct {
		Type         string `json:"type"`
		BudgetTokens *int   `json:"budget_tokens"`
		Display      string `json:"display"`
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return invalid("thinking", "thinking: must be an object with a type of \"enabled\", \"adaptive\" or \"disabled\"")
	}
	on := true
	switch t.Type {
	case "enabled":
		if t.BudgetTokens == nil {
			return invalid("thinking.budget_tokens", "thinking.budget_tokens: field required when thinking is enabled")
		}
		if *t.BudgetTokens < 0 {
			return invalid("thinking.budget_tokens", "thinking.budget_tokens: must be 0 or more, got %d", *t.BudgetTokens)
		}
		r.Budget = t.BudgetTokens
	case "adaptive", "between_tools":
	case "disabled":
		on = false
	default:
		return invalid("thinking.type", "thinking.type: must be \"enabled\", \"adaptive\" or \"disabled\", got %q", t.Type)
	}
	switch t.Display {
	case "", "summarized":
	case "omitted":
		r.OmitThinking = true
	default:
		return invalid("thinking.display", "thinking.display: must be \"summarized\" or \"omitted\", got %q", t.Display)
	}
	r.Thinking = &on
	return nil
}

// Efforts are the values of output_config.effort.
var Efforts = []string{"low", "medium", "high", "xhigh", "max"}

// outputConfig reads output_config: its effort, and the JSON schema of
// its format.
func (r *Request) outputConfig(raw json.RawMessage) *Error {
	if isNull(raw) {
		return nil
	}
	var oc struct {
		Effort string `json:"effort"`
		Format *struct {
			Type   string          `json:"type"`
			Schema json.RawMessage `json:"schema"`
		} `json:"format"`
	}
	if err := json.Unmarshal(raw, &oc); err != nil {
		return invalid("output_config", "output_config: must be an object with effort and format: %v", err)
	}
	if oc.Effort != "" && !slices.Contains(Efforts, oc.Effort) {
		return invalid("output_config.effort", "output_config.effort: must be one of %s, got %q", strings.Join(Efforts, ", "), oc.Effort)
	}
	r.Effort = oc.Effort
	if f := oc.Format; f != nil {
		if f.Type != "json_schema" {
			return invalid("output_config.format.type", "output_config.format.type: must be \"json_schema\", got %q", f.Type)
		}
		if s := bytes.TrimSpace(f.Schema); len(s) == 0 || s[0] != '{' {
			return invalid("output_config.format.schema", "output_config.format.schema: must be a JSON schema object")
		}
		r.Format = f.Schema
	}
	return nil
}

// systemText reads the system field, a string or an array of text
// blocks (joined by newlines): nil when absent.
func systemText(raw json.RawMessage) (*string, *Error) {
	if isNull(raw) {
		return nil, nil
	}
	text, e := textContent(raw, "system")
	if e != nil {
		return nil, e
	}
	return &text, nil
}

// textContent reads content that may only be text: a string, or an array
// of text blocks, joined by newlines. param names it in errors.
func textContent(raw json.RawMessage, param string) (string, *Error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var blocks []block
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", invalid(param, "%s: must be a string or an array of text blocks", param)
	}
	texts := make([]string, 0, len(blocks))
	for j, b := range blocks {
		p := fmt.Sprintf("%s.%d", param, j)
		if b.Type != "text" {
			return "", unsupportedBlock(p, b.Type)
		}
		if b.Text == nil {
			return "", invalid(p+".text", "%s.text: field required", p)
		}
		texts = append(texts, *b.Text)
	}
	return strings.Join(texts, "\n"), nil
}

// unsupportedBlock is the 400 of a content block corral cannot take where
// it is.
func unsupportedBlock(param, typ string) *Error {
	switch typ {
	case "image":
		return invalid(param, "%s: image blocks are taken only in user messages and in tool_result contents", param)
	case "document":
		return invalid(param, "%s: document blocks are not supported: send a document's text as a text block, its pages as image blocks", param)
	case "":
		return invalid(param+".type", "%s.type: field required", param)
	}
	return invalid(param, "%s: content blocks of type %q are not supported here", param, typ)
}

// converter turns messages into chat messages.
type converter struct {
	out    []chat.Message
	names  map[string]string // tool_use id → tool name, for the results
	loaded map[string]bool   // tools a tool_reference loaded
	media  []serving.MediaSource
}

// part is a piece of a user message's or a tool result's content: text,
// or the image medium (an index into converter.media; -1 for text).
type part struct {
	text   string
	medium int
}

// contentOf is the content of parts: without an image, their texts
// joined by newlines, as a string; with one, text parts and
// chat.MediaPart's, which chat.Message.Text joins the same way, with
// no newline on either side of an image, as llama.cpp joins them.
func contentOf(parts []part) json.RawMessage {
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.medium >= 0 {
			raw := make([]json.RawMessage, len(parts))
			for i, p := range parts {
				if p.medium >= 0 {
					raw[i] = chat.MediaPart(p.medium)
				} else {
					raw[i], _ = json.Marshal(map[string]string{"type": "text", "text": p.text}) // strings: cannot fail
				}
			}
			b, _ := json.Marshal(raw) // valid JSON parts: cannot fail
			return b
		}
		texts = append(texts, p.text)
	}
	return jsonString(strings.Join(texts, "\n"))
}

// imageSource is an image block's source.
type imageSource struct {
	Type      string  `json:"type"`
	MediaType string  `json:"media_type"`
	Data      *string `json:"data"`
	URL       string  `json:"url"`
	FileID    string  `json:"file_id"`
}

// imageMediaTypes are the media types of Anthropic's base64 image
// sources.
var imageMediaTypes = []string{"image/jpeg", "image/png", "image/gif", "image/webp"}

// image reads the source of an image block, the image of a content part
// of its own: a base64 source, whose media_type must be its bytes'
// (checked when it is decoded, serving.Limits.DecodeMedia), or a URL
// source: a data URL, or an http(s) URL fetched only from a host
// --allowed-media-domains lists (serving.Limits.ImageURL). It returns the
// image's number.
func (c *converter) image(param string, b *block) (int, *Error) {
	if isNull(b.Source) {
		return 0, invalid(param+".source", "%s.source: field required", param)
	}
	var src imageSource
	if err := json.Unmarshal(b.Source, &src); err != nil {
		return 0, invalid(param+".source", "%s.source: must be an object with a type of \"base64\"", param)
	}
	p := param + ".source"
	m := serving.MediaSource{Kind: media.KindImage}
	switch src.Type {
	case "base64":
		switch {
		case src.MediaType == "":
			return 0, invalid(p+".media_type", "%s.media_type: field required", p)
		case !slices.Contains(imageMediaTypes, src.MediaType):
			return 0, invalid(p+".media_type", "%s.media_type: must be one of %s, got %q", p, strings.Join(imageMediaTypes, ", "), src.MediaType)
		case src.Data == nil:
			return 0, invalid(p+".data", "%s.data: field required", p)
		}
		m.Param, m.Base64, m.Type = p+".data", *src.Data, src.MediaType
	case "url":
		if src.URL == "" {
			return 0, invalid(p+".url", "%s.url: field required", p)
		}
		m.Param, m.URL = p+".url", src.URL
	case "file":
		return 0, invalid(p+".file_id", "%s.file_id: file sources are not supported (corral has no Files API): send the image inline, as a base64 source", p)
	case "":
		return 0, invalid(p+".type", "%s.type: field required", p)
	default:
		return 0, invalid(p+".type", "%s.type: must be \"base64\" or \"url\", got %q", p, src.Type)
	}
	c.media = append(c.media, m)
	return len(c.media) - 1, nil
}

func (c *converter) message(i int, m *rawMessage) *Error {
	param := fmt.Sprintf("messages.%d", i)
	if isNull(m.Content) {
		return invalid(param+".content", "%s.content: field required", param)
	}
	switch m.Role {
	case "system":
		// Not in the public API, but Claude Code sends it: a system
		// message where it stands in the conversation.
		text, e := textContent(m.Content, param+".content")
		if e != nil {
			return e
		}
		c.out = append(c.out, chat.Message{Role: "system", Content: jsonString(text)})
		return nil
	case "user", "assistant":
	case "":
		return invalid(param+".role", "%s.role: field required", param)
	default:
		return invalid(param+".role", "%s.role: must be \"user\" or \"assistant\", got %q", param, m.Role)
	}
	var s string
	if err := json.Unmarshal(m.Content, &s); err == nil {
		c.out = append(c.out, chat.Message{Role: m.Role, Content: jsonString(s)})
		return nil
	}
	var blocks []block
	if err := json.Unmarshal(m.Content, &blocks); err != nil {
		return invalid(param+".content", "%s.content: must be a string or an array of content blocks", param)
	}
	if m.Role == "assistant" {
		return c.assistant(param, blocks)
	}
	return c.user(param, blocks)
}

// user converts a user message's blocks: runs of text and image blocks
// become user messages, each tool_result a tool message, in order.
func (c *converter) user(param string, blocks []block) *Error {
	var parts []part
	flush := func() {
		if parts != nil {
			c.out = append(c.out, chat.Message{Role: "user", Content: contentOf(parts)})
			parts = nil
		}
	}
	for j := range blocks {
		b := &blocks[j]
		p := fmt.Sprintf("%s.content.%d", param, j)
		switch b.Type {
		case "text":
			if b.Text == nil {
				return invalid(p+".text", "%s.text: field required", p)
			}
			parts = append(parts, part{text: *b.Text, medium: -1})
		case "image":
			k, e := c.image(p, b)
			if e != nil {
				return e
			}
			parts = append(parts, part{medium: k})
		case "tool_result":
			if b.ToolUseID == "" {
				return invalid(p+".tool_use_id", "%s.tool_use_id: field required", p)
			}
			content, e := c.toolResult(p, b)
			if e != nil {
				return e
			}
			flush()
			c.out = append(c.out, chat.Message{Role: "tool", ToolCallID: b.ToolUseID, Name: c.names[b.ToolUseID], Content: content})
		default:
			return unsupportedBlock(p, b.Type)
		}
	}
	if len(blocks) == 0 {
		parts = []part{}
	}
	flush()
	return nil
}

// toolResult reads a tool_result's content: absent, a string, or text,
// image (a tool's screenshot) and tool_reference blocks (a
// tool_reference gives its tool's name and loads the tool). A result
// marked is_error starts "Error: ", since chat templates have no place
// for the flag.
func (c *converter) toolResult(param string, b *block) (json.RawMessage, *Error) {
	var text string
	parts := []part{}
	if !isNull(b.Content) {
		if err := json.Unmarshal(b.Content, &text); err == nil {
			parts = append(parts, part{text: text, medium: -1})
		} else {
			var blocks []block
			if err := json.Unmarshal(b.Content, &blocks); err != nil {
				return nil, invalid(param+".content", "%s.content: must be a string or an array of content blocks", param)
			}
			for k := range blocks {
				blk := &blocks[k]
				p := fmt.Sprintf("%s.content.%d", param, k)
				switch blk.Type {
				case "text":
					if blk.Text == nil {
						return nil, invalid(p+".text", "%s.text: field required", p)
					}
					parts = append(parts, part{text: *blk.Text, medium: -1})
				case "image":
					m, e := c.image(p, blk)
					if e != nil {
						return nil, e
					}
					parts = append(parts, part{medium: m})
				case "tool_reference":
					if blk.ToolName == "" {
						return nil, invalid(p+".tool_name", "%s.tool_name: field required", p)
					}
					c.loaded[blk.ToolName] = true
					parts = append(parts, part{text: blk.ToolName, medium: -1})
				default:
					return nil, unsupportedBlock(p, blk.Type)
				}
			}
		}
	}
	if b.IsError {
		if len(parts) > 0 && parts[0].medium < 0 {
			parts[0].text = "Error: " + parts[0].text
		} else {
			parts = append([]part{{text: "Error: ", medium: -1}}, parts...)
		}
	}
	return contentOf(parts), nil
}

// assistant converts an assistant message's blocks into one message:
// its text, its thinking as ReasoningContent (redacted thinking, which
// only Anthropic can read, is dropped), its tool_use blocks as calls.
func (c *converter) assistant(param string, blocks []block) *Error {
	var texts, thoughts []string
	var calls []wire.ToolCall
	for j := range blocks {
		b := &blocks[j]
		p := fmt.Sprintf("%s.content.%d", param, j)
		switch b.Type {
		case "text":
			if b.Text == nil {
				return invalid(p+".text", "%s.text: field required", p)
			}
			texts = append(texts, *b.Text)
		case "thinking":
			if b.Thinking == nil {
				return invalid(p+".thinking", "%s.thinking: field required", p)
			}
			if *b.Thinking != "" {
				thoughts = append(thoughts, *b.Thinking)
			}
		case "redacted_thinking":
		case "tool_use":
			call, e := toolUse(p, b)
			if e != nil {
				return e
			}
			c.names[b.ID] = b.Name
			calls = append(calls, call)
		default:
			return unsupportedBlock(p, b.Type)
		}
	}
	c.out = append(c.out, chat.Message{
		Role: "assistant", Content: jsonString(strings.Join(texts, "\n")),
		ToolCalls: calls, ReasoningContent: strings.Join(thoughts, "\n"),
	})
	return nil
}

// toolUse reads a tool_use block as a call, its input (a JSON object)
// compacted into the arguments.
func toolUse(param string, b *block) (wire.ToolCall, *Error) {
	switch {
	case b.ID == "":
		return wire.ToolCall{}, invalid(param+".id", "%s.id: field required", param)
	case b.Name == "":
		return wire.ToolCall{}, invalid(param+".name", "%s.name: field required", param)
	}
	args := "{}"
	if !isNull(b.Input) {
		in := bytes.TrimSpace(b.Input)
		if in[0] != '{' {
			return wire.ToolCall{}, invalid(param+".input", "%s.input: must be a JSON object", param)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, in); err != nil {
			return wire.ToolCall{}, invalid(param+".input", "%s.input: %v", param, err)
		}
		args = buf.String()
	}
	return wire.ToolCall{ID: b.ID, Type: "function", Function: wire.FunctionCall{Name: b.Name, Arguments: args}}, nil
}

// toolName is Anthropic's rule for tool names (wider than OpenAI's 64
// characters, which the core does not apply).
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)

// tools converts the custom tools into function tools. A tool with
// defer_loading is left out, unless loaded (a tool_reference named it):
// Anthropic shows such a tool to the model only once a tool search found
// it. Anthropic's server tools (web search, code execution, ...) are
// refused: corral runs no tools itself.
func tools(raw []rawTool, loaded map[string]bool) ([]wire.Tool, *Error) {
	var out []wire.Tool
	seen := make(map[string]bool, len(raw))
	for i, t := range raw {
		p := fmt.Sprintf("tools.%d", i)
		switch {
		case t.Type != "" && t.Type != "custom":
			return nil, invalid(p+".type", "%s.type: %q is one of Anthropic's own tools, which corral does not run: define a custom tool with name, description and input_schema", p, t.Type)
		case !toolName.MatchString(t.Name):
			return nil, invalid(p+".name", "%s.name: must be 1 to 128 letters, digits, '_' or '-', got %q", p, t.Name)
		case seen[t.Name]:
			return nil, invalid(p+".name", "%s.name: tool names must be unique: %q is defined twice", p, t.Name)
		}
		seen[t.Name] = true
		if s := bytes.TrimSpace(t.InputSchema); len(s) == 0 || s[0] != '{' {
			return nil, invalid(p+".input_schema", "%s.input_schema: must be a JSON schema object", p)
		}
		if t.DeferLoading && !loaded[t.Name] {
			continue
		}
		out = append(out, wire.Tool{Type: "function", Function: wire.FunctionDef{Name: t.Name, Description: t.Description, Parameters: t.InputSchema}})
	}
	return out, nil
}

// toolChoice reads tool_choice: {"type": "auto" | "any" | "tool" | "none"},
// "tool" with the name of one of the tools, the first three with
// disable_parallel_tool_use.
func toolChoice(raw json.RawMessage, defined []rawTool) (serving.ToolChoice, *Error) {
	var tc serving.ToolChoice
	if isNull(raw) {
		return tc, nil
	}
	var obj struct {
		Type            string `json:"type"`
		Name            string `json:"name"`
		DisableParallel bool   `json:"disable_parallel_tool_use"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return tc, invalid("tool_choice", `tool_choice: must be {"type": "auto"}, {"type": "any"}, {"type": "tool", "name": ...} or {"type": "none"}`)
	}
	tc.Single = obj.DisableParallel
	switch obj.Type {
	case "auto":
		tc.Mode = serving.ToolsAuto
	case "none":
		tc.Mode = serving.ToolsNone
	case "any":
		tc.Mode = serving.ToolsRequired
	case "tool":
		if obj.Name == "" {
			return tc, invalid("tool_choice.name", "tool_choice.name: field required with type \"tool\"")
		}
		found := false
		for _, t := range defined {
			found = found || t.Name == obj.Name
		}
		if !found {
			return tc, invalid("tool_choice.name", "tool_choice.name: %q is not among the tools", obj.Name)
		}
		tc.Mode, tc.Name = serving.ToolsFunction, obj.Name
	default:
		return tc, invalid("tool_choice.type", "tool_choice.type: must be \"auto\", \"any\", \"tool\" or \"none\", got %q", obj.Type)
	}
	if (tc.Mode == serving.ToolsRequired || tc.Mode == serving.ToolsFunction) && len(defined) == 0 {
		return tc, invalid("tool_choice", "tool_choice: type %q needs tools", obj.Type)
	}
	return tc, nil
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	r := bytes.TrimSpace(raw)
	return len(r) == 0 || bytes.Equal(r, []byte("null"))
}

// jsonString is s as a JSON string, a chat message's content.
func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}
