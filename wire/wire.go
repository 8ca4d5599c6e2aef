// Package wire defines OpenAI's wire format as corral speaks it, for
// servers and clients alike: the JSON shapes of chat completion and text
// completion requests, responses and stream chunks, embeddings, token usage, the
// error envelope, and the server-sent-event framing of streams (Reader
// and Writer).
//
// It has no dependency on the engine or on cgo: a client such as the load
// generator links it without linking llama.cpp. The server's HTTP
// behaviour (headers, write deadlines, flushing) belongs to package
// openai, which frames its streams with this package.
package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
)

// Object names, the "object" field of each response type.
const (
	ObjectChatCompletion      = "chat.completion"
	ObjectChatCompletionChunk = "chat.completion.chunk"
	ObjectTextCompletion      = "text_completion"
)

// Header are the fields every OpenAI response object starts with.
type Header struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
}

// Usage is OpenAI's token accounting.
type Usage struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	TotalTokens         int                 `json:"total_tokens"`
	PromptTokensDetails PromptTokensDetails `json:"prompt_tokens_details"`
	// CompletionTokensDetails break the completion tokens down; nil
	// when not known.
	CompletionTokensDetails *CompletionTokensDetails `json:"completion_tokens_details,omitempty"`
	// Paced are a paced response's measurements (corral's extension).
	Paced *PacedMetrics `json:"paced,omitempty"`
}

// PromptTokensDetails break the prompt tokens down.
type PromptTokensDetails struct {
	// CachedTokens were found in the cache, not evaluated again.
	CachedTokens int `json:"cached_tokens"`
}

// CompletionTokensDetails break the completion tokens down.
type CompletionTokensDetails struct {
	// ReasoningTokens are the tokens of the model's reasoning.
	ReasoningTokens int `json:"reasoning_tokens"`
}

// PacedMetrics are one paced response's measurements (corral's
// extension): its slot, chunks, total time, prompt tokens found cached and
// evaluated, and time to first chunk.
type PacedMetrics struct {
	SlotID          int     `json:"slot_id"`
	Chunks          int     `json:"chunks"`
	TotalMS         float64 `json:"total_ms"`
	TTFTMS          float64 `json:"ttft_ms"` // submit → first token
	FirstChunkMS    float64 `json:"time_to_first_chunk_ms"`
	HeldMS          float64 `json:"held_ms"` // time paused, waiting for continue
	CachedTokens    int     `json:"cached_tokens"`
	EvaluatedTokens int     `json:"evaluated_tokens"` // prompt and generated tokens put through the model
	CacheHitRatio   float64 `json:"cache_hit_ratio"`  // cached / prompt tokens
	// ReevaluatedTokens are tokens evaluated a second time: 0, unless the
	// answer was preempted by a better class and its history was lost.
	ReevaluatedTokens int    `json:"reevaluated_tokens"`
	FinishReason      string `json:"finish_reason"`
}

// ChunkInfo is a paced stream event's place in the answer (corral's
// extension).
type ChunkInfo struct {
	Index int  `json:"index"`
	Held  bool `json:"held"` // the answer pauses after this chunk until continue
	Last  bool `json:"last"`
}

// StreamOptions are a streamed request's options.
type StreamOptions struct {
	// IncludeUsage asks for a last chunk carrying the usage.
	IncludeUsage bool `json:"include_usage"`
}

// ChatRequest is the part of a chat completion request that corral's
// clients send (bench, corral run). The server decodes a richer shape
// (package openai); fields it does not know pass through as extensions.
type ChatRequest struct {
	Messages []Message `json:"messages"`
	RequestParams
}

// CompletionRequest is the part of a text completion request that
// corral's clients send (see ChatRequest).
type CompletionRequest struct {
	Prompt string `json:"prompt"`
	RequestParams
}

// RequestParams are the fields ChatRequest and CompletionRequest share.
type RequestParams struct {
	Model         string         `json:"model,omitempty"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *StreamOptions `json:"stream_options,omitempty"`
	MaxTokens     int            `json:"max_tokens,omitempty"`
	Temperature   *float64       `json:"temperature,omitempty"`
	// IgnoreEOS asks for MaxTokens tokens regardless of end-of-generation
	// tokens (llama.cpp's extension).
	IgnoreEOS bool `json:"ignore_eos,omitempty"`
	// Priority orders queued requests, lower first (corral's extension).
	Priority int `json:"priority,omitempty"`
}

// Tool is a function tool definition, as a chat request's "tools" carry.
type Tool struct {
	Type     string      `json:"type"` // "function"
	Function FunctionDef `json:"function"`
}

// FunctionDef describes a function the model may call. Parameters is a
// JSON schema, kept as sent (templates render it key by key).
type FunctionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// Message is a chat message with text content, as a client sends it and
// as a chat.completion returns it. (Requests may carry content parts too;
// package chat decodes those: chat.Message.)
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	Name       string     `json:"name,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	// ReasoningContent is the reasoning split off the content (the field
	// of llama-server and vLLM).
	ReasoningContent string `json:"reasoning_content,omitempty"`
}

