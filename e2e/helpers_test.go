package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/wire"
)

// Helpers that several of the end-to-end tests share; the harness that
// runs the real engine on a real model behind the real server on a
// loopback port is internal/e2etest.

// golden are TinyStories656K's greedy continuations from GOLDEN.md.
var golden = testmodel.GoldensFor(testmodel.TinyStories656K)

// startServer loads TinyStories656K with cfg and serves it on 127.0.0.1.
func startServer(t *testing.T, cfg engine.Config) *e2etest.Server {
	t.Helper()
	return startModel(t, testmodel.TinyStories656K, cfg)
}

// startModel serves the named test model (or the model at an absolute
// path) with cfg on 127.0.0.1.
func startModel(t *testing.T, model string, cfg engine.Config) *e2etest.Server {
	t.Helper()
	return e2etest.Start(t, model, e2etest.Options{Engine: cfg})
}

// unmarshal decodes the JSON data into v, failing t when it cannot.
func unmarshal(t *testing.T, data string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(data), v); err != nil {
		t.Fatalf("%v in %s", err, data)
	}
}

type textCompletion = wire.TextCompletion

type llamaCompletion struct {
	Content         string `json:"content"`
	Stop            bool   `json:"stop"`
	TokensPredicted int    `json:"tokens_predicted"`
	TokensEvaluated int    `json:"tokens_evaluated"`
	StopType        string `json:"stop_type"`
	Timings         *struct {
		PredictedN int `json:"predicted_n"`
	} `json:"timings"`
}

// v1Stream reads a /v1/completions stream and returns its text, checking
// the finish chunk and the [DONE] marker.
func v1Stream(t *testing.T, resp *http.Response, finish string) string {
	t.Helper()
	events := e2etest.ReadEvents(t, resp)
	if len(events) < 2 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", events)
	}
	var text strings.Builder
	for i, data := range events[:len(events)-1] {
		var c textCompletion
		unmarshal(t, data, &c)
		if c.Object != "text_completion" || len(c.Choices) != 1 || !strings.HasPrefix(c.ID, "cmpl-") {
			t.Fatalf("chunk %d: %s", i, data)
		}
		last := i == len(events)-2
		if got := c.Choices[0].FinishReason; (got != nil) != last || (last && *got != finish) {
			t.Fatalf("chunk %d of %d: finish_reason in %s, want %q on the last only", i, len(events)-1, data, finish)
		}
		text.WriteString(c.Choices[0].Text)
	}
	return text.String()
}

// llamaStream reads a /completion stream and returns its text and final
// object.
func llamaStream(t *testing.T, resp *http.Response) (string, llamaCompletion) {
	t.Helper()
	events := e2etest.ReadEvents(t, resp)
	var text strings.Builder
	var c llamaCompletion
	for i, data := range events {
		c = llamaCompletion{}
		unmarshal(t, data, &c)
		if c.Stop != (i == len(events)-1) {
			t.Fatalf("event %d of %d: %s", i, len(events), data)
		}
		text.WriteString(c.Content)
	}
	return text.String(), c
}

type chatCompletion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Choices []struct {
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *wire.Usage `json:"usage"`
}

// sseEvents reads an event stream, comments included, failing t when
// the stream breaks or ends.
type sseEvents struct {
	t *testing.T
	r *wire.Reader
}

func newSSEEvents(t *testing.T, r io.Reader) sseEvents {
	sr := wire.NewReader(r)
	sr.Comments = true
	return sseEvents{t, sr}
}

// next returns the next event or comment.
func (s sseEvents) next() wire.Event {
	s.t.Helper()
	ev, err := s.r.Next()
	if err != nil {
		s.t.Fatalf("read stream: %v", err)
	}
	return ev
}

// isPing reports whether ev is the keep-alive comment, ": ping".
func isPing(ev wire.Event) bool { return ev.IsComment && ev.Comment == "ping" }

// busySlots counts the slots of GET /slots that are processing.
func busySlots(t *testing.T, ts *e2etest.Server) int {
	t.Helper()
	var slots []struct {
		IsProcessing bool `json:"is_processing"`
	}
	ts.Get(t, "/slots", &slots)
	n := 0
	for _, s := range slots {
		if s.IsProcessing {
			n++
		}
	}
	return n
}

// openAIError reads an OpenAI error envelope: the error, and its param
// and code ("" when null).
func openAIError(t *testing.T, b []byte) (e wire.ErrorObject, param, code string) {
	t.Helper()
	var env wire.Envelope
	unmarshal(t, string(b), &env)
	if env.Error.Param != nil {
		param = *env.Error.Param
	}
	if env.Error.Code != nil {
		code = *env.Error.Code
	}
	return env.Error, param, code
}
