package ollama

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	ollama "github.com/ollama/ollama/api"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/internal/servetest"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/registry"
	"github.com/corral-llm/corral/serving"
)

// Golden tests of Ollama's wire format against the examples of Ollama's
// own API documentation (docs/api.md of the ollama module in the module
// cache), and of our answers against Ollama's Go types.

// docBlock is one code block of the documentation: a JSON example, or
// the JSON body of a curl request.
type docBlock struct {
	lang string // "json", "json5" or "shell" (then text is the request body)
	text string
}

// ollamaDocs returns the code blocks of docs/api.md by "section / example"
// (its ## and #### headings), in order.
func ollamaDocs(t *testing.T) map[string][]docBlock {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/ollama/ollama").Output()
	if err != nil {
		t.Fatalf("find the ollama module: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs := make(map[string][]docBlock)
	var h2, h4, lang string
	var block []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case in && strings.HasPrefix(line, "```"):
			in = false
			text := strings.Join(block, "\n")
			switch lang {
			case "shell":
				if text = curlBody(text); text == "" {
					continue
				}
			case "json", "json5":
			default:
				continue
			}
			key := h2 + " / " + h4
			docs[key] = append(docs[key], docBlock{lang, text})
		case in:
			block = append(block, line)
		case strings.HasPrefix(line, "```"):
			in, lang, block = true, strings.TrimPrefix(line, "```"), nil
		case strings.HasPrefix(line, "## "):
			h2, h4 = strings.TrimPrefix(line, "## "), ""
		case strings.HasPrefix(line, "#### "):
			h4 = strings.TrimPrefix(line, "#### ")
		}
	}
	if len(docs) < 20 {
		t.Fatalf("docs/api.md has %d examples; the parser is out of step with it", len(docs))
	}
	return docs
}

// curlBody is the JSON body of a curl command (-d '...'), its //
// comments removed; "" when it has none.
func curlBody(cmd string) string {
	i := strings.Index(cmd, "-d '")
	j := strings.LastIndex(cmd, "'")
	if i < 0 || j <= i+4 {
		return ""
	}
	var lines []string
	for _, l := range strings.Split(cmd[i+4:j], "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "//") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// docExample returns block i of an example, which must exist.
func docExample(t *testing.T, docs map[string][]docBlock, key string, i int) docBlock {
	t.Helper()
	if len(docs[key]) <= i {
		t.Fatalf("docs/api.md has no block %d in %q", i, key)
	}
	return docs[key][i]
}

// docJSON parses block i of an example.
func docJSON(t *testing.T, docs map[string][]docBlock, key string, i int) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(docExample(t, docs, key, i).text), &m); err != nil {
		t.Fatalf("%s block %d: %v", key, i, err)
	}
	return m
}

