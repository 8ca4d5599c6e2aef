package e2e

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/wire"
)

// The logprobs of the three completion endpoints over real HTTP. Each
// greedy answer compared with another comes from a fresh server (see
// TestSDKChat): a cached prompt computes the same answer in another order.

// chatLogprobsReq is a greedy chat request for n tokens with logprobs.
func chatLogprobsReq(n, top int, stream bool) map[string]any {
	return map[string]any{
		"model":      "tiny",
		"messages":   []map[string]string{{"role": "user", "content": "Tell me a story."}},
		"max_tokens": n, "temperature": 0, "ignore_eos": true,
		"logprobs": true, "top_logprobs": top, "stream": stream,
	}
}

// checkChatEntries checks entries of a greedy answer: their tokens join to
// text, bytes are the token's, and the token is the first of top
// alternatives sorted by logprob.
func checkChatEntries(t *testing.T, lps []wire.ChatTokenLogprob, text string, top int) {
	t.Helper()
	var joined []byte
	for i, e := range lps {
		var b []byte
		for _, v := range e.Bytes {
			b = append(b, byte(v))
		}
		if utf8.Valid(b) && string(b) != e.Token {
			t.Fatalf("entry %d: token %q, bytes %q", i, e.Token, b)
		}
		joined = append(joined, b...)
		if len(e.TopLogprobs) != top || e.Logprob > 0 {
			t.Fatalf("entry %d: %d alternatives (want %d), logprob %g", i, len(e.TopLogprobs), top, e.Logprob)
		}
		for j, a := range e.TopLogprobs {
			if j > 0 && a.Logprob > e.TopLogprobs[j-1].Logprob {
				t.Fatalf("entry %d: alternatives not sorted: %+v", i, e.TopLogprobs)
			}
		}
		if top > 0 && (e.TopLogprobs[0].Token != e.Token || e.TopLogprobs[0].Logprob != e.Logprob || !reflect.DeepEqual(e.TopLogprobs[0].Bytes, e.Bytes)) {
			t.Fatalf("entry %d: greedy token %+v is not the most likely of %+v", i, e, e.TopLogprobs)
		}
	}
	if string(joined) != text {
		t.Fatalf("entries join to %q, the content is %q", joined, text)
	}
}

// TestChatLogprobs: a chat completion's logprobs.content has an entry per
// token, in OpenAI's shape; streamed, each content chunk carries its
// tokens' entries, and they add up to the whole answer's.
func TestChatLogprobs(t *testing.T) {
	const n, top = 16, 3
	ts := startServer(t, engine.Config{Parallel: 1})
	resp, b := ts.Post(t, "/v1/chat/completions", chatLogprobsReq(n, top, false))
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var whole wire.ChatCompletion
	unmarshal(t, string(b), &whole)
	lp := whole.Choices[0].Logprobs
	if lp == nil || len(lp.Content) != n || lp.Refusal != nil || !bytes.Contains(b, []byte(`"refusal":null`)) {
		t.Fatalf("logprobs of %d tokens: %s", n, b)
	}
	checkChatEntries(t, lp.Content, whole.Choices[0].Message.Content, top)

	ts = startServer(t, engine.Config{Parallel: 1})
	events := e2etest.ReadEvents(t, ts.OpenStream(t, context.Background(), "/v1/chat/completions", chatLogprobsReq(n, top, true)))
	var streamed []wire.ChatTokenLogprob
	var text strings.Builder
	for i, data := range events[:len(events)-1] {
		var c wire.ChatCompletionChunk
		unmarshal(t, data, &c)
		ch := c.Choices[0]
		if ch.Delta.Content == nil || *ch.Delta.Content == "" {
			if ch.Logprobs != nil {
				t.Fatalf("event %d without text has logprobs: %s", i, data)
			}
			continue
		}
		if ch.Logprobs == nil {
			t.Fatalf("event %d with text has no logprobs: %s", i, data)
		}
		text.WriteString(*ch.Delta.Content)
		streamed = append(streamed, ch.Logprobs.Content...)
	}
	if text.String() != whole.Choices[0].Message.Content || !reflect.DeepEqual(streamed, lp.Content) {
		t.Fatalf("streamed %q with entries\n%+v\nwant %q with\n%+v", text.String(), streamed, whole.Choices[0].Message.Content, lp.Content)
	}

	// Without logprobs, "logprobs": null.
	req := chatLogprobsReq(4, 0, false)
	delete(req, "logprobs")
	delete(req, "top_logprobs")
	if _, b := ts.Post(t, "/v1/chat/completions", req); !bytes.Contains(b, []byte(`"logprobs":null`)) {
		t.Fatalf("without logprobs: %s", b)
	}
	// logprobs with top_logprobs 0: entries without alternatives.
	resp, b = ts.Post(t, "/v1/chat/completions", chatLogprobsReq(4, 0, false))
	unmarshal(t, string(b), &whole)
	if resp.StatusCode != 200 || len(whole.Choices[0].Logprobs.Content) != 4 || !bytes.Contains(b, []byte(`"top_logprobs":[]`)) {
		t.Fatalf("top_logprobs 0: %d %s", resp.StatusCode, b)
	}
	checkChatEntries(t, whole.Choices[0].Logprobs.Content, whole.Choices[0].Message.Content, 0)
}

