package openai

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
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
// prompt, language, response_format, temperature, stream,
// timestamp_granularities[], max_tokens as llama-server takes it) on a
// model that takes audio, answered as llama-server answers it: a chat of
// one user message, the prompt ("Transcribe audio to text" by default,
// then " (language: X)" when given) followed by the sound, through the
// same scheduler as every other request. The model gives no timestamps:
// verbose_json, srt and vtt have one segment spanning the whole sound.

// transcriptionPrompt is the user text before the sound, llama.cpp's
// (common_chat_get_asr_prompt).
const transcriptionPrompt = "Transcribe audio to text"

// maxFormField bounds a form field other than the file.
const maxFormField = 64 << 10

// The response formats of a transcription, OpenAI's.
const (
	formatJSON    = "json"
	formatText    = "text"
	formatVerbose = "verbose_json"
	formatSRT     = "srt"
	formatVTT     = "vtt"
)

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
		case "timestamp_granularities[]", "timestamp_granularities":
			switch v {
			case "segment": // the one segment there is
			case "word":
				return serving.Invalid(name, "word timestamps are not available: the model gives no timestamps (with 'segment', verbose_json has one segment spanning the audio)")
			default:
				return serving.Invalid(name, "'%s' may hold segment or word, got %q", name, v)
			}
		case "max_tokens":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return serving.Invalid(name, "'max_tokens' must be a whole number >= 1, got %q", v)
			}
			body.maxTokens = &n
		}
		// Other fields (include[], chunking_strategy) change nothing
		// here.
	}
	return nil
}

// Check refuses what no model serves and builds the request.
func (body *transcriptionRequest) Check(lim *serving.Limits) *serving.Error {
	if body.file == nil {
		return serving.Invalid("file", "'file' is required: the audio to transcribe")
	}
	switch body.format {
	case "", formatJSON, formatText:
	case formatVerbose, formatSRT, formatVTT:
		// OpenAI gives these formats only with whisper-1, which ignores
		// stream; a streaming client would then read no event at all.
		if body.stream {
			return serving.Invalid("stream", "'response_format' %s is not streamed: stream json (transcript.text events) or ask for %s without 'stream'", body.format, body.format)
		}
	default:
		return serving.Invalid("response_format", "'response_format' %q is not supported: want json, text, verbose_json, srt or vtt", body.format)
	}
	temp := 0.0 // OpenAI's default for transcriptions
	if body.temperature != nil {
		temp = *body.temperature
	}
	var e *serving.Error
	if body.req, e = transcriptionChat(body.prompt, body.language, "file", temp, lim); e != nil {
		return e
	}
	body.req.Stream = body.stream
	if body.format == formatVerbose { // for its segment's tokens and avg_logprob
		body.req.Logprobs, body.req.Params.Logprobs = true, "response_format"
	}
	if body.maxTokens != nil {
		body.req.MaxTokens = *body.maxTokens
	}
	return nil
}

// transcriptionChat is the request that transcribes one sound (its
// Media, for the caller to set): a chat of one user message, prompt
// (transcriptionPrompt when "") and " (language: X)" when language is
// given, then the sound, sampled at temp. param names the sound's field
// in errors.
func transcriptionChat(prompt, language, param string, temp float64, lim *serving.Limits) (serving.Request, *serving.Error) {
	text := prompt
	if text == "" {
		text = transcriptionPrompt
	}
	if language != "" {
		text += " (language: " + language + ")"
	}
	if e := lim.CheckPrompt(text, "prompt"); e != nil {
		return serving.Request{}, e
	}
	content, _ := json.Marshal([]json.RawMessage{textPart(text), chat.MediaPart(0)})
	return serving.Request{
		Messages: []chat.Message{{Role: "user", Content: content}},
		Sampling: serving.Sampling{Temperature: &temp},
		Params:   serving.Params{Prompt: param},
	}, nil
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
	enc := &transcriptEncoder{format: body.format, language: body.language, temperature: *body.req.Sampling.Temperature,
		duration: float64(len(body.req.Media[0].PCM)) / serving.AudioRate}
	return x.Core.Generate(x, req, g, enc)
}

// transcriptEncoder shapes a transcription's answer: {"text", "usage"},
// the text alone, verbose_json or subtitles as its format says, or a
// stream of transcript.text.delta events and a transcript.text.done.
type transcriptEncoder struct {
	format, language string
	temperature      float64
	duration         float64 // seconds of the sound
	all              strings.Builder
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
	switch f.format {
	case formatText:
		return serving.PlainText(a.Content)
	case formatSRT, formatVTT:
		return serving.PlainText(subtitles(f.format, a.Content, f.duration))
	case formatVerbose:
		return f.verbose(a)
	}
	return &wire.Transcription{Text: a.Content, Usage: transcriptionUsage(res.Usage)}
}