// toMap is v as JSON objects decode.
func toMap(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// timeFields are the fields whose strings are RFC 3339 timestamps.
var timeFields = map[string]bool{"created_at": true, "modified_at": true, "expires_at": true}

// kind names the JSON type of a decoded value.
func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// sameShape checks that got has the fields of the documented want, with
// values of the same JSON types, and no others: but for the paths (such
// as "message.images") in missing, which corral leaves out, and in extra,
// which it adds. Numbers the documentation writes as integers (counts,
// durations in nanoseconds) must be integers, and timestamps RFC 3339.
func sameShape(t *testing.T, what string, want, got map[string]any, missing, extra []string) {
	t.Helper()
	var walk func(path string, want, got map[string]any)
	walk = func(path string, want, got map[string]any) {
		for k, wv := range want {
			p := path + k
			gv, ok := got[k]
			if !ok {
				if !slices.Contains(missing, p) {
					t.Errorf("%s: no field %q (documented: %v)", what, p, wv)
				}
				continue
			}
			if wv == nil {
				continue // documented as null: any type
			}
			if kind(gv) != kind(wv) {
				t.Errorf("%s: %q is %s %v, documented as %s %v", what, p, kind(gv), gv, kind(wv), wv)
				continue
			}
			switch wv := wv.(type) {
			case float64:
				if wv == math.Trunc(wv) && gv.(float64) != math.Trunc(gv.(float64)) {
					t.Errorf("%s: %q is %v, documented as an integer", what, p, gv)
				}
			case string:
				if timeFields[k] {
					if _, err := time.Parse(time.RFC3339Nano, gv.(string)); err != nil {
						t.Errorf("%s: %q: %v", what, p, err)
					}
				}
			case map[string]any:
				walk(p+".", wv, gv.(map[string]any))
			case []any:
				ga := gv.([]any)
				if len(wv) > 0 && len(ga) > 0 {
					if wo, ok := wv[0].(map[string]any); ok {
						if gotObj, ok := ga[0].(map[string]any); ok {
							walk(p+"[].", wo, gotObj)
						} else {
							t.Errorf("%s: %q[0] is %s, documented as an object", what, p, kind(ga[0]))
						}
					}
				}
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok && !slices.Contains(extra, path+k) {
				t.Errorf("%s: field %q is not documented", what, path+k)
			}
		}
	}
	walk("", want, got)
}

// strictDecode decodes b into v, one of Ollama's types, refusing fields
// the type does not have.
func strictDecode(t *testing.T, what string, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Errorf("%s: %s does not decode as Ollama's %T: %v", what, b, v, err)
	}
}

// A fixed request: it arrived at t0, got its model in 5ms, and its
// objects are made at t1.
var (
	t0         = time.Date(2024, 7, 22, 20, 47, 51, 0, time.FixedZone("PDT", -7*3600))
	t1         = t0.Add(1162761250)
	fixedClock = func() time.Time { return t1 }
	fixedRes   = engine.Result{
		FinishReason: engine.FinishStop,
		Usage:        engine.Usage{PromptTokens: 26, CachedTokens: 4, CompletionTokens: 298},
		Timings:      engine.Timings{Prefill: 383809000, Decode: 4799921000},
	}
)

func fixedResponder(chat bool) *ollamaEncoder {
	return &ollamaEncoder{model: "llama3.2", chat: chat, start: t0, load: 5 * time.Millisecond, now: fixedClock}
}

// TestOllamaGenerateWire compares /api/generate's objects with the
// documented ones.
func TestOllamaGenerateWire(t *testing.T) {
	docs := ollamaDocs(t)
	f := fixedResponder(false)
	const sec = "Generate a completion / "
	chunk := toMap(t, f.Deltas(servetest.Content("The"), nil, engine.Chunk{Tokens: 1})[0])
	sameShape(t, "chunk", docJSON(t, docs, sec+"Generate request (Streaming)", 1), chunk, nil, nil)
	if want := "2024-07-23T03:47:52.16276125Z"; chunk["created_at"] != want {
		t.Errorf("created_at %v, want %s (UTC, nanoseconds)", chunk["created_at"], want)
	}
	final := f.End(fixedRes, "stop")
	if len(final) != 1 {
		t.Fatalf("%d final objects", len(final))
	}
	fm := toMap(t, final[0])
	// No "context": corral does not keep the conversation's tokens.
	sameShape(t, "final", docJSON(t, docs, sec+"Generate request (Streaming)", 2), fm, []string{"context"}, []string{"done_reason"})
	sameShape(t, "final", docJSON(t, docs, sec+"Request (Structured outputs)", 1), fm, []string{"context"}, nil)
	want := map[string]any{"model": "llama3.2", "response": "", "done": true, "done_reason": "stop",
		"total_duration": 1162761250.0, "load_duration": 5e6, "prompt_eval_count": 26.0, "prompt_eval_duration": 383809000.0,
		"eval_count": 298.0, "eval_duration": 4799921000.0}
	for k, v := range want {
		if fm[k] != v {
			t.Errorf("final %s = %v, want %v", k, fm[k], v)
		}
	}
	whole := toMap(t, f.Whole(servetest.Whole("The sky is blue.", "stop"), fixedRes))
	sameShape(t, "whole", docJSON(t, docs, sec+"Request (No streaming)", 1), whole, []string{"context"}, []string{"done_reason"})
	if whole["response"] != "The sky is blue." {
		t.Errorf("whole response %v", whole["response"])
	}
	sameShape(t, "load", docJSON(t, docs, sec+"Load a model", 1), toMap(t, f.object("", "", true, "load", ollamaMetrics{})), nil, []string{"done_reason"})
	sameShape(t, "unload", docJSON(t, docs, sec+"Unload a model", 1), toMap(t, f.object("", "", true, "unload", ollamaMetrics{})), nil, nil)

	for _, v := range []any{chunk, fm, whole} {
		b, _ := json.Marshal(v)
		strictDecode(t, "generate", b, &ollama.GenerateResponse{})
	}
}

// TestOllamaChatWire compares /api/chat's objects with the documented ones.
func TestOllamaChatWire(t *testing.T) {
	docs := ollamaDocs(t)
	f := fixedResponder(true)
	const sec = "Generate a chat completion / "
	// Older examples show "images": null in the message; Ollama's own type
	// leaves out empty images, and so does corral.
	chunk := toMap(t, f.Deltas(servetest.Content("The"), nil, engine.Chunk{Tokens: 1})[0])
	sameShape(t, "chunk", docJSON(t, docs, sec+"Chat request (Streaming)", 1), chunk, []string{"message.images"}, nil)
	fm := toMap(t, f.End(fixedRes, "stop")[0])
	sameShape(t, "final", docJSON(t, docs, sec+"Chat request (Streaming)", 2), fm, nil, []string{"done_reason"})
	sameShape(t, "final", docJSON(t, docs, sec+"Chat request (Structured outputs)", 1), fm, nil, nil)
	if msg := fm["message"].(map[string]any); msg["role"] != "assistant" || msg["content"] != "" {
		t.Errorf("final message %v", msg)
	}
	whole := toMap(t, f.Whole(servetest.Whole("Hello! How are you today?", "stop"), fixedRes))
	sameShape(t, "whole", docJSON(t, docs, sec+"Chat request (No streaming)", 1), whole, nil, []string{"done_reason"})
	sameShape(t, "whole", docJSON(t, docs, sec+"Chat request (With history, with tools)", 1), whole, nil, nil)
	sameShape(t, "load", docJSON(t, docs, sec+"Load a model", 1), toMap(t, f.object("", "", true, "load", ollamaMetrics{})), nil, nil)
	sameShape(t, "unload", docJSON(t, docs, sec+"Unload a model", 1), toMap(t, f.object("", "", true, "unload", ollamaMetrics{})), nil, nil)

	for _, v := range []any{chunk, fm, whole} {
		b, _ := json.Marshal(v)
		strictDecode(t, "chat", b, &ollama.ChatResponse{})
	}
}

// ollamaAPI serves fake as the one model "tiny", its file the test model
// TinyStories656K (read for its GGUF header only), with loose names: any
// name the documentation's examples use is served by it.
func ollamaAPI(t *testing.T, fake *servetest.Engine) *serving.Core {
	t.Helper()
	m, err := model.New(fake, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	spec := registry.Spec{ID: fake.Model.Name, Engine: engine.Config{ModelPath: testmodel.Path(t, testmodel.TinyStories656K)}, Need: 123456}
	quiet := slog.New(slog.DiscardHandler)
	reg, err := registry.New(registry.Config{KeepAlive: -1, Logger: quiet}, []registry.Spec{spec},
		func(context.Context, registry.Spec) (*model.Model, error) { return m, nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return serving.New(reg, serving.Options{Logger: quiet})
}

// call runs one request through handler h of a.
func call(a *serving.Core, h func(*serving.Core, http.ResponseWriter, *http.Request), method, body string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h(a, w, httptest.NewRequest(method, "/", strings.NewReader(body)))
	return w
}

// TestOllamaModelsWire compares /api/tags, /api/ps, /api/show and
// /api/version with the documented answers.
func TestOllamaModelsWire(t *testing.T) {
	docs := ollamaDocs(t)
	a := ollamaAPI(t, servetest.NewEngine())

	w := call(a, PS, http.MethodGet, "")
	if w.Code != 200 || w.Body.String() != `{"models":[]}`+"\n" {
		t.Errorf("/api/ps before a load: %d %s", w.Code, w.Body)
	}
	w = call(a, Generate, http.MethodPost, `{"model":"tiny"}`)
	if w.Code != 200 {
		t.Fatalf("load: %d %s", w.Code, w.Body)
	}

	w = call(a, Tags, http.MethodGet, "")
	var tags map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &tags); err != nil || w.Code != 200 {
		t.Fatalf("/api/tags: %d %s", w.Code, w.Body)
	}
	sameShape(t, "/api/tags", docJSON(t, docs, "List Local Models / Response", 0), tags, nil, nil)
	strictDecode(t, "/api/tags", w.Body.Bytes(), &ollama.ListResponse{})
	m := tags["models"].([]any)[0].(map[string]any)
	d := m["details"].(map[string]any)
	if m["name"] != "tiny:latest" || m["model"] != "tiny:latest" || len(m["digest"].(string)) != 64 ||
		d["format"] != "gguf" || d["family"] != "llama" || d["quantization_level"] != "Q8_0" || d["parameter_size"] == "" {
		t.Errorf("/api/tags model %v", m)
	}

	w = call(a, PS, http.MethodGet, "")
	var ps map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &ps); err != nil || w.Code != 200 {
		t.Fatalf("/api/ps: %d %s", w.Code, w.Body)
	}
	// context_length is in Ollama's type, not in the example.
	sameShape(t, "/api/ps", docJSON(t, docs, "List Running Models / Response", 0), ps, nil, []string{"models[].context_length"})
	strictDecode(t, "/api/ps", w.Body.Bytes(), &ollama.ProcessResponse{})
	var pr ollama.ProcessResponse
	json.Unmarshal(w.Body.Bytes(), &pr)
	if len(pr.Models) != 1 || pr.Models[0].Size != 123456 || pr.Models[0].SizeVRAM != 0 || pr.Models[0].ContextLength != 64 ||
		pr.Models[0].ExpiresAt.Before(time.Now().Add(20*365*24*time.Hour)) || pr.Models[0].Digest != m["digest"] {
		t.Errorf("/api/ps: %+v; want the model kept forever, its size the budget's", pr)
	}

	w = call(a, Show, http.MethodPost, `{"model":"tiny"}`)
	var show map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &show); err != nil || w.Code != 200 {
		t.Fatalf("/api/show: %d %s", w.Code, w.Body)
	}
	// The example is JSON5: compare its top-level keys.
	var want []string
	for _, sub := range regexp.MustCompile(`(?m)^  ([a-z_]+):`).FindAllStringSubmatch(docExample(t, docs, "Show Model Information / Response", 0).text, -1) {
		want = append(want, sub[1])
	}
	for _, k := range want {
		if _, ok := show[k]; !ok {
			t.Errorf("/api/show has no %q; documented keys %v", k, want)
		}
	}
	strictDecode(t, "/api/show", w.Body.Bytes(), &ollama.ShowResponse{})
	info := show["model_info"].(map[string]any)
	if info["general.architecture"] != "llama" || info["llama.context_length"] == nil || info["general.parameter_count"] == nil ||
		info["tokenizer.ggml.tokens"] == nil || len(info["tokenizer.ggml.tokens"].([]any)) != 0 || info["tokenizer.chat_template"] != nil {
		t.Errorf("model_info %v", info)
	}
	if caps := show["capabilities"].([]any); len(caps) != 1 || caps[0] != "completion" {
		t.Errorf("capabilities %v", caps)
	}
	if show["details"].(map[string]any)["parameter_size"] != d["parameter_size"] {
		t.Errorf("details %v, /api/tags said %v", show["details"], d)
	}

	w = call(a, Version, http.MethodGet, "")
	var version map[string]any
	json.Unmarshal(w.Body.Bytes(), &version)
	sameShape(t, "/api/version", docJSON(t, docs, "Version / Response", 0), version, nil, nil)
	if version["version"] != APIVersion {
		t.Errorf("/api/version %v", version)
	}
}

// TestOllamaRequests sends every documented /api/generate and /api/chat
// request to a fake engine: each decodes and becomes the engine request
// its fields say, or is refused for what corral does not do.
func TestOllamaRequests(t *testing.T) {
	docs := ollamaDocs(t)
	type handler = func(*serving.Core, http.ResponseWriter, *http.Request)
	gen, chat := Generate, Chat
	const genSec, chatSec = "Generate a completion / ", "Generate a chat completion / "
	userPrompt := func(s string) string { return "<|im_start|>user\n" + s + "<|im_end|>\n<|im_start|>assistant\n" }
	tests := []struct {
		key    string
		h      handler
		status int    // 503: submitted (the fake's queue is always full)
		reason string // done_reason of a 200
		check  func(t *testing.T, req engine.Request)
	}{
		{genSec + "Generate request (Streaming)", gen, 503, "", func(t *testing.T, req engine.Request) {
			if req.Prompt != userPrompt("Why is the sky blue?") || !req.AddSpecial || !req.ParseSpecial || len(req.Plain) != 1 {
				t.Errorf("prompt %q, plain %v", req.Prompt, req.Plain)
			}
			if req.MaxTokens != 0 || req.Sampling.Temperature != serving.DefaultTemperature || req.Sampling.Seed != -1 || !slices.Equal(req.Stop, []string{"<|im_end|>"}) {
				t.Errorf("defaults: %+v", req)
			}
		}},
		{genSec + "Request (No streaming)", gen, 503, "", nil},
		{genSec + "Request (with suffix)", gen, 400, "", nil},
		{genSec + "Request (Structured outputs)", gen, 503, "", func(t *testing.T, req engine.Request) {
			if req.Grammar == "" || req.Grammar == grammar.JSONObject {
				t.Errorf("grammar %q; want the schema's", req.Grammar)
			}
		}},
		{genSec + "Request (JSON mode)", gen, 503, "", func(t *testing.T, req engine.Request) {
			if req.Grammar != grammar.JSONObject {
				t.Errorf("grammar %q; want JSON", req.Grammar)
			}
		}},
		{genSec + "Request", gen, 400, "", nil}, // with an image: see says
		{genSec + "Request (Raw Mode)", gen, 503, "", func(t *testing.T, req engine.Request) {
			if req.Prompt != "[INST] why is the sky blue? [/INST]" || req.Plain != nil || req.Stop != nil {
				t.Errorf("raw prompt %q, plain %v, stop %q", req.Prompt, req.Plain, req.Stop)
			}
		}},
		{genSec + "Request (Reproducible outputs)", gen, 503, "", func(t *testing.T, req engine.Request) {
			if req.Sampling.Seed != 123 {
				t.Errorf("seed %d", req.Sampling.Seed)
			}
		}},
		{genSec + "Generate request (With options)", gen, 503, "", func(t *testing.T, req engine.Request) {
			want := engine.Sampling{Temperature: 0.8, TopK: 20, TopP: 0.9, MinP: 0, TypicalP: 0.7, RepeatPenalty: 1.2,
				FrequencyPenalty: 1, PresencePenalty: 1.5, RepeatLastN: 33, Seed: 42}
			if !equalSampling(req.Sampling, want) || req.MaxTokens != 100 || !slices.Equal(req.Stop, []string{"\n", "user:", "<|im_end|>"}) {
				t.Errorf("options: sampling %+v max %d stop %q; want %+v, 100 and the stops", req.Sampling, req.MaxTokens, req.Stop, want)
			}
		}},
		{genSec + "Load a model", gen, 200, "load", nil},
		{genSec + "Unload a model", gen, 200, "unload", nil},
		{chatSec + "Chat request (Streaming)", chat, 503, "", func(t *testing.T, req engine.Request) {
			if req.Prompt != userPrompt("why is the sky blue?") {
				t.Errorf("prompt %q", req.Prompt)
			}
		}},
		{chatSec + "Chat request (Streaming with tools)", chat, 503, "", nil},
		{chatSec + "Chat request (No streaming)", chat, 503, "", nil},
		{chatSec + "Chat request (No streaming, with tools)", chat, 503, "", nil},
		{chatSec + "Chat request (Structured outputs)", chat, 503, "", func(t *testing.T, req engine.Request) {
			if req.Grammar == "" || req.Sampling.Temperature != 0 {
				t.Errorf("grammar %q, temperature %g", req.Grammar, req.Sampling.Temperature)
			}
		}},
		{chatSec + "Chat request (With History)", chat, 503, "", func(t *testing.T, req engine.Request) {
			if !strings.Contains(req.Prompt, "<|im_start|>assistant\ndue to rayleigh scattering.<|im_end|>") || len(req.Plain) != 3 {
				t.Errorf("prompt %q, plain %v", req.Prompt, req.Plain)
			}
		}},
		{chatSec + "Chat request (With history, with tools)", chat, 503, "", func(t *testing.T, req engine.Request) {
			if !strings.Contains(req.Prompt, `<tool_call>`) || !strings.Contains(req.Prompt, `"Toronto"`) ||
				!strings.Contains(req.Prompt, "<|im_start|>tool\n11 degrees celsius<|im_end|>") {
				t.Errorf("prompt %q", req.Prompt)
			}
		}},
		{chatSec + "Chat request (with images)", chat, 400, "", nil},
		{chatSec + "Chat request (Reproducible outputs)", chat, 503, "", func(t *testing.T, req engine.Request) {
			if req.Sampling.Seed != 101 || req.Sampling.Temperature != 0 {
				t.Errorf("sampling %+v", req.Sampling)
			}
		}},
		{chatSec + "Chat request (with tools)", chat, 503, "", nil},
		{chatSec + "Load a model", chat, 200, "load", nil},
		{chatSec + "Unload a model", chat, 200, "unload", nil},
	}
	// What a 400 says: the documented image decodes, and the fake model
	// has no projector.
	says := map[string]string{genSec + "Request": "does not take images", chatSec + "Chat request (with images)": "does not take images"}
	seen := 0
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			body := docExample(t, docs, tt.key, 0)
			if body.lang != "shell" {
				t.Fatalf("block 0 of %q is not a request", tt.key)
			}
			seen++
			fake := servetest.NewEngine()
			w := call(ollamaAPI(t, fake), tt.h, http.MethodPost, body.text)
			if w.Code != tt.status || w.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("%d %s: %s; want %d", w.Code, w.Header().Get("Content-Type"), w.Body, tt.status)
			}
			var res map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil {
				t.Fatal(err)
			}
			switch tt.status {
			case 200:
				if res["done"] != true || res["done_reason"] != tt.reason || len(fake.Submitted) != 0 {
					t.Errorf("%v, %d submitted; want done_reason %q, nothing submitted", res, len(fake.Submitted), tt.reason)
				}
			default:
				if len(res) != 1 || res["error"] == nil || res["error"] == "" {
					t.Errorf("error %v; want Ollama's {\"error\": message}", res)
				}
				if msg, _ := res["error"].(string); !strings.Contains(msg, says[tt.key]) {
					t.Errorf("error %q; want it to say %q", msg, says[tt.key])
				}
				if tt.status == 503 && (len(fake.Submitted) != 1 || w.Header().Get("Retry-After") != "1") {
					t.Fatalf("%d submitted, Retry-After %q", len(fake.Submitted), w.Header().Get("Retry-After"))
				}
				if tt.check != nil {
					tt.check(t, fake.Submitted[0])
				}
			}
		})
	}
	// Every documented generate and chat request is among the tests.
	n := 0
	for key, blocks := range docs {
		if (strings.HasPrefix(key, genSec) || strings.HasPrefix(key, chatSec)) && len(blocks) > 0 && blocks[0].lang == "shell" {
			n++
		}
	}
	if n != seen {
		t.Errorf("docs/api.md has %d generate and chat requests; the test sends %d", n, seen)
	}
}

