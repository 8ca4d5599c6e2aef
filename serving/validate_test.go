package serving_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/servetest"
	"github.com/corral-llm/corral/llamacpp"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/openai"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// decodeEnvelope parses an error response, failing t when it is not one.
func decodeEnvelope(t *testing.T, w *httptest.ResponseRecorder) wire.ErrorObject {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q, want application/json", ct)
	}
	var env struct {
		Error *wire.ErrorObject `json:"error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil || env.Error == nil {
		t.Fatalf("body %q is not an error envelope: %v", w.Body, err)
	}
	return *env.Error
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func TestBadRequests(t *testing.T) {
	type handler = func(*serving.Core, http.ResponseWriter, *http.Request)
	chatH, complH, llamaH := openai.ChatCompletions, openai.Completions, llamacpp.Completion
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name   string
		h      handler
		body   string
		status int
		param  string
		code   string
	}{
		{"malformed JSON", chatH, `{"messages":[`, 400, "", ""},
		{"syntax error", chatH, `{"messages" 1}`, 400, "", ""},
		{"empty body", chatH, ``, 400, "", ""},
		{"not an object", chatH, `[1,2]`, 400, "", ""},
		{"trailing data", chatH, `{` + msgs + `} {}`, 400, "", ""},
		{"temperature string", chatH, `{` + msgs + `,"temperature":"hot"}`, 400, "temperature", ""},
		{"temperature too high", chatH, `{` + msgs + `,"temperature":2.5}`, 400, "temperature", ""},
		{"temperature negative", chatH, `{` + msgs + `,"temperature":-0.1}`, 400, "temperature", ""},
		{"top_p zero", chatH, `{` + msgs + `,"top_p":0}`, 400, "top_p", ""},
		{"top_p above one", chatH, `{` + msgs + `,"top_p":1.01}`, 400, "top_p", ""},
		{"top_k negative", chatH, `{` + msgs + `,"top_k":-1}`, 400, "top_k", ""},
		{"top_k fraction", chatH, `{` + msgs + `,"top_k":1.5}`, 400, "top_k", ""},
		{"min_p above one", chatH, `{` + msgs + `,"min_p":2}`, 400, "min_p", ""},
		{"typical_p zero", chatH, `{` + msgs + `,"typical_p":0}`, 400, "typical_p", ""},
		{"frequency_penalty", chatH, `{` + msgs + `,"frequency_penalty":3}`, 400, "frequency_penalty", ""},
		{"presence_penalty", chatH, `{` + msgs + `,"presence_penalty":-2.5}`, 400, "presence_penalty", ""},
		{"repeat_penalty", chatH, `{` + msgs + `,"repeat_penalty":-1}`, 400, "repeat_penalty", ""},
		{"repeat_last_n", chatH, `{` + msgs + `,"repeat_last_n":-2}`, 400, "repeat_last_n", ""},
		{"seed too big", chatH, `{` + msgs + `,"seed":4294967296}`, 400, "seed", ""},
		{"seed negative", chatH, `{` + msgs + `,"seed":-5}`, 400, "seed", ""},
		{"n two", chatH, `{` + msgs + `,"n":2}`, 400, "n", ""},
		{"max_tokens zero", chatH, `{` + msgs + `,"max_tokens":0}`, 400, "max_tokens", ""},
		{"max_completion_tokens", chatH, `{` + msgs + `,"max_completion_tokens":-3}`, 400, "max_completion_tokens", ""},
		{"stop number", chatH, `{` + msgs + `,"stop":5}`, 400, "stop", ""},
		{"stop mixed array", chatH, `{` + msgs + `,"stop":["a",1]}`, 400, "stop", ""},
		{"stop too many", chatH, `{` + msgs + `,"stop":[` + strings.Repeat(`"x",`, serving.MaxStops) + `"y"]}`, 400, "stop", ""},
		{"stop too long", complH, `{"prompt":"a","stop":"` + strings.Repeat("x", serving.MaxStopBytes+1) + `"}`, 400, "stop", ""},
		{"n_probs too many", llamaH, `{"prompt":"a","n_probs":101}`, 400, "n_probs", ""},
		{"n_probs negative", llamaH, `{"prompt":"a","n_probs":-1}`, 400, "n_probs", ""},
		{"logit_bias key", chatH, `{` + msgs + `,"logit_bias":{"abc":1}}`, 400, "logit_bias", ""},
		{"logit_bias token", chatH, `{` + msgs + `,"logit_bias":{"100":1}}`, 400, "logit_bias", ""},
		{"logit_bias value", chatH, `{` + msgs + `,"logit_bias":{"5":101}}`, 400, "logit_bias", ""},
		{"logit_bias shape", chatH, `{` + msgs + `,"logit_bias":"x"}`, 400, "logit_bias", ""},
		{"response_format type", chatH, `{` + msgs + `,"response_format":{"type":"xml"}}`, 400, "response_format", ""},
		{"json_schema missing", chatH, `{` + msgs + `,"response_format":{"type":"json_schema"}}`, 400, "response_format", ""},
		{"json_schema invalid", chatH, `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"frobnicate"}}}}`, 400, "response_format", ""},
		{"unknown model", chatH, `{"model":"gpt-9",` + msgs + `}`, 404, "model", "model_not_found"},
		{"messages missing", chatH, `{}`, 400, "messages", ""},
		{"messages empty", chatH, `{"messages":[]}`, 400, "messages", ""},
		{"messages wrong type", chatH, `{"messages":"hi"}`, 400, "messages", ""},
		{"unknown role", chatH, `{"messages":[{"role":"wizard","content":"hi"}]}`, 400, "messages", ""},
		{"prompt missing", complH, `{}`, 400, "prompt", ""},
		{"prompt number", complH, `{"prompt":5}`, 400, "prompt", ""},
		{"prompt two strings", complH, `{"prompt":["a","b"]}`, 400, "prompt", ""},
		{"prompt bad token", complH, `{"prompt":[1,2,100]}`, 400, "prompt", ""},
		{"completions unknown model", complH, `{"model":"x","prompt":"a"}`, 404, "model", "model_not_found"},
		{"completions temperature", complH, `{"prompt":"a","temperature":true}`, 400, "temperature", ""},
		{"n_predict zero", llamaH, `{"prompt":"a","n_predict":0}`, 400, "n_predict", ""},
		{"n_predict below -1", llamaH, `{"prompt":"a","n_predict":-2}`, 400, "n_predict", ""},
		{"id_slot string", llamaH, `{"prompt":"a","id_slot":"0"}`, 400, "id_slot", ""},
		{"grammar and schema", llamaH, `{"prompt":"a","grammar":"root ::= \"a\"","json_schema":{"type":"string"}}`, 400, "json_schema", ""},
		{"json_schema bad", llamaH, `{"prompt":"a","json_schema":{"type":7}}`, 400, "json_schema", ""},
		{"llama prompt missing", llamaH, `{"n_predict":4}`, 400, "prompt", ""},
		{"detokenize bad id", llamacpp.Detokenize, `{"tokens":[1,-1]}`, 400, "tokens", ""},
		{"detokenize strings", llamacpp.Detokenize, `{"tokens":["a"]}`, 400, "tokens", ""},
		{"tokenize number", llamacpp.Tokenize, `{"content":5}`, 400, "content", ""},
		{"priority string", chatH, `{` + msgs + `,"priority":"high"}`, 400, "priority", ""},
		{"priority huge", complH, `{"prompt":"a","priority":99999999}`, 400, "priority", ""},
		{"priority fraction", llamaH, `{"prompt":"a","priority":1.5}`, 400, "priority", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := servetest.NewEngine()
			w := servetest.Serve(t, fake, tt.h, tt.body)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d; body %s", w.Code, tt.status, w.Body)
			}
			e := decodeEnvelope(t, w)
			if e.Type != wire.TypeInvalidRequest {
				t.Errorf("type %q, want %q", e.Type, wire.TypeInvalidRequest)
			}
			if deref(e.Param) != tt.param {
				t.Errorf("param %q, want %q (message %q)", deref(e.Param), tt.param, e.Message)
			}
			if deref(e.Code) != tt.code {
				t.Errorf("code %q, want %q", deref(e.Code), tt.code)
			}
			if e.Message == "" {
				t.Error("empty message")
			}
			if len(fake.Submitted) != 0 {
				t.Errorf("invalid request reached the engine: %+v", fake.Submitted)
			}
		})
	}
}

func TestBodyTooLarge(t *testing.T) {
	a, err := serving.ForEngine(servetest.NewEngine(), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	body := `{"prompt":"` + strings.Repeat("x", 2000) + `"}`
	r := httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(body))
	r.Body = http.MaxBytesReader(w, r.Body, 1000)
	openai.Completions(a, w, r)
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413; body %s", w.Code, w.Body)
	}
	if e := decodeEnvelope(t, w); deref(e.Code) != "request_too_large" {
		t.Errorf("code %q, want request_too_large", deref(e.Code))
	}
}

// TestSubmitErrors checks how engine errors reach the client.
func TestSubmitErrors(t *testing.T) {
	tests := []struct {
		err        error
		status     int
		typ, code  string
		param      string
		retryAfter string
	}{
		{engine.ErrQueueFull, 503, wire.TypeServer, "queue_full", "", "1"},
		{engine.ErrQueueTimeout, 503, wire.TypeServer, "queue_timeout", "", "1"},
		{engine.ErrClosed, 503, wire.TypeServer, "unavailable", "", "1"},
		{fmt.Errorf("%w: 900 prompt tokens, 512 per slot", engine.ErrPromptTooLong), 400, wire.TypeInvalidRequest, "context_length_exceeded", "prompt", ""},
		{&engine.PromptTooLongError{Tokens: 900, Max: 511}, 400, wire.TypeInvalidRequest, "context_length_exceeded", "prompt", ""},
		{engine.ErrEmptyPrompt, 400, wire.TypeInvalidRequest, "", "prompt", ""},
		{fmt.Errorf("engine: token 5: %w", engine.ErrBadToken), 400, wire.TypeInvalidRequest, "", "prompt", ""},
		{fmt.Errorf("%w: 5 bytes of text", engine.ErrTokenize), 400, wire.TypeInvalidRequest, "", "prompt", ""},
		{engine.ErrBadSlot, 400, wire.TypeInvalidRequest, "", "id_slot", ""},
		{fmt.Errorf("%w: parse error", engine.ErrGrammar), 400, wire.TypeInvalidRequest, "", "grammar", ""},
		{fmt.Errorf("%w: %w", engine.ErrGrammar, &engine.UnsatisfiableError{Reason: "no token writes {"}), 400, wire.TypeInvalidRequest, "grammar_unsatisfiable", "grammar", ""},
		{errors.New("disk on fire"), 500, wire.TypeServer, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			fake := servetest.NewEngine()
			fake.SubmitErr = tt.err
			w := servetest.Serve(t, fake, llamacpp.Completion, `{"prompt":"hello"}`)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d", w.Code, tt.status)
			}
			e := decodeEnvelope(t, w)
			if e.Type != tt.typ || deref(e.Code) != tt.code || deref(e.Param) != tt.param {
				t.Errorf("got type %q code %q param %q, want %q %q %q", e.Type, deref(e.Code), deref(e.Param), tt.typ, tt.code, tt.param)
			}
			if got := w.Header().Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, tt.retryAfter)
			}
		})
	}
}

// TestChatRequest checks the engine request built from a valid chat body.
func TestChatRequest(t *testing.T) {
	fake := servetest.NewEngine()
	servetest.Serve(t, fake, openai.ChatCompletions, `{
		"model": "tiny",
		"messages": [{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"}]}],
		"max_tokens": 7, "max_completion_tokens": 9,
		"temperature": 0, "top_p": 0.5, "top_k": 3, "min_p": 0.1, "seed": 42,
		"frequency_penalty": 0.5, "presence_penalty": -0.5, "repeat_penalty": 1.1,
		"logit_bias": {"5": -100, "7": 2.5},
		"stop": "END", "ignore_eos": true, "stream": true,
		"stream_options": {"include_usage": true},
		"some_future_field": {"ignored": true}
	}`)
	if len(fake.Submitted) != 1 {
		t.Fatalf("submitted %d requests, want 1", len(fake.Submitted))
	}
	got := fake.Submitted[0]
	want := engine.Request{
		Prompt:       "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
		AddSpecial:   true,
		ParseSpecial: true,
		// The message contents, tokenized as plain text.
		Plain:     []engine.Span{{Start: 19, End: 28}, {Start: 56, End: 58}},
		MaxTokens: 9,
		Sampling: engine.Sampling{
			Temperature: 0, TopP: 0.5, TopK: 3, MinP: 0.1, Seed: 42, RepeatLastN: 64,
			FrequencyPenalty: 0.5, PresencePenalty: -0.5, RepeatPenalty: 1.1,
			LogitBias: map[int32]float32{5: -100, 7: 2.5},
		},
		Stop:      []string{"END", "<|im_end|>"},
		IgnoreEOS: true,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("engine request\n got %+v\nwant %+v", got, want)
	}
}

// TestDefaults checks the sampling defaults and the prompt forms of the
// completion endpoints.
func TestDefaults(t *testing.T) {
	tests := []struct {
		name string
		h    func(*serving.Core, http.ResponseWriter, *http.Request)
		body string
		want engine.Request
	}{
		{"completions string", openai.Completions, `{"prompt":"Once"}`,
			engine.Request{Prompt: "Once", AddSpecial: true, ParseSpecial: true}},
		{"completions one string", openai.Completions, `{"prompt":["Once"],"stop":["a","","b"]}`,
			engine.Request{Prompt: "Once", AddSpecial: true, ParseSpecial: true, Stop: []string{"a", "b"}}},
		{"completions tokens", openai.Completions, `{"prompt":[1,5,9]}`,
			engine.Request{Tokens: []int32{1, 5, 9}, AddSpecial: true, ParseSpecial: true}},
		{"completions nested tokens", openai.Completions, `{"prompt":[[1,5]]}`,
			engine.Request{Tokens: []int32{1, 5}, AddSpecial: true, ParseSpecial: true}},
		{"llama defaults", llamacpp.Completion, `{"prompt":"Once","n_predict":-1}`,
			engine.Request{Prompt: "Once", AddSpecial: true, ParseSpecial: true}},
		{"llama options", llamacpp.Completion, `{"prompt":"Once","n_predict":12,"cache_prompt":false,"id_slot":2,"grammar":"root ::= \"a\"","repeat_last_n":-1,"logit_bias":[[3,-1]]}`,
			engine.Request{Prompt: "Once", AddSpecial: true, ParseSpecial: true, MaxTokens: 12, NoCachePrompt: true,
				PinSlot: true, SlotID: 2, Grammar: `root ::= "a"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := servetest.NewEngine()
			servetest.Serve(t, fake, tt.h, tt.body)
			if len(fake.Submitted) != 1 {
				t.Fatalf("submitted %d requests, want 1", len(fake.Submitted))
			}
			got := fake.Submitted[0]
			// Sampling defaults are checked once, below.
			wantS := engine.Sampling{Temperature: serving.DefaultTemperature, TopK: serving.DefaultTopK, TopP: serving.DefaultTopP, MinP: serving.DefaultMinP,
				RepeatLastN: serving.DefaultRepeatLastN, Seed: -1}
			if tt.name == "llama options" {
				wantS.RepeatLastN = 64 // -1: the slot context of the fake
				wantS.LogitBias = map[int32]float32{3: -1}
			}
			if !reflect.DeepEqual(got.Sampling, wantS) {
				t.Errorf("sampling %+v, want %+v", got.Sampling, wantS)
			}
			got.Sampling = engine.Sampling{}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("engine request\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestResponseFormatGrammar(t *testing.T) {
	fake := servetest.NewEngine()
	servetest.Serve(t, fake, openai.ChatCompletions, `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`)
	servetest.Serve(t, fake, openai.ChatCompletions, `{"messages":[{"role":"user","content":"x"}],
		"response_format":{"type":"json_schema","json_schema":{"name":"n","strict":true,"schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}}}`)
	servetest.Serve(t, fake, openai.ChatCompletions, `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"text"}}`)
	if len(fake.Submitted) != 3 {
		t.Fatalf("submitted %d requests, want 3", len(fake.Submitted))
	}
	if g := fake.Submitted[0].Grammar; g == "" || !strings.Contains(g, "root ::=") {
		t.Errorf("json_object grammar %q", g)
	}
	if g := fake.Submitted[1].Grammar; !strings.Contains(g, `\"a\"`) {
		t.Errorf("json_schema grammar does not mention property a:\n%s", g)
	}
	if g := fake.Submitted[2].Grammar; g != "" {
		t.Errorf("text format got grammar %q", g)
	}
}

func TestUnknownChatTemplate(t *testing.T) {
	if _, err := serving.ForEngine(servetest.NewEngine(), model.Options{ChatTemplate: "nonesuch"}); err == nil {
		t.Fatal("New accepted an unknown chat template")
	}
}

// TestSamplingBounds: seed 0 is a seed, not "random"; top_k and
// repeat_last_n beyond what the model has are clamped, never passed on.
func TestSamplingBounds(t *testing.T) {
	fake := servetest.NewEngine()
	servetest.Serve(t, fake, llamacpp.Completion, `{"prompt":"a","seed":0,"top_k":1000000000,"repeat_last_n":2000000000,"repeat_penalty":1.1}`)
	if len(fake.Submitted) != 1 {
		t.Fatalf("submitted %d requests, want 1", len(fake.Submitted))
	}
	s := fake.Submitted[0].Sampling
	info := fake.Info()
	if s.Seed != 0 || s.TopK != info.VocabSize || s.RepeatLastN != info.CtxPerRequest {
		t.Fatalf("seed %d, top_k %d, repeat_last_n %d; want 0, %d (the vocabulary), %d (the slot context)",
			s.Seed, s.TopK, s.RepeatLastN, info.VocabSize, info.CtxPerRequest)
	}
}

// TestPriority: the body's "priority" and the X-Priority header set the
// engine request's class; the body wins; a bad header is a 400. (The fake
// engine records a request, then refuses it as if its queue were full.)
func TestPriority(t *testing.T) {
	tests := []struct {
		body, header string
		status, want int
	}{
		{`{"prompt":"a"}`, "", 503, 0},
		{`{"prompt":"a","priority":-3}`, "", 503, -3},
		{`{"prompt":"a"}`, "7", 503, 7},
		{`{"prompt":"a","priority":2}`, "7", 503, 2},
		{`{"prompt":"a"}`, "soon", 400, 0},
		{`{"prompt":"a"}`, "99999999", 400, 0},
	}
	for _, tt := range tests {
		fake := servetest.NewEngine()
		a, err := serving.ForEngine(fake, model.Options{})
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tt.body))
		if tt.header != "" {
			r.Header.Set(serving.PriorityHeader, tt.header)
		}
		openai.Completions(a, w, r)
		if w.Code != tt.status {
			t.Errorf("%s with header %q: status %d, want %d; %s", tt.body, tt.header, w.Code, tt.status, w.Body)
			continue
		}
		if tt.status == 400 {
			if e := decodeEnvelope(t, w); e.Param == nil || *e.Param != "priority" {
				t.Errorf("%s with header %q: error %+v, want param priority", tt.body, tt.header, e)
			}
			continue
		}
		if len(fake.Submitted) != 1 || fake.Submitted[0].Priority != tt.want {
			t.Errorf("%s with header %q: submitted %+v, want priority %d", tt.body, tt.header, fake.Submitted, tt.want)
		}
	}
}