// verbose is the verbose_json answer: one segment spanning the sound, its
// tokens and their mean log-probability from the answer's logprobs, its
// compression ratio as Whisper computes it (the text's bytes over their
// zlib-compressed size); the model gives no probability of no speech (0).
func (f *transcriptEncoder) verbose(a serving.Answer) *wire.TranscriptionVerbose {
	seg := wire.TranscriptionSegment{End: f.duration, Text: a.Content, Tokens: make([]int32, len(a.Logprobs)),
		Temperature: f.temperature, CompressionRatio: compressionRatio(a.Content)}
	sum := 0.0
	for i, lp := range a.Logprobs {
		seg.Tokens[i] = lp.Token
		sum += float64(lp.Logprob)
	}
	if len(a.Logprobs) > 0 {
		seg.AvgLogprob = sum / float64(len(a.Logprobs))
	}
	return &wire.TranscriptionVerbose{Task: "transcribe", Language: f.language, Duration: f.duration, Text: a.Content,
		Segments: []wire.TranscriptionSegment{seg}, Usage: wire.TranscriptionDuration{Type: "duration", Seconds: f.duration}}
}

// compressionRatio is Whisper's: text's bytes over their zlib-compressed
// size, at the default level as Whisper's; 0 for no text. Go's zlib ends
// its stream with an empty block, about 4 bytes more than Python's, so
// the ratio of a short text is a little lower than Whisper's.
func compressionRatio(text string) float64 {
	if text == "" {
		return 0
	}
	var b bytes.Buffer
	w := zlib.NewWriter(&b)
	io.WriteString(w, text) // a bytes.Buffer takes every write
	w.Close()
	return float64(len(text)) / float64(b.Len())
}

// subtitles is text as one SubRip (srt) or WebVTT (vtt) cue spanning
// the sound's seconds. The cue's text has no blank line (which would end
// it) and no "-->" (which would read as timing), as Whisper writes it.
func subtitles(format, text string, seconds float64) string {
	var lines []string
	for l := range strings.Lines(strings.ReplaceAll(text, "-->", "->")) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	cue := strings.Join(lines, "\n")
	if format == formatSRT {
		return "1\n" + cueTime(0, ',') + " --> " + cueTime(seconds, ',') + "\n" + cue + "\n\n"
	}
	return "WEBVTT\n\n" + cueTime(0, '.') + " --> " + cueTime(seconds, '.') + "\n" + cue + "\n\n"
}

// cueTime is a subtitle timestamp, HH:MM:SS then sep and milliseconds.
func cueTime(seconds float64, sep byte) string {
	ms := int64(math.Round(seconds * 1000))
	return fmt.Sprintf("%02d:%02d:%02d%c%03d", ms/3600000, ms/60000%60, ms/1000%60, sep, ms%1000)
}

func (f *transcriptEncoder) Error(e *serving.Error) any { return Envelope(e) }

func (f *transcriptEncoder) Ping() any { return nil }

// transcriptionUsage is a transcription's usage, type "tokens".
func transcriptionUsage(u engine.Usage) wire.TranscriptionUsage {
	return wire.TranscriptionUsage{Type: "tokens", InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
}

// Transcribe transcribes the sound of a voice turn (package voice's
// Generator): body is its response.create, whose "input_audio" ({"data":
// base64, "format": "wav"}) is decoded within the Core's limits and media
// budget before the model is leased (a sound over them takes no slot),
// then transcribed as POST /v1/audio/transcriptions transcribes a file
// with its defaults, on the model "model" names, through the same
// scheduler as every other request.
func (p Pacer) Transcribe(ctx context.Context, body []byte) (string, *serving.Error) {
	var t struct {
		Model      string             `json:"model"`
		KeepAlive  *serving.KeepAlive `json:"keep_alive"`
		InputAudio *struct {
			Data   string `json:"data"`
			Format string `json:"format"`
		} `json:"input_audio"`
	}
	if e := serving.DecodeJSON(body, &t); e != nil {
		return "", e
	}
	if t.InputAudio == nil || t.InputAudio.Data == "" {
		return "", serving.Invalid("input_audio.data", "'input_audio.data' is required: the sound, base64 WAV")
	}
	req, e := transcriptionChat("", "", "input_audio", 0, p.Core.Limits())
	if e != nil {
		return "", e
	}
	sound := &turnSound{data: t.InputAudio.Data, format: t.InputAudio.Format}
	release, e := p.Core.DecodeMediaBody(ctx, sound)
	if e != nil {
		return "", e
	}
	defer release()
	req.Media = sound.media
	s, done, e := p.Core.StartPaced(ctx, serving.PacedRequest{Model: t.Model, KeepAlive: t.KeepAlive, Request: &req})
	if e != nil {
		return "", e
	}
	defer done()
	defer s.Cancel()
	var text strings.Builder
	for {
		c, err := s.Recv(ctx) // io.EOF at the end, or ctx's error
		if err != nil {
			break
		}
		text.WriteString(c.Text)
	}
	// The engine may end the stream (cancelled) before Recv sees ctx end.
	if err := ctx.Err(); err != nil {
		return "", &serving.Error{Status: 499, Message: "the transcription was abandoned: " + err.Error()}
	}
	if e := serving.ResultError(s.Result()); e != nil {
		return "", e
	}
	return text.String(), nil
}

// turnSound is a voice turn's sound, as serving.Core.DecodeMediaBody
// decodes it.
type turnSound struct {
	data, format string
	media        []engine.Media
}

// CheckMedia decodes the sound within lim.
func (t *turnSound) CheckMedia(_ context.Context, lim *serving.Limits) *serving.Error {
	m, e := lim.AudioBase64(t.data, t.format, "input_audio.data")
	if e != nil {
		return e
	}
	t.media, t.data = []engine.Media{m}, ""
	return nil
}

// Media returns the decoded sound.
func (t *turnSound) Media() []engine.Media { return t.media }