// equalSampling compares samplings as float32 values.
func equalSampling(a, b engine.Sampling) bool {
	return a.Temperature == b.Temperature && a.TopK == b.TopK && a.TopP == b.TopP && a.MinP == b.MinP && a.TypicalP == b.TypicalP &&
		a.RepeatPenalty == b.RepeatPenalty && a.FrequencyPenalty == b.FrequencyPenalty && a.PresencePenalty == b.PresencePenalty &&
		a.RepeatLastN == b.RepeatLastN && a.Seed == b.Seed
}

// TestOllamaBadRequests gets Ollama's error shape, with the status, for
// requests corral refuses.
func TestOllamaBadRequests(t *testing.T) {
	gen, chat := Generate, Chat
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name   string
		h      func(*serving.Core, http.ResponseWriter, *http.Request)
		body   string
		status int
		msg    string // a part of the message
	}{
		{"malformed", gen, `{"prompt":`, 400, "invalid JSON"},
		{"unknown model", gen, `{"model":"nope","prompt":"hi"}`, 404, "model 'nope' not found"},
		{"unknown model, chat", chat, `{"model":"nope",` + msgs + `}`, 404, "model 'nope' not found"},
		{"unknown model, load", chat, `{"model":"nope"}`, 404, "model 'nope' not found"},
		{"unknown model, unload", gen, `{"model":"nope","keep_alive":0}`, 404, "model 'nope' not found"},
		{"options not an object", gen, `{"prompt":"hi","options":[1]}`, 400, "'options' must be an object"},
		{"option type", gen, `{"prompt":"hi","options":{"temperature":"hot"}}`, 400, "options: invalid type for 'temperature'"},
		{"option range", chat, `{` + msgs + `,"options":{"top_p":0}}`, 400, "'top_p' must be in (0, 1]"},
		{"num_predict", gen, `{"prompt":"hi","options":{"num_predict":-3}}`, 400, "'num_predict' must be"},
		{"stop", gen, `{"prompt":"hi","options":{"stop":[1]}}`, 400, "'stop'"},
		{"format name", gen, `{"prompt":"hi","format":"xml"}`, 400, `'format' must be "json" or a JSON schema, got "xml"`},
		{"format type", gen, `{"prompt":"hi","format":[1]}`, 400, "'format' must be"},
		{"format schema", chat, `{` + msgs + `,"format":{"type":"nonsense"}}`, 400, "invalid JSON schema"},
		{"template", gen, `{"prompt":"hi","template":"{{ .Prompt }}"}`, 400, "'template' is not supported"},
		{"raw system", gen, `{"prompt":"hi","raw":true,"system":"be brief"}`, 400, "raw mode"},
		{"role", chat, `{"messages":[{"role":"robot","content":"hi"}]}`, 400, "unknown role"},
		{"keep_alive", gen, `{"prompt":"hi","keep_alive":"soon"}`, 400, "keep_alive"},
		{"tool_choice", chat, `{` + msgs + `,"tool_choice":"sometimes"}`, 400, "'tool_choice' must be"},
		{"tool_choice without tools", chat, `{` + msgs + `,"tool_choice":"required"}`, 400, "needs 'tools'"},
		{"tool_choice of no tool", chat, `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, 400, "not among 'tools'"},
		{"tool name, 129", chat, `{` + msgs + `,"tools":[{"type":"function","function":{"name":"` + strings.Repeat("f", 129) + `"}}]}`, 400, "tool 0: the function's name must be 1 to 128 letters"},
		{"tool name, a dot", chat, `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"a.b"}}]}`, 400, "tool 1: the function's name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := servetest.NewEngine()
			w := servetest.Serve(t, fake, tt.h, tt.body)
			var res map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil || w.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("%s %q: %v", w.Header().Get("Content-Type"), w.Body, err)
			}
			msg, _ := res["error"].(string)
			if w.Code != tt.status || len(res) != 1 || !strings.Contains(msg, tt.msg) {
				t.Errorf("%d %s; want %d and an error saying %q", w.Code, w.Body, tt.status, tt.msg)
			}
			if len(fake.Submitted) != 0 {
				t.Errorf("submitted %+v", fake.Submitted)
			}
		})
	}
}

// TestOllamaToolNames: /api/chat takes a tool name of Anthropic's 128
// characters, past OpenAI's 64 (the rule the core applied to every
// dialect), and renders it.
func TestOllamaToolNames(t *testing.T) {
	name := strings.Repeat("a", 64) + strings.Repeat("B-_9", 16)
	fake := servetest.NewEngine()
	fake.Model.ChatTemplate = `{% for t in tools or [] %}[{{ t.function.name }}]{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}`
	w := servetest.Serve(t, fake, Chat, `{"messages":[{"role":"user","content":"hi"}],"stream":false,"tools":[{"type":"function","function":{"name":"`+name+`"}}]}`)
	if len(fake.Submitted) != 1 || fake.Submitted[0].Prompt != "["+name+"]hi" {
		t.Fatalf("%d %s: submitted %+v", w.Code, w.Body, fake.Submitted)
	}
}

// TestOllamaAccepted takes fields corral ignores, and its extensions.
func TestOllamaAccepted(t *testing.T) {
	for _, body := range []string{
		`{"prompt":"hi","think":true,"context":[1,2,3],"images":[],"suffix":"","options":{"num_ctx":1024,"num_gpu":1,"num_thread":8,"use_mmap":true,"numa":false,"num_keep":5,"penalize_newline":true}}`,
		`{"prompt":"hi","options":{"num_predict":-1}}`,
		`{"prompt":"hi","options":{"num_predict":-2}}`,
		`{"prompt":"hi","options":{"num_predict":0}}`,
		`{"prompt":"hi","options":null,"format":"","keep_alive":"5m","stream":false}`,
	} {
		fake := servetest.NewEngine()
		w := servetest.Serve(t, fake, Generate, body)
		if w.Code != 503 || len(fake.Submitted) != 1 || fake.Submitted[0].MaxTokens != 0 {
			t.Errorf("%s: %d %s, submitted %+v", body, w.Code, w.Body, fake.Submitted)
		}
	}
	fake := servetest.NewEngine()
	servetest.Serve(t, fake, Chat, `{"messages":[{"role":"USER","content":"hi"}],"priority":-3,"options":{"ignore_eos":true,"logit_bias":{"5":-100}}}`)
	if len(fake.Submitted) != 1 {
		t.Fatalf("submitted %+v", fake.Submitted)
	}
	if req := fake.Submitted[0]; !req.IgnoreEOS || req.Priority != -3 || req.Sampling.LogitBias[5] != -100 || !strings.HasPrefix(req.Prompt, "<|im_start|>user\n") {
		t.Errorf("corral's extensions: %+v", req)
	}
}

// TestOllamaToolChoice: /api/chat takes corral's tool_choice, which
// forces a call with a grammar, as on the OpenAI endpoints; without it,
// the tools are offered and nothing is forced.
func TestOllamaToolChoice(t *testing.T) {
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		body   string
		forced bool
	}{
		{`{` + msgs + `,` + tools + `}`, false},
		{`{` + msgs + `,` + tools + `,"tool_choice":"auto"}`, false},
		{`{` + msgs + `,` + tools + `,"tool_choice":"required"}`, true},
		{`{` + msgs + `,` + tools + `,"tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false}`, true},
	} {
		fake := servetest.NewEngine()
		w := servetest.Serve(t, fake, Chat, tc.body)
		if w.Code != 503 || len(fake.Submitted) != 1 {
			t.Fatalf("%s: %d %s", tc.body, w.Code, w.Body)
		}
		req := fake.Submitted[0]
		if forced := strings.Contains(req.Grammar, "get_weather"); forced != tc.forced {
			t.Errorf("%s: grammar %q, want forced %v", tc.body, req.Grammar, tc.forced)
		}
	}
}

