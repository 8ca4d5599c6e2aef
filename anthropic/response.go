package anthropic

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"slices"
	"strings"

	"github.com/corral-llm/corral/wire"
)

// Stop reasons, the stop_reason of a message.
const (
	StopEndTurn     = "end_turn"
	StopMaxTokens   = "max_tokens"
	StopSequence    = "stop_sequence"
	StopToolUse     = "tool_use"
	finishLength    = "length"     // engine.FinishLength
	finishToolCalls = "tool_calls" // the core's finish of an answer that called tools
)

// Meta describes the message being answered, for Whole and NewStream.
type Meta struct {
	// ID is the message's id; "" gets a fresh "msg_…" one (NewID).
	ID string
	// Model is the model's name, as the answer reports it.
	Model string
	// StopSequences are the request's stop_sequences: a stop string
	// among them that ended the answer makes it "stop_sequence" (other
	// stop strings are the model's own end of turn).
	StopSequences []string
	// OmitThinking leaves the answer's thinking out (the request's
	// thinking.display "omitted").
	OmitThinking bool
}

// Usage is the neutral token accounting of an answer, in the engine's
// terms.
type Usage struct {
	PromptTokens     int // the whole prompt
	CachedTokens     int // of which found in the cache
	CompletionTokens int
	ReasoningTokens  int // of CompletionTokens, the thinking's
}

// End is how an answer ended, as the core reports it.
type End struct {
	// Finish is the engine's finish reason ("stop", "length"), or
	// "tool_calls" for an answer that called tools and ended by itself.
	Finish string
	// StopWord is the stop string that ended the answer, if any
	// (engine.Result.StopWord).
	StopWord string
	Usage    Usage
}

// MessageUsage is a message's usage in Anthropic's terms: input_tokens
// are the prompt tokens not read from the cache, cache_read_input_tokens
// those that were; corral writes no cache entries that it bills apart, so
// cache_creation_input_tokens is 0. output_tokens_details.thinking_tokens
// are the output tokens of the thinking, counted by the engine as it
// generated them (engine.Usage.ReasoningTokens).
type MessageUsage struct {
	InputTokens              int                 `json:"input_tokens"`
	CacheCreationInputTokens int                 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int                 `json:"cache_read_input_tokens"`
	OutputTokens             int                 `json:"output_tokens"`
	OutputTokensDetails      OutputTokensDetails `json:"output_tokens_details"`
}

// OutputTokensDetails break the output tokens down.
type OutputTokensDetails struct {
	ThinkingTokens int `json:"thinking_tokens"`
}

// usage converts u.
func (u Usage) usage() MessageUsage {
	return MessageUsage{InputTokens: u.PromptTokens - u.CachedTokens, CacheReadInputTokens: u.CachedTokens, OutputTokens: u.CompletionTokens,
		OutputTokensDetails: OutputTokensDetails{ThinkingTokens: u.ReasoningTokens}}
}

// Message is Anthropic's Message object, a whole answer.
type Message struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"` // "message"
	Role         string         `json:"role"` // "assistant"
	Model        string         `json:"model"`
	Content      []ContentBlock `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        MessageUsage   `json:"usage"`
}

// ContentBlock is a content block of an answer: "text" (Text),
// "thinking" (Thinking, and an empty Signature: corral signs nothing) or
// "tool_use" (ID, Name, Input).
type ContentBlock struct {
	Type     string
	Text     string
	Thinking string
	ID       string
	Name     string
	Input    json.RawMessage // a JSON object
}

// MarshalJSON writes the fields of the block's type.
func (b ContentBlock) MarshalJSON() ([]byte, error) {
	switch b.Type {
	case "thinking":
		return json.Marshal(struct {
			Type      string `json:"type"`
			Thinking  string `json:"thinking"`
			Signature string `json:"signature"`
		}{b.Type, b.Thinking, ""})
	case "tool_use":
		in := b.Input
		if len(in) == 0 {
			in = json.RawMessage("{}")
		}
		return json.Marshal(struct {
			Type  string          `json:"type"`
			ID    string          `json:"id"`
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
		}{b.Type, b.ID, b.Name, in})
	}
	return json.Marshal(struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}{b.Type, b.Text})
}

// Whole is the Message of a whole answer: its reasoning, content and
// tool calls (msg, as the core parsed them), and how it ended.
func Whole(m Meta, msg wire.Message, end End) *Message {
	out := &Message{ID: m.ID, Type: "message", Role: "assistant", Model: m.Model, Content: []ContentBlock{}, Usage: end.Usage.usage()}
	if out.ID == "" {
		out.ID = NewID()
	}
	if msg.ReasoningContent != "" && !m.OmitThinking {
		out.Content = append(out.Content, ContentBlock{Type: "thinking", Thinking: msg.ReasoningContent})
	}
	if msg.Content != "" {
		out.Content = append(out.Content, ContentBlock{Type: "text", Text: msg.Content})
	}
	for _, c := range msg.ToolCalls {
		out.Content = append(out.Content, ContentBlock{Type: "tool_use", ID: ToolUseID(c.ID), Name: c.Function.Name, Input: toolInput(c.Function.Arguments)})
	}
	if len(out.Content) == 0 {
		// An empty answer is an empty text block, as a stream writes it.
		out.Content = append(out.Content, ContentBlock{Type: "text"})
	}
	reason, seq := StopReason(m, end, len(msg.ToolCalls) > 0)
	out.StopReason, out.StopSequence = &reason, seq
	return out
}

// toolInput is a call's arguments as a tool_use input: the JSON object
// they are, else {} (a call is only complete with an object).
func toolInput(args string) json.RawMessage {
	a := bytes.TrimSpace([]byte(args))
	if len(a) == 0 || a[0] != '{' || !json.Valid(a) {
		return json.RawMessage("{}")
	}
	return a
}

// StopReason is the stop_reason of an answer that ended as end says
// (called: it made tool calls), and its stop_sequence (nil unless
// "stop_sequence"): "max_tokens" for "length", "stop_sequence" for a stop
// string among m.StopSequences, "tool_use" for "tool_calls" or a stop
// after calls, else "end_turn". The core reports answers that failed
// (cancelled, an error) as errors instead.
func StopReason(m Meta, end End, called bool) (string, *string) {
	switch end.Finish {
	case finishLength:
		return StopMaxTokens, nil
	case finishToolCalls:
		return StopToolUse, nil
	}
	if end.StopWord != "" && slices.Contains(m.StopSequences, end.StopWord) {
		s := end.StopWord
		return StopSequence, &s
	}
	if called {
		return StopToolUse, nil
	}
	return StopEndTurn, nil
}

// idChars are the characters of random ids.
const idChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// NewID returns a fresh message id: "msg_" and 24 letters and digits.
func NewID() string {
	b := make([]byte, 24)
	rand.Read(b)
	for i := range b {
		b[i] = idChars[int(b[i])%len(idChars)]
	}
	return "msg_" + string(b)
}

// ToolUseID is the tool_use id of a call id: "toolu_" and the id
// without its "call_" prefix, characters other than letters, digits, '_'
// and '-' replaced by '_'. The same call gets the same id whole or
// streamed; the client sends it back, and the core passes it to the
// template as it is.
func ToolUseID(callID string) string {
	if strings.HasPrefix(callID, "toolu_") {
		return callID
	}
	id := []byte(strings.TrimPrefix(callID, "call_"))
	for i, c := range id {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			id[i] = '_'
		}
	}
	return "toolu_" + string(id)
}