// MarshalJSON writes the message with "content": null when it is empty
// and the message calls tools, as OpenAI does.
func (m Message) MarshalJSON() ([]byte, error) {
	type plain Message
	if m.Content != "" || len(m.ToolCalls) == 0 {
		return json.Marshal(plain(m))
	}
	return json.Marshal(struct {
		plain
		Content *string `json:"content"`
	}{plain: plain(m)})
}

// ToolCall is a model's call of a function tool. Arguments is the JSON
// text of an object.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"` // "function"
	Function FunctionCall `json:"function"`
}

// FunctionCall is the function part of a ToolCall.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // JSON text
}

// ToolCallDelta is one entry of a streamed delta.tool_calls: a piece of
// the call at Index (its id and name first, then argument fragments).
type ToolCallDelta struct {
	Index    int          `json:"index"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// ChatCompletion is a whole chat.completion response.
type ChatCompletion struct {
	Header
	Choices []ChatChoice `json:"choices"`
	Usage   *Usage       `json:"usage"`
}

// ChatChoice is a choice of a ChatCompletion.
type ChatChoice struct {
	Index        int           `json:"index"`
	Message      Message       `json:"message"`
	Logprobs     *ChatLogprobs `json:"logprobs"` // null unless asked for
	FinishReason *string       `json:"finish_reason"`
}

// ChatCompletionChunk is one event of a streamed chat completion.
type ChatCompletionChunk struct {
	Header
	Choices []ChatChunkChoice `json:"choices"`
	Usage   *Usage            `json:"usage,omitempty"`
	// Chunk says where a paced stream stands (corral's extension).
	Chunk *ChunkInfo `json:"chunk,omitempty"`
}

// ChatChunkChoice is a choice of a ChatCompletionChunk.
type ChatChunkChoice struct {
	Index int   `json:"index"`
	Delta Delta `json:"delta"`
	// Logprobs has the entries of the tokens whose text begins in this
	// chunk; null unless asked for, and in chunks without text.
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

// Delta is what a chunk adds to the message.
type Delta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
	// ReasoningContent is the reasoning text some servers (llama-server,
	// vLLM) stream apart from the content.
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCallDelta `json:"tool_calls,omitempty"`
}

// Text is the delta's content, "" when none.
func (d Delta) Text() string {
	if d.Content == nil {
		return ""
	}
	return *d.Content
}

// TextCompletion is a text_completion response, whole or one event of a
// stream.
type TextCompletion struct {
	Header
	Choices []TextChoice `json:"choices"`
	Usage   *Usage       `json:"usage,omitempty"`
}

// TextChoice is a choice of a TextCompletion.
type TextChoice struct {
	Text         string              `json:"text"`
	Index        int                 `json:"index"`
	Logprobs     *CompletionLogprobs `json:"logprobs"` // null unless asked for
	FinishReason *string             `json:"finish_reason"`
}

// ChatLogprobs are a chat choice's token log-probabilities (natural
// logarithms): an entry per token of the content.
type ChatLogprobs struct {
	Content []ChatTokenLogprob `json:"content"`
	// Refusal is always null: corral has no separate refusal output.
	Refusal []ChatTokenLogprob `json:"refusal"`
}

// ChatTokenLogprob is one generated token's entry: its text, its
// log-probability, its bytes (the text may be part of a UTF-8 character,
// which Token then cannot show) and the most likely tokens at its step,
// most likely first ([] when none were asked for).
type ChatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float32          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []ChatTopLogprob `json:"top_logprobs"`
}

// ChatTopLogprob is one of the most likely tokens of a step.
type ChatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// CompletionLogprobs are a text completion choice's token
// log-probabilities, in the legacy completions shape: parallel arrays
// with an entry per generated token.
type CompletionLogprobs struct {
	Tokens        []string  `json:"tokens"`
	TokenLogprobs []float32 `json:"token_logprobs"`
	// TopLogprobs are the most likely tokens at each step, and the
	// sampled one when it is not among them.
	TopLogprobs []TopLogprobs `json:"top_logprobs"`
	// TextOffset is each token's offset in the choice's text, in
	// characters (Unicode code points) from the start of the completion;
	// a token that begins inside a character has that character's offset.
	TextOffset []int `json:"text_offset"`
}

// TopLogprob is a token's text and its log-probability.
type TopLogprob struct {
	Token   string
	Logprob float32
}

// TopLogprobs is a JSON object mapping token texts to log-probabilities,
// its keys in the slice's order (most likely first). A text that appears
// twice is written once, with its first value.
type TopLogprobs []TopLogprob

// MarshalJSON writes the object with its keys in order.
func (t TopLogprobs) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	seen := make(map[string]bool, len(t))
	for _, e := range t {
		k, err := json.Marshal(e.Token)
		if err != nil {
			return nil, err
		}
		if seen[string(k)] {
			continue
		}
		seen[string(k)] = true
		v, err := json.Marshal(e.Logprob)
		if err != nil {
			return nil, err
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(append(append(b, k...), ':'), v...)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON reads the object, keeping its keys' order.
func (t *TopLogprobs) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(b))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return fmt.Errorf("wire: top_logprobs entry is not an object")
	}
	*t = (*t)[:0]
	for d.More() {
		k, err := d.Token()
		if err != nil {
			return err
		}
		var v float32
		if err := d.Decode(&v); err != nil {
			return err
		}
		*t = append(*t, TopLogprob{Token: k.(string), Logprob: v})
	}
	_, err := d.Token()
	return err
}

// Object names of the embeddings endpoint.
const (
	ObjectList      = "list"
	ObjectEmbedding = "embedding"
)

// Encoding formats of EmbeddingRequest.EncodingFormat.
const (
	EncodingFloat  = "float"
	EncodingBase64 = "base64"
)

// EmbeddingRequest is the body of POST /v1/embeddings. Input is a string,
// an array of strings, an array of token ids or an array of arrays of
// token ids.
type EmbeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format,omitempty"` // "float" (default) or "base64"
	Dimensions     *int            `json:"dimensions,omitempty"`
	User           string          `json:"user,omitempty"`
}