// TestOllamaStreamDefault streams unless "stream" is false.
func TestOllamaStreamDefault(t *testing.T) {
	for body, want := range map[string]bool{`{}`: true, `{"stream":true}`: true, `{"stream":false}`: false, `{"stream":null}`: true} {
		var p ollamaParams
		if e := serving.DecodeJSON([]byte(body), &p); e != nil {
			t.Fatal(e)
		}
		if p.stream() != want {
			t.Errorf("%s: stream %v, want %v", body, p.stream(), want)
		}
	}
}

func TestOllamaErrorShape(t *testing.T) {
	w := httptest.NewRecorder()
	WriteError(w, &serving.Error{Status: 503, Code: "queue_full", Message: "busy"})
	if w.Code != 503 || w.Body.String() != `{"error":"busy"}`+"\n" || w.Header().Get("Retry-After") != "1" || w.Header().Get("Content-Type") != "application/json" {
		t.Errorf("%d %q %v", w.Code, w.Body, w.Header())
	}
}

func TestOllamaName(t *testing.T) {
	for id, want := range map[string]string{"tiny": "tiny:latest", "llama3:8b": "llama3:8b", "org/model": "org/model:latest"} {
		if got := ollamaName(id); got != want {
			t.Errorf("ollamaName(%q) = %q, want %q", id, got, want)
		}
	}
	if got := ollamaResponseName("tiny:latest", "tiny"); got != "tiny:latest" {
		t.Errorf("the request's name is echoed: got %q", got)
	}
	if got := ollamaResponseName("", "tiny"); got != "tiny:latest" {
		t.Errorf("no name: got %q", got)
	}
}