// TestCompletionsLogprobs: /v1/completions' legacy logprobs, whole and
// streamed alike: tokens, their logprobs, the top ones (the greedy token
// among them) and character offsets.
func TestCompletionsLogprobs(t *testing.T) {
	g := golden[0]
	req := map[string]any{"model": "tiny", "prompt": g.Prompt, "max_tokens": g.N, "temperature": 0, "ignore_eos": true, "logprobs": 2}
	ts := startServer(t, engine.Config{Parallel: 1})
	resp, b := ts.Post(t, "/v1/completions", req)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var whole wire.TextCompletion
	unmarshal(t, string(b), &whole)
	lp := whole.Choices[0].Logprobs
	if whole.Choices[0].Text != g.Want || lp == nil || len(lp.Tokens) != g.N || len(lp.TokenLogprobs) != g.N || len(lp.TopLogprobs) != g.N || len(lp.TextOffset) != g.N {
		t.Fatalf("want %q with %d entries: %s", g.Want, g.N, b)
	}
	if strings.Join(lp.Tokens, "") != g.Want {
		t.Fatalf("tokens %q join to something else than %q", lp.Tokens, g.Want)
	}
	at := 0
	for i, tok := range lp.Tokens {
		top := lp.TopLogprobs[i]
		if len(top) != 2 || top[0].Token != tok || top[0].Logprob != lp.TokenLogprobs[i] || top[1].Logprob > top[0].Logprob {
			t.Fatalf("token %d %q (%g): top %+v", i, tok, lp.TokenLogprobs[i], top)
		}
		if lp.TextOffset[i] != at {
			t.Fatalf("token %d: text_offset %d, want %d", i, lp.TextOffset[i], at)
		}
		at += utf8.RuneCountInString(tok)
	}

	ts = startServer(t, engine.Config{Parallel: 1})
	req["stream"] = true
	events := e2etest.ReadEvents(t, ts.OpenStream(t, context.Background(), "/v1/completions", req))
	var got wire.CompletionLogprobs
	for _, data := range events[:len(events)-1] {
		var c wire.TextCompletion
		unmarshal(t, data, &c)
		if l := c.Choices[0].Logprobs; l != nil {
			got.Tokens = append(got.Tokens, l.Tokens...)
			got.TokenLogprobs = append(got.TokenLogprobs, l.TokenLogprobs...)
			got.TopLogprobs = append(got.TopLogprobs, l.TopLogprobs...)
			got.TextOffset = append(got.TextOffset, l.TextOffset...)
		}
	}
	if !reflect.DeepEqual(&got, lp) {
		t.Fatalf("streamed\n%+v\nwant\n%+v", got, *lp)
	}
}