// With one model and names not strict, a request naming another model is
// served by it, as llama-server does.
func TestOneModelServesAnyName(t *testing.T) {
	fake := servetest.NewEngine()
	a, err := serving.ForEngine(fake, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"model":"gpt-9","prompt":"a"}`))
	openai.Completions(a, w, r)
	if w.Code != http.StatusServiceUnavailable || len(fake.Submitted) != 1 {
		t.Fatalf("status %d, %d submitted; want the fake's 503 after 1 submission", w.Code, len(fake.Submitted))
	}
}

func TestKeepAliveField(t *testing.T) {
	for _, tt := range []struct {
		json string
		want time.Duration
		ok   bool
	}{
		{`"5m"`, 5 * time.Minute, true},
		{`300`, 300 * time.Second, true},
		{`"300"`, 300 * time.Second, true},
		{`0`, 0, true},
		{`"0"`, 0, true},
		{`-1`, -1, true},
		{`"-1m"`, -1, true},
		{`"1.5"`, 1500 * time.Millisecond, true},
		{`"soon"`, 0, false},
		{`true`, 0, false},
	} {
		var k serving.KeepAlive
		err := k.UnmarshalJSON([]byte(tt.json))
		if (err == nil) != tt.ok || (tt.ok && k.Duration != tt.want) {
			t.Errorf("%s: got %v, %v; want %v (ok %v)", tt.json, k.Duration, err, tt.want, tt.ok)
		}
	}
}

// Known OpenAI fields corral does not implement get a 400 naming them;
// their no-op values and unknown fields pass.
func TestUnsupportedFields(t *testing.T) {
	msgs := `"messages":[{"role":"user","content":"Hi"}]`
	for _, tt := range []struct {
		h     func(*serving.Core, http.ResponseWriter, *http.Request)
		body  string
		param string // "" when the request passes validation (the fake then answers 503)
	}{
		{openai.ChatCompletions, `{` + msgs + `,"audio":{"voice":"alloy","format":"wav"}}`, "audio"},
		{openai.ChatCompletions, `{` + msgs + `,"modalities":["text","audio"]}`, "modalities"},
		{openai.ChatCompletions, `{` + msgs + `,"modalities":["text"]}`, ""},
		{openai.ChatCompletions, `{` + msgs + `,"prediction":{"type":"content","content":"x"}}`, "prediction"},
		{openai.ChatCompletions, `{` + msgs + `,"functions":[{"name":"f"}]}`, "functions"},
		{openai.ChatCompletions, `{` + msgs + `,"function_call":"auto"}`, "function_call"},
		{openai.ChatCompletions, `{` + msgs + `,"web_search_options":{}}`, "web_search_options"},
		{openai.ChatCompletions, `{` + msgs + `,"vendor_extension":{"x":1},"user":"u","store":false}`, ""},
		{openai.Completions, `{"prompt":"a","echo":true}`, "echo"},
		{openai.Completions, `{"prompt":"a","best_of":3}`, "best_of"},
		{openai.Completions, `{"prompt":"a","best_of":1}`, ""},
		{openai.Completions, `{"prompt":"a","suffix":"end"}`, "suffix"},
	} {
		w := servetest.Serve(t, servetest.NewEngine(), tt.h, tt.body)
		if tt.param == "" {
			if w.Code != http.StatusServiceUnavailable {
				t.Errorf("%s: %d %s; want it accepted (the fake's 503)", tt.body, w.Code, w.Body)
			}
			continue
		}
		e := decodeEnvelope(t, w)
		if w.Code != http.StatusBadRequest || e.Param == nil || *e.Param != tt.param || !strings.Contains(e.Message, tt.param) {
			t.Errorf("%s: %d %s; want 400 naming %s", tt.body, w.Code, w.Body, tt.param)
		}
	}
}

// TestLogprobsFields: logprobs and top_logprobs are checked before a
// model is needed, within OpenAI's bounds.
func TestLogprobsFields(t *testing.T) {
	msgs := `"messages":[{"role":"user","content":"Hi"}]`
	for _, tt := range []struct {
		h     func(*serving.Core, http.ResponseWriter, *http.Request)
		body  string
		param string // "" when the request passes validation (the fake then answers 503)
	}{
		{openai.ChatCompletions, `{` + msgs + `,"logprobs":true}`, ""},
		{openai.ChatCompletions, `{` + msgs + `,"logprobs":false}`, ""},
		{openai.ChatCompletions, `{` + msgs + `,"logprobs":true,"top_logprobs":20}`, ""},
		{openai.ChatCompletions, `{` + msgs + `,"logprobs":true,"top_logprobs":0}`, ""},
		{openai.ChatCompletions, `{` + msgs + `,"top_logprobs":0}`, ""},
		{openai.ChatCompletions, `{` + msgs + `,"top_logprobs":3}`, "top_logprobs"},
		{openai.ChatCompletions, `{` + msgs + `,"logprobs":false,"top_logprobs":3}`, "top_logprobs"},
		{openai.ChatCompletions, `{` + msgs + `,"logprobs":true,"top_logprobs":21}`, "top_logprobs"},
		{openai.ChatCompletions, `{` + msgs + `,"logprobs":true,"top_logprobs":-1}`, "top_logprobs"},
		{openai.Completions, `{"prompt":"a","logprobs":0}`, ""},
		{openai.Completions, `{"prompt":"a","logprobs":5}`, ""},
		{openai.Completions, `{"prompt":"a","logprobs":null}`, ""},
		{openai.Completions, `{"prompt":"a","logprobs":6}`, "logprobs"},
		{openai.Completions, `{"prompt":"a","logprobs":-1}`, "logprobs"},
	} {
		w := servetest.Serve(t, servetest.NewEngine(), tt.h, tt.body)
		if tt.param == "" {
			if w.Code != http.StatusServiceUnavailable {
				t.Errorf("%s: %d %s; want it accepted (the fake's 503)", tt.body, w.Code, w.Body)
			}
			continue
		}
		e := decodeEnvelope(t, w)
		if w.Code != http.StatusBadRequest || e.Param == nil || *e.Param != tt.param || !strings.Contains(e.Message, tt.param) {
			t.Errorf("%s: %d %s; want 400 naming %s", tt.body, w.Code, w.Body, tt.param)
		}
	}
}

func TestReasoningParams(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, tc := range []struct {
		p     openai.ReasoningParams
		want  *int
		param string
	}{
		{openai.ReasoningParams{}, nil, ""},
		{openai.ReasoningParams{ThinkingBudget: n(64)}, n(64), ""},
		{openai.ReasoningParams{MaxReasoningTokens: n(0)}, n(0), ""},
		{openai.ReasoningParams{ThinkingBudget: n(-1)}, n(-1), ""},
		{openai.ReasoningParams{ThinkingBudget: n(8), MaxReasoningTokens: n(8)}, n(8), ""},
		{openai.ReasoningParams{ThinkingBudget: n(8), MaxReasoningTokens: n(9)}, nil, "max_reasoning_tokens"},
		{openai.ReasoningParams{MaxReasoningTokens: n(-2)}, nil, "max_reasoning_tokens"},
		{openai.ReasoningParams{ThinkingBudget: n(-5)}, nil, "thinking_budget"},
	} {
		got, e := tc.p.Budget()
		switch {
		case tc.param != "" && (e == nil || e.Param != tc.param || e.Status != 400):
			t.Errorf("%+v: error %v, want one naming %s", tc.p, e, tc.param)
		case tc.param == "" && (e != nil || (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want):
			t.Errorf("%+v: %v, %v", tc.p, got, e)
		}
	}
}