// A request refused whatever the model (an image that is not one, suffix, …) is refused
// before its model loads: it must not evict others to be turned away.
func TestOllamaRefusesBeforeLoading(t *testing.T) {
	loads := 0
	reg, err := registry.New(registry.Config{KeepAlive: -1}, []registry.Spec{{ID: "tiny"}},
		func(context.Context, registry.Spec) (*model.Model, error) {
			loads++
			return model.New(servetest.NewEngine(), model.Options{})
		})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	a := serving.New(reg, serving.Options{})
	for _, tt := range []struct {
		h    func(*serving.Core, http.ResponseWriter, *http.Request)
		body string
	}{
		{Generate, `{"model":"tiny","prompt":"hi","images":["aGk="]}`},
		{Generate, `{"model":"tiny","prompt":"hi","suffix":"x"}`},
		{Generate, `{"model":"tiny","prompt":"hi","raw":true,"system":"s"}`},
		{Chat, `{"model":"tiny","messages":[{"role":"user","content":"hi","images":["aGk="]}]}`},
	} {
		w := httptest.NewRecorder()
		tt.h(a, w, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tt.body)))
		if w.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %s", tt.body, w.Code, w.Body)
		}
	}
	if loads != 0 {
		t.Errorf("refused requests loaded the model %d times", loads)
	}
}

