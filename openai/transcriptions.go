package openai

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// POST /v1/audio/transcriptions: OpenAI's multipart form (file, model,
// prompt, language, response_format, temperature, stream, max_tokens as
// llama-server takes it) on a model that takes audio, answered as
// llama-server answers it: a chat of one user message, the prompt
// ("Transcribe audio to text" by default, then " (language: X)" when
// given) followed by the sound, through the same scheduler as every
// other request.

// transcriptionPrompt is the user text before the sound, llama.cpp's
// (common_chat_get_asr_prompt).
const transcriptionPrompt = "Transcribe audio to text"

// maxFormField bounds a form field other than the file.
const maxFormField = 64 << 10

// transcriptionRequest is the form of POST /v1/audio/transcriptions.
type transcriptionRequest struct {
	model, prompt, language, format string
	file                            []byte
	temperature                     *float64
	maxTokens                       *int
	stream                          bool
	req                             serving.Request
}

// ReadQuery reads the multipart form (in place of a JSON body): the
// file, within the server's body bound, and the other fields, each
// within maxFormField bytes.
func (body *transcriptionRequest) ReadQuery(r *http.Request) *serving.Error {
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "multipart/form-data" {
		return serving.Invalid("", "the body must be multipart/form-data (file, model, ...)")
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return serving.Invalid("", "the body is not a multipart form: %v", err)
	}
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return serving.ReadError(err)
		}
		name := p.FormName()
		if name == "file" {
			if body.file, err = io.ReadAll(p); err != nil {
				return serving.ReadError(err)
			}
			continue
		}
		b, err := io.ReadAll(io.LimitReader(p, maxFormField+1))
		if err != nil {
			return serving.ReadError(err)
		}
		if len(b) > maxFormField {
			return serving.Invalid(name, "'%s' is over %d bytes", name, maxFormField)
		}
		v := string(b)
		switch name {
		case "model":
			body.model = v
		case "prompt":
			body.prompt = v
		case "language":
			body.language = v
		case "response_format":
			body.format = v
		case "stream":
			if body.stream, err = strconv.ParseBool(v); err != nil {
				return serving.Invalid(name, "'stream' must be true or false, got %q", v)
			}
		case "temperature":
			t, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return serving.Invalid(name, "'temperature' must be a number, got %q", v)
			}
			body.temperature = &t
		case "max_tokens":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return serving.Invalid(name, "'max_tokens' must be a whole number >= 1, got %q", v)
			}
			body.maxTokens = &n
		}
		// Other fields (timestamp_granularities[], include[],
		// chunking_strategy) change nothing here.
	}
	return nil
}

// Check refuses what no model serves and builds the request.
func (body *transcriptionRequest) Check(lim *serving.Limits) *serving.Error {
	if body.file == nil {
		return serving.Invalid("file", "'file' is required: the audio to transcribe")
	}
	switch body.format {
	case "", "json", "text":
	default:
		return serving.Invalid("response_format", "'response_format' %q is not supported: want json or text", body.format)
	}
	text := body.prompt
	if text == "" {
		text = transcriptionPrompt
	}
	if body.language != "" {
		text += " (language: " + body.language + ")"
	}
	if e := lim.CheckPrompt(text, "prompt"); e != nil {
		return e
	}
	content, _ := json.Marshal([]json.RawMessage{textPart(text), chat.MediaPart(0)})
	temp := 0.0 // OpenAI's default for transcriptions
	if body.temperature != nil {
		temp = *body.temperature
	}
	body.req = serving.Request{
		Messages: []chat.Message{{Role: "user", Content: content}},
		Sampling: serving.Sampling{Temperature: &temp},
		Stream:   body.stream,
		Params:   serving.Params{Prompt: "file"},
	}
	if body.maxTokens != nil {
		body.req.MaxTokens = *body.maxTokens
	}
	return nil
}

// textPart is a text content part.
func textPart(s string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"type": "text", "text": s})
	return b
}

// CheckMedia decodes the file, a sound within lim.
func (body *transcriptionRequest) CheckMedia(_ context.Context, lim *serving.Limits) *serving.Error {
	m, e := lim.Audio(body.file, "", "file")
	if e != nil {
		return e
	}
	body.req.Media = []engine.Media{m}
	body.file = nil
	return nil
}

// Media returns the decoded sound.
func (body *transcriptionRequest) Media() []engine.Media { return body.req.Media }

// Lease names the model.
func (body *transcriptionRequest) Lease() (string, *serving.KeepAlive, bool) {
	return body.model, nil, true
}

// Transcriptions serves POST /v1/audio/transcriptions.
func Transcriptions(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	serving.Handle(c, w, r, WriteError, false, serveTranscription)
}

func serveTranscription(x *serving.Exchange, body *transcriptionRequest) *serving.Error {
	req, g, e := x.Core.Build(x.Model, &body.req)
	if e != nil {
		return e
	}
	g.Framing = serving.SSEDone // as llama-server's
	return x.Core.Generate(x, req, g, &transcriptEncoder{text: body.format == "text"})
}

// transcriptEncoder shapes a transcription's answer: {"text", "usage"}
// (or the text alone with response_format text), or a stream of
// transcript.text.delta events and a transcript.text.done.
type transcriptEncoder struct {
	text bool
	all  strings.Builder
}

func (f *transcriptEncoder) Start() []any { return nil }

func (f *transcriptEncoder) Deltas(ds []wire.Delta, _ []wire.ToolCall, _ engine.Chunk) []any {
	var evs []any
	for _, d := range ds {
		if d.Content != nil && *d.Content != "" {
			f.all.WriteString(*d.Content)
			evs = append(evs, &wire.TranscriptEvent{Type: wire.TranscriptTextDelta, Delta: *d.Content})
		}
	}
	return evs
}

func (f *transcriptEncoder) End(res engine.Result, _ string) []any {
	text, u := f.all.String(), transcriptionUsage(res.Usage)
	return []any{&wire.TranscriptEvent{Type: wire.TranscriptTextDone, Text: &text, Usage: &u}}
}

func (f *transcriptEncoder) Whole(a serving.Answer, res engine.Result) any {
	if f.text {
		return serving.PlainText(a.Content)
	}
	return &wire.Transcription{Text: a.Content, Usage: transcriptionUsage(res.Usage)}
}

func (f *transcriptEncoder) Error(e *serving.Error) any { return Envelope(e) }

func (f *transcriptEncoder) Ping() any { return nil }

// transcriptionUsage is a transcription's usage, type "tokens".
func transcriptionUsage(u engine.Usage) wire.TranscriptionUsage {
	return wire.TranscriptionUsage{Type: "tokens", InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
}