// EmbeddingList is the response of POST /v1/embeddings.
type EmbeddingList struct {
	Object string         `json:"object"` // ObjectList
	Data   []Embedding    `json:"data"`
	Model  string         `json:"model"`
	Usage  EmbeddingUsage `json:"usage"`
}

// Embedding is one input's embedding.
type Embedding struct {
	Object    string `json:"object"` // ObjectEmbedding
	Index     int    `json:"index"`
	Embedding Vector `json:"embedding"`
}

// EmbeddingUsage counts the inputs' tokens.
type EmbeddingUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// Vector is an embedding as it goes on the wire: a JSON array of numbers,
// or with Base64 set a string, the base64 of the values as little-endian
// float32 bytes (encoding_format "base64").
type Vector struct {
	Floats []float32
	Base64 bool
}

// MarshalJSON writes the array, or the base64 string.
func (v Vector) MarshalJSON() ([]byte, error) {
	if !v.Base64 {
		if v.Floats == nil {
			return []byte("[]"), nil
		}
		return json.Marshal(v.Floats)
	}
	b := make([]byte, 4*len(v.Floats))
	for i, f := range v.Floats {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return json.Marshal(base64.StdEncoding.EncodeToString(b))
}

// UnmarshalJSON reads either form.
func (v *Vector) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		v.Base64 = false
		return json.Unmarshal(b, &v.Floats)
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("embedding: %w", err)
	}
	if len(raw)%4 != 0 {
		return fmt.Errorf("embedding: %d base64 bytes are not float32 values", len(raw))
	}
	v.Base64 = true
	v.Floats = make([]float32, len(raw)/4)
	for i := range v.Floats {
		v.Floats[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return nil
}

// Transcription is the body of a whole answer of POST
// /v1/audio/transcriptions (response_format json).
type Transcription struct {
	Text  string             `json:"text"`
	Usage TranscriptionUsage `json:"usage"`
}

// TranscriptionUsage is a transcription's token accounting (type
// "tokens").
type TranscriptionUsage struct {
	Type         string `json:"type"`
	InputTokens  int    `json:"input_tokens"`
	OutputTokens int    `json:"output_tokens"`
	TotalTokens  int    `json:"total_tokens"`
}

// TranscriptionVerbose is the body of a whole answer of POST
// /v1/audio/transcriptions with response_format verbose_json: OpenAI's
// (Whisper's) fields, the audio's duration in seconds, and its usage by
// duration.
type TranscriptionVerbose struct {
	Task     string                 `json:"task"` // "transcribe"
	Language string                 `json:"language"`
	Duration float64                `json:"duration"`
	Text     string                 `json:"text"`
	Segments []TranscriptionSegment `json:"segments"`
	Usage    TranscriptionDuration  `json:"usage"`
}

// TranscriptionSegment is a stretch of a transcription's audio and its
// text, as Whisper reports it.
type TranscriptionSegment struct {
	ID               int     `json:"id"`
	Seek             int     `json:"seek"`
	Start            float64 `json:"start"`
	End              float64 `json:"end"`
	Text             string  `json:"text"`
	Tokens           []int32 `json:"tokens"`
	Temperature      float64 `json:"temperature"`
	AvgLogprob       float64 `json:"avg_logprob"`
	CompressionRatio float64 `json:"compression_ratio"`
	NoSpeechProb     float64 `json:"no_speech_prob"`
}

// TranscriptionDuration is a transcription's usage by the duration of
// its audio (type "duration").
type TranscriptionDuration struct {
	Type    string  `json:"type"`
	Seconds float64 `json:"seconds"`
}

// TranscriptEvent is an event of a streamed transcription: a
// "transcript.text.delta" with Delta, then a "transcript.text.done" with
// the whole Text and the Usage.
type TranscriptEvent struct {
	Type  string              `json:"type"`
	Delta string              `json:"delta,omitempty"`
	Text  *string             `json:"text,omitempty"`
	Usage *TranscriptionUsage `json:"usage,omitempty"`
}

// The types of TranscriptEvent.
const (
	TranscriptTextDelta = "transcript.text.delta"
	TranscriptTextDone  = "transcript.text.done"
)
