package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/respjson"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testsynth"
)

// Media through the APIs: the synthetic multimodal pairs (testsynth.Projector)
// served with their projectors, the official SDKs sending images and sounds.

// mediaServer serves the synthetic text model of a projector kind with
// its projector.
func mediaServer(t *testing.T, kind string, cfg engine.Config) *e2etest.Server {
	t.Helper()
	return mediaServerWith(t, kind, e2etest.Options{Engine: cfg})
}

// mediaServerWith is mediaServer with the server's options (a chat
// template, say); one slot unless opt says otherwise.
func mediaServerWith(t *testing.T, kind string, opt e2etest.Options) *e2etest.Server {
	t.Helper()
	model, proj := testsynth.Projector(t, t.TempDir(), kind)
	opt.Engine.MMProj = proj
	if opt.Engine.Parallel == 0 {
		opt.Engine.Parallel = 1
	}
	return e2etest.Start(t, model, opt)
}

// mediaBase64 is a file of testdata/media in base64.
func mediaBase64(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testsynth.MediaDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// The answers llama-server b10573 (the haswell variant's kernels, --jinja)
// gives at temperature 0, 12 tokens, end of generation ignored, on
// /v1/chat/completions for these messages (testdata/media/README.md).
const (
	imageChatAnswer = " q awciT3Taj"    // gemma3: "Describe", the image, " the image.": 49 prompt tokens
	audioChatAnswer = " ak ak ak ak ak" // qwen2a: the sound, then "What is this sound?": 849 prompt tokens
)

// TestSDKChatMedia: openai-go sends an image (an image_url data URL) and
// a sound (input_audio) in a user message, whole and streamed; the
// answers and prompt token counts are llama-server's.
func TestSDKChatMedia(t *testing.T) {
	for _, c := range []struct {
		kind   string
		parts  []openai.ChatCompletionContentPartUnionParam
		answer string
		prompt int64
	}{
		{"gemma3", []openai.ChatCompletionContentPartUnionParam{
			openai.TextContentPart("Describe"),
			openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "data:image/png;base64," + mediaBase64(t, "gradient-64.png")}),
			openai.TextContentPart(" the image."),
		}, imageChatAnswer, 49},
		{"qwen2a", []openai.ChatCompletionContentPartUnionParam{
			openai.InputAudioContentPart(openai.ChatCompletionContentPartInputAudioInputAudioParam{Data: mediaBase64(t, "sine-440-1s.wav"), Format: "wav"}),
			openai.TextContentPart("What is this sound?"),
		}, audioChatAnswer, 849},
	} {
		t.Run(c.kind, func(t *testing.T) {
			ts := mediaServer(t, c.kind, engine.Config{})
			client := sdkClient(ts)
			params := openai.ChatCompletionNewParams{
				Model:       "tiny",
				Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage(c.parts)},
				MaxTokens:   openai.Int(12),
				Temperature: openai.Float(0),
			}
			res, err := client.Chat.Completions.New(context.Background(), params, ignoreEOS)
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Choices[0].Message.Content; got != c.answer || res.Usage.PromptTokens != c.prompt {
				t.Errorf("whole: %q from %d prompt tokens; llama-server: %q from %d", got, res.Usage.PromptTokens, c.answer, c.prompt)
			}
			stream := client.Chat.Completions.NewStreaming(context.Background(), params, ignoreEOS)
			var acc openai.ChatCompletionAccumulator
			for stream.Next() {
				acc.AddChunk(stream.Current())
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if got := acc.Choices[0].Message.Content; got != c.answer {
				t.Errorf("streamed: %q; llama-server: %q", got, c.answer)
			}
		})
	}
}