// llamaProbs is llama-server's completion_probabilities.
type llamaProbs struct {
	Content string `json:"content"`
	Probs   []struct {
		ID      int32   `json:"id"`
		Token   string  `json:"token"`
		Bytes   []int   `json:"bytes"`
		Logprob float32 `json:"logprob"`
		Top     []struct {
			ID      int32   `json:"id"`
			Token   string  `json:"token"`
			Bytes   []int   `json:"bytes"`
			Logprob float32 `json:"logprob"`
		} `json:"top_logprobs"`
	} `json:"completion_probabilities"`
}

// TestLlamaNProbs: /completion's n_probs, in llama-server's shape, whole
// and streamed alike.
func TestLlamaNProbs(t *testing.T) {
	g := golden[0]
	req := map[string]any{"prompt": g.Prompt, "n_predict": g.N, "temperature": 0, "ignore_eos": true, "n_probs": 4}
	ts := startServer(t, engine.Config{Parallel: 1})
	resp, b := ts.Post(t, "/completion", req)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var whole llamaProbs
	unmarshal(t, string(b), &whole)
	if whole.Content != g.Want || len(whole.Probs) != g.N {
		t.Fatalf("want %q with %d entries: %s", g.Want, g.N, b)
	}
	var joined strings.Builder
	for i, p := range whole.Probs {
		joined.WriteString(p.Token)
		if len(p.Top) != 4 || p.Top[0].ID != p.ID || p.Top[0].Logprob != p.Logprob || len(p.Bytes) != len(p.Token) {
			t.Fatalf("entry %d: %+v", i, p)
		}
	}
	if joined.String() != g.Want {
		t.Fatalf("tokens join to %q", joined.String())
	}

	ts = startServer(t, engine.Config{Parallel: 1})
	req["stream"] = true
	events := e2etest.ReadEvents(t, ts.OpenStream(t, context.Background(), "/completion", req))
	var streamed llamaProbs
	for _, data := range events {
		var c llamaProbs
		unmarshal(t, data, &c)
		streamed.Content += c.Content
		streamed.Probs = append(streamed.Probs, c.Probs...)
	}
	if !reflect.DeepEqual(streamed, whole) {
		t.Fatalf("streamed\n%+v\nwant\n%+v", streamed, whole)
	}
}

// TestLogprobsBadRequests: out-of-range values get a 400 naming the field.
func TestLogprobsBadRequests(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 1})
	msgs := []map[string]string{{"role": "user", "content": "Hi"}}
	for _, c := range []struct {
		path  string
		body  map[string]any
		param string
	}{
		{"/v1/chat/completions", map[string]any{"messages": msgs, "logprobs": true, "top_logprobs": 21}, "top_logprobs"},
		{"/v1/chat/completions", map[string]any{"messages": msgs, "logprobs": true, "top_logprobs": -1}, "top_logprobs"},
		{"/v1/chat/completions", map[string]any{"messages": msgs, "top_logprobs": 2}, "top_logprobs"},
		{"/v1/chat/completions", map[string]any{"messages": msgs, "logprobs": true, "stream": true, "chunking": map[string]any{}}, "logprobs"},
		{"/v1/completions", map[string]any{"prompt": "Hi", "logprobs": 6}, "logprobs"},
		{"/v1/completions", map[string]any{"prompt": "Hi", "logprobs": -1}, "logprobs"},
		{"/completion", map[string]any{"prompt": "Hi", "n_probs": -1}, "n_probs"},
		{"/completion", map[string]any{"prompt": "Hi", "n_probs": engine.MaxTopLogprobs + 1}, "n_probs"},
	} {
		resp, b := ts.Post(t, c.path, c.body)
		var e wire.Envelope
		unmarshal(t, string(b), &e)
		if resp.StatusCode != 400 || e.Error.Param == nil || *e.Error.Param != c.param || !strings.Contains(e.Error.Message, c.param) {
			t.Errorf("%s %v: %d %s; want 400 naming %s", c.path, c.body, resp.StatusCode, b, c.param)
		}
	}
}