// TestOllamaImagePlaces: images go where Ollama puts them: a message's
// at its "[img]"s in turn, the others before its content; a raw
// prompt's at their "[img-N]" tags, the others at its start, and a tag
// of no image is a 400.
func TestOllamaImagePlaces(t *testing.T) {
	m := chat.MediaMarker
	for _, tc := range []struct {
		content string
		first   int
		n       int
		want    string
	}{
		{"hi", 0, 0, "hi"},
		{"Describe[img] the image.", 0, 1, "Describe" + m(0) + " the image."},
		{"Describe the image.", 2, 1, m(2) + "Describe the image."},
		{"[img][img] and [img]", 0, 2, m(0) + m(1) + " and [img]"},
		{"a[img]b", 0, 3, m(1) + m(2) + "a" + m(0) + "b"},
		{"", 0, 1, m(0)},
	} {
		msg := chat.Message{Role: "user", Content: withImages(tc.content, tc.first, tc.n)}
		if got, err := msg.Text(); err != nil || got != tc.want {
			t.Errorf("%q with %d images from %d: %q, %v; want %q", tc.content, tc.n, tc.first, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		prompt string
		n      int
		want   string
	}{
		{"[img-0] x", 0, "[img-0] x"},
		{"a[img-1]b[img-0]c[img-1]", 2, "a" + m(1) + "b" + m(0) + "c" + m(1)},
		{"a[img-1]b", 3, m(0) + m(2) + "a" + m(1) + "b"},
		{"[img] x", 1, m(0) + "[img] x"},
		{"[img-2]", 2, ""},
	} {
		got, e := rawImages(tc.prompt, tc.n)
		if tc.want == "" {
			if e == nil || e.Param != "prompt" || !strings.Contains(e.Message, "[img-2]") {
				t.Errorf("%q with %d images: %q, %v; want a 400 naming the tag", tc.prompt, tc.n, got, e)
			}
			continue
		}
		if e != nil || got != tc.want {
			t.Errorf("%q with %d images: %q, %v; want %q", tc.prompt, tc.n, got, e, tc.want)
		}
	}
}