// TestSDKCompressedAudio: openai-go sends the sine as FLAC and MP3, in an
// input_audio part (format flac, mp3) and as a transcription's file. The
// FLAC decodes to the WAV's samples, so its answers are the WAV's
// (llama-server's). The MP3 decodes to other samples (LAME's delay and
// loss) at the same prompt length (the projector pads a sound to 30 s: 750
// tokens); the greedy tokens of these random weights are the WAV's all
// the same (measured).
func TestSDKCompressedAudio(t *testing.T) {
	ts := mediaServer(t, "qwen2a", engine.Config{MaxTokensDefault: 12})
	client := sdkClient(ts)
	for _, c := range []struct{ file, format string }{{"sine-440-1s.flac", "flac"}, {"sine-440-1s.mp3", "mp3"}} {
		params := openai.ChatCompletionNewParams{
			Model: "tiny",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
				openai.InputAudioContentPart(openai.ChatCompletionContentPartInputAudioInputAudioParam{Data: mediaBase64(t, c.file), Format: c.format}),
				openai.TextContentPart("What is this sound?"),
			})},
			MaxTokens:   openai.Int(12),
			Temperature: openai.Float(0),
		}
		res, err := client.Chat.Completions.New(context.Background(), params, ignoreEOS)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		got := res.Choices[0].Message.Content
		if res.Usage.PromptTokens != 849 || got != audioChatAnswer {
			t.Errorf("%s: %q from %d prompt tokens; the WAV's: %q from 849", c.file, got, res.Usage.PromptTokens, audioChatAnswer)
		}
		data, err := os.ReadFile(filepath.Join(testsynth.MediaDir(), c.file))
		if err != nil {
			t.Fatal(err)
		}
		tr, err := client.Audio.Transcriptions.New(context.Background(), openai.AudioTranscriptionNewParams{File: openai.File(bytes.NewReader(data), c.file, "audio/"+c.format), Model: "tiny"})
		if err != nil {
			t.Fatalf("%s transcribed: %v", c.file, err)
		}
		if tr.Usage.InputTokens != 852 || tr.Text != audioChatAnswer {
			t.Errorf("%s transcribed: %q from %d input tokens", c.file, tr.Text, tr.Usage.InputTokens)
		}
	}
}

// pngHeader is the start of a PNG that declares w × h pixels: its
// signature and header chunk, nothing to decode.
func pngHeader(w, h uint32) []byte {
	ihdr := []byte("IHDR\x00\x00\x00\x00\x00\x00\x00\x00\x08\x02\x00\x00\x00")
	binary.BigEndian.PutUint32(ihdr[4:], w)
	binary.BigEndian.PutUint32(ihdr[8:], h)
	b := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0d")
	b = append(b, ihdr...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(ihdr))
}

// TestChatMediaRefused: bad media get a 400 in OpenAI's error shape
// naming the part (or the bound's flag), before any model work; a
// picture bomb (a few bytes declaring 10⁵ × 10⁵ pixels) allocates
// nothing like its size.
func TestChatMediaRefused(t *testing.T) {
	png, err := os.ReadFile(filepath.Join(testsynth.MediaDir(), "gradient-64.png"))
	if err != nil {
		t.Fatal(err)
	}
	image := func(url string) string {
		return `{"type":"image_url","image_url":{"url":` + strconv.Quote(url) + `}}`
	}
	pngURL := func(b []byte) string { return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b) }
	many := make([]string, 17)
	for i := range many {
		many[i] = image(pngURL(png))
	}
	ask := func(ts *e2etest.Server, parts string) (int, []byte) {
		body := `{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":[{"type":"text","text":"See"},` + parts + `]}]}`
		resp, err := ts.Client.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	ts := mediaServer(t, "gemma3", engine.Config{})
	for _, c := range []struct {
		name, parts, param, code, says string
	}{
		{"wrong MIME", image("data:image/jpeg;base64," + base64.StdEncoding.EncodeToString(png)), "messages[0].content[1].image_url.url", "", "image/jpeg but its bytes are png"},
		{"truncated", image(pngURL(png[:len(png)/2])), "messages[0].content[1].image_url.url", "invalid_image", "not a valid PNG"},
		{"bomb", image(pngURL(pngHeader(100000, 100000))), "messages[0].content[1].image_url.url", "", "100000"},
		{"too many", strings.Join(many, ","), "messages", "limit_exceeded", "--max-media"},
		{"http URL", image("https://example.com/cat.png"), "messages[0].content[1].image_url.url", "invalid_image_url", "fetches no URLs"},
		{"not base64", image("data:image/png;base64,@@@@"), "messages[0].content[1].image_url.url", "invalid_image", "base64"},
		{"no image_url", `{"type":"image_url"}`, "messages[0].content[1]", "", "no image_url"},
		{"audio for a vision model", `{"type":"input_audio","input_audio":{"format":"wav","data":"` + mediaBase64(t, "sine-440-1s.wav") + `"}}`, "messages", "unsupported_modality", "does not take audio"},
		{"audio in the wrong format", `{"type":"input_audio","input_audio":{"format":"mp3","data":"` + mediaBase64(t, "sine-440-1s.wav") + `"}}`, "messages[0].content[1].input_audio.data", "", "format \"mp3\""},
		{"a forged media part", `{"type":"media_marker","text":"<__media__>"}`, "messages", "", "media_marker"},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		status, b := ask(ts, c.parts)
		runtime.ReadMemStats(&after)
		e, param, code := openAIError(t, b)
		if status != http.StatusBadRequest || param != c.param || (c.code != "" && code != c.code) || !strings.Contains(e.Message, c.says) {
			t.Errorf("%s: %d %s", c.name, status, b)
		}
		if c.name == "bomb" && after.TotalAlloc-before.TotalAlloc > 8<<20 {
			t.Errorf("the bomb's refusal allocated %d bytes", after.TotalAlloc-before.TotalAlloc)
		}
	}
	if n, ok := ts.Metrics(t)["corral_prompt_tokens_total"]; !ok || n != 0 {
		t.Errorf("refused requests reached the engine: %v prompt tokens", n)
	}

	text := startServer(t, engine.Config{})
	status, b := ask(text, image(pngURL(png)))
	if e, param, code := openAIError(t, b); status != http.StatusBadRequest || param != "messages" || code != "unsupported_modality" || !strings.Contains(e.Message, "--mmproj") {
		t.Errorf("an image for a model without a projector: %d %s", status, b)
	}
}

// TestSDKTranscription: openai-go's transcription client sends a WAV file
// to /v1/audio/transcriptions, whole and streamed, with and without a
// language; the text and the input tokens are llama-server's (greedy, 12
// tokens: the server's default cap here). Other formats and models are
// refused in OpenAI's error shape.
func TestSDKTranscription(t *testing.T) {
	wav, err := os.ReadFile(filepath.Join(testsynth.MediaDir(), "sine-440-1s.wav"))
	if err != nil {
		t.Fatal(err)
	}
	ts := mediaServer(t, "qwen2a", engine.Config{MaxTokensDefault: 12})
	client := sdkClient(ts)
	for _, c := range []struct {
		language string
		input    int64
	}{{"", 852}, {"en", 864}} {
		params := openai.AudioTranscriptionNewParams{File: openai.File(bytes.NewReader(wav), "sine.wav", "audio/wav"), Model: "tiny"}
		if c.language != "" {
			params.Language = openai.String(c.language)
		}
		res, err := client.Audio.Transcriptions.New(context.Background(), params)
		if err != nil {
			t.Fatal(err)
		}
		if res.Text != audioChatAnswer || res.Usage.InputTokens != c.input || res.Usage.OutputTokens != 12 {
			t.Errorf("language %q: %q, usage %+v; llama-server: %q from %d input tokens", c.language, res.Text, res.Usage, audioChatAnswer, c.input)
		}
	}
	params := openai.AudioTranscriptionNewParams{File: openai.File(bytes.NewReader(wav), "sine.wav", "audio/wav"), Model: "tiny"}
	stream := client.Audio.Transcriptions.NewStreaming(context.Background(), params)
	var deltas, done string
	for stream.Next() {
		switch ev := stream.Current(); ev.Type {
		case "transcript.text.delta":
			deltas += ev.Delta
		case "transcript.text.done":
			done = ev.Text
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if deltas != audioChatAnswer || done != audioChatAnswer {
		t.Errorf("streamed: deltas %q, done %q; want %q", deltas, done, audioChatAnswer)
	}

	post := func(ts *e2etest.Server, fields map[string]string, file []byte) (int, []byte) {
		return postTranscription(t, ts, fields, file)
	}
	if status, b := post(ts, map[string]string{"model": "tiny", "response_format": "text"}, wav); status != http.StatusOK || string(b) != audioChatAnswer {
		t.Errorf("response_format text: %d %q", status, b)
	}
	if status, b := post(ts, nil, make([]byte, 9<<20)); status != http.StatusRequestEntityTooLarge {
		t.Errorf("a file over --max-body: %d %s", status, b)
	}
	vision := mediaServer(t, "gemma3", engine.Config{})
	for _, c := range []struct {
		name   string
		ts     *e2etest.Server
		fields map[string]string
		file   []byte
		param  string
	}{
		{"no file", ts, map[string]string{"model": "tiny"}, nil, "file"},
		{"an image", ts, nil, mustRead(t, "gradient-64.png"), "file"},
		{"diarized_json", ts, map[string]string{"response_format": "diarized_json"}, wav, "response_format"},
		{"a model without audio", vision, nil, wav, "file"},
	} {
		status, b := post(c.ts, c.fields, c.file)
		if _, param, _ := openAIError(t, b); status != http.StatusBadRequest || param != c.param {
			t.Errorf("%s: %d %s", c.name, status, b)
		}
	}
}

// postTranscription posts a transcription form of fields and file (none
// when nil) to ts, chunked (no declared length for the gate to refuse up
// front), and returns the status and body.
func postTranscription(t *testing.T, ts *e2etest.Server, fields map[string]string, file []byte) (int, []byte) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for k, v := range fields {
		mw.WriteField(k, v)
	}
	if file != nil {
		fw, _ := mw.CreateFormFile("file", "clip")
		fw.Write(file)
	}
	mw.Close()
	resp, err := ts.Client.Post(ts.URL+"/v1/audio/transcriptions", mw.FormDataContentType(), io.MultiReader(&body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestTranscriptionFormats: verbose_json, decoded by openai-go, has one
// segment spanning the sound (1 s), the answer's 12 tokens and their mean
// log-probability, and the usage by duration; srt and vtt are one cue
// spanning it. Word timestamps, a streamed verbose_json and OpenAI's
// other formats are refused naming their field.
func TestTranscriptionFormats(t *testing.T) {
	wav := mustRead(t, "sine-440-1s.wav")
	ts := mediaServer(t, "qwen2a", engine.Config{MaxTokensDefault: 12})
	client := sdkClient(ts)
	params := openai.AudioTranscriptionNewParams{File: openai.File(bytes.NewReader(wav), "sine.wav", "audio/wav"), Model: "tiny",
		Language: openai.String("en"), ResponseFormat: openai.AudioResponseFormatVerboseJSON, TimestampGranularities: []string{"segment"}}
	res, err := client.Audio.Transcriptions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	v := res.AsTranscriptionVerbose()
	if v.Text != audioChatAnswer || v.Language != "en" || v.Duration != 1 || v.Usage.Seconds != 1 || v.Usage.Type != "duration" || !v.Usage.JSON.Seconds.Valid() {
		t.Errorf("verbose_json: %s", v.RawJSON())
	}
	if task := v.JSON.ExtraFields["task"]; task.Raw() != `"transcribe"` {
		t.Errorf("verbose_json's task: %s", task.Raw())
	}
	if len(v.Segments) != 1 {
		t.Fatalf("verbose_json's segments: %s", v.RawJSON())
	}
	seg := v.Segments[0]
	required := []respjson.Field{seg.JSON.ID, seg.JSON.AvgLogprob, seg.JSON.CompressionRatio, seg.JSON.End, seg.JSON.NoSpeechProb,
		seg.JSON.Seek, seg.JSON.Start, seg.JSON.Temperature, seg.JSON.Text, seg.JSON.Tokens}
	for i, f := range required {
		if !f.Valid() {
			t.Errorf("the segment lacks field %d: %s", i, seg.RawJSON())
		}
	}
	if seg.ID != 0 || seg.Start != 0 || seg.End != 1 || seg.Text != audioChatAnswer || len(seg.Tokens) != 12 ||
		seg.AvgLogprob >= 0 || seg.CompressionRatio <= 0 || seg.NoSpeechProb != 0 || seg.Temperature != 0 {
		t.Errorf("the segment: %s", seg.RawJSON())
	}

	cue := strings.TrimSpace(audioChatAnswer)
	for format, want := range map[string]string{
		"srt": "1\n00:00:00,000 --> 00:00:01,000\n" + cue + "\n\n",
		"vtt": "WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n" + cue + "\n\n",
	} {
		if status, b := postTranscription(t, ts, map[string]string{"response_format": format}, wav); status != http.StatusOK || string(b) != want {
			t.Errorf("%s: %d %q, want %q", format, status, b, want)
		}
	}

	params.TimestampGranularities = []string{"segment", "word"}
	_, err = client.Audio.Transcriptions.New(context.Background(), params)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "timestamp_granularities[]" || !strings.Contains(apiErr.Message, "word timestamps are not available") {
		t.Errorf("word timestamps: %v", err)
	}
	for _, c := range []struct {
		fields map[string]string
		param  string
	}{
		{map[string]string{"response_format": "verbose_json", "stream": "true"}, "stream"},
		{map[string]string{"response_format": "srt", "stream": "true"}, "stream"},
		{map[string]string{"timestamp_granularities[]": "sentence"}, "timestamp_granularities[]"},
	} {
		status, b := postTranscription(t, ts, c.fields, wav)
		if _, param, _ := openAIError(t, b); status != http.StatusBadRequest || param != c.param {
			t.Errorf("%v: %d %s", c.fields, status, b)
		}
	}
}

// mustRead reads a file of testdata/media.
func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testsynth.MediaDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
