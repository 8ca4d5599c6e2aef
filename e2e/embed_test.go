package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"testing"

	ollama "github.com/ollama/ollama/api"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/wire"
)

// embedTol: a vector computed in another batch, its cells elsewhere in
// the cache, may move in the last bits.
const embedTol = 1e-4

// embed posts an /v1/embeddings request and decodes the 200 answer.
func embed(t *testing.T, ts *e2etest.Server, body map[string]any) wire.EmbeddingList {
	t.Helper()
	resp, b := ts.Post(t, "/v1/embeddings", body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST /v1/embeddings %v: %d %s", body, resp.StatusCode, b)
	}
	var out wire.EmbeddingList
	unmarshal(t, string(b), &out)
	return out
}

func vecDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// TestEmbeddings: a batch gives the vectors each input gives alone, of
// the model's size and unit length; base64 carries the same floats; the
// same text gives the same vector, different texts different ones;
// token-id inputs are accepted; usage counts the tokens.
func TestEmbeddings(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 2, Pooling: "mean"})
	texts := []string{"Once upon a time", "The dog barked at the cat.", "Lily had a red ball.", "Once upon a time"}
	var alone [][]float32
	for _, text := range texts {
		out := embed(t, ts, map[string]any{"model": "tiny", "input": text})
		if len(out.Data) != 1 {
			t.Fatalf("%d embeddings for one string", len(out.Data))
		}
		alone = append(alone, out.Data[0].Embedding.Floats)
	}
	batch := embed(t, ts, map[string]any{"model": "tiny", "input": texts, "encoding_format": "float", "user": "u1"})
	if batch.Object != "list" || batch.Model != "tiny" || len(batch.Data) != len(texts) {
		t.Fatalf("response %+v", batch)
	}
	if u := batch.Usage; u.PromptTokens <= len(texts) || u.TotalTokens != u.PromptTokens {
		t.Errorf("usage %+v", u)
	}
	for i, d := range batch.Data {
		v := d.Embedding.Floats
		if d.Object != "embedding" || d.Index != i || d.Embedding.Base64 || len(v) != ts.Info.EmbeddingSize {
			t.Fatalf("data[%d]: object %q index %d base64 %v, %d values (want %d)", i, d.Object, d.Index, d.Embedding.Base64, len(v), ts.Info.EmbeddingSize)
		}
		n := 0.0
		for _, x := range v {
			n += float64(x) * float64(x)
		}
		if math.Abs(math.Sqrt(n)-1) > 1e-5 {
			t.Errorf("data[%d]: norm %v", i, math.Sqrt(n))
		}
		if d := vecDiff(v, alone[i]); d > embedTol {
			t.Errorf("%q batched differs from alone by %v", texts[i], d)
		}
	}
	if d := vecDiff(batch.Data[0].Embedding.Floats, batch.Data[3].Embedding.Floats); d > embedTol {
		t.Errorf("the same text: vectors %v apart", d)
	}
	if d := vecDiff(batch.Data[0].Embedding.Floats, batch.Data[1].Embedding.Floats); d < 1e-3 {
		t.Errorf("different texts: vectors only %v apart", d)
	}

	// base64: the little-endian float32 bytes of the same vectors.
	resp, b := ts.Post(t, "/v1/embeddings", map[string]any{"model": "tiny", "input": texts, "encoding_format": "base64"})
	if resp.StatusCode != 200 {
		t.Fatalf("base64: %d %s", resp.StatusCode, b)
	}
	var raw struct {
		Data []struct {
			Embedding string `json:"embedding"`
		} `json:"data"`
	}
	unmarshal(t, string(b), &raw)
	var b64 wire.EmbeddingList
	unmarshal(t, string(b), &b64)
	for i, d := range b64.Data {
		if !d.Embedding.Base64 || raw.Data[i].Embedding == "" {
			t.Fatalf("data[%d] is not a base64 string: %s", i, b)
		}
		if d := vecDiff(d.Embedding.Floats, batch.Data[i].Embedding.Floats); d > embedTol {
			t.Errorf("data[%d]: base64 decodes %v away from the floats", i, d)
		}
	}

	// Token ids: one array, or an array of arrays.
	var tok struct {
		Tokens []int `json:"tokens"`
	}
	resp, b = ts.Post(t, "/tokenize", map[string]any{"content": texts[1], "add_special": true})
	if resp.StatusCode != 200 {
		t.Fatalf("/tokenize: %d %s", resp.StatusCode, b)
	}
	unmarshal(t, string(b), &tok)
	one := embed(t, ts, map[string]any{"model": "tiny", "input": tok.Tokens})
	if d := vecDiff(one.Data[0].Embedding.Floats, alone[1]); d > embedTol {
		t.Errorf("token ids differ from their text by %v", d)
	}
	two := embed(t, ts, map[string]any{"model": "tiny", "input": [][]int{tok.Tokens, tok.Tokens}, "dimensions": ts.Info.EmbeddingSize})
	if len(two.Data) != 2 || vecDiff(two.Data[1].Embedding.Floats, alone[1]) > embedTol {
		t.Errorf("array of token arrays: %+v", two)
	}
	if two.Usage.PromptTokens != 2*len(tok.Tokens) {
		t.Errorf("usage %+v for 2×%d tokens", two.Usage, len(tok.Tokens))
	}
}

// TestEmbeddingsPooling: last and cls pooling serve too (cls, on a
// causal model, is the BOS token's vector whatever the text).
func TestEmbeddingsPooling(t *testing.T) {
	for _, pooling := range []string{"last", "cls"} {
		t.Run(pooling, func(t *testing.T) {
			ts := startServer(t, engine.Config{Parallel: 1, Pooling: pooling})
			out := embed(t, ts, map[string]any{"model": "tiny", "input": []string{"Once upon a time", "Tom was sad."}})
			d := vecDiff(out.Data[0].Embedding.Floats, out.Data[1].Embedding.Floats)
			if pooling == "cls" && d > embedTol || pooling == "last" && d < 1e-3 {
				t.Errorf("%s: vectors of two texts %v apart", pooling, d)
			}
		})
	}
}

// TestEmbeddingsNotEmbedding: a model whose pooling is none (as the test
// models declare) refuses with a 400 saying how to serve it.
func TestEmbeddingsNotEmbedding(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 1})
	resp, b := ts.Post(t, "/v1/embeddings", map[string]any{"model": "tiny", "input": "hello"})
	var env wire.Envelope
	unmarshal(t, string(b), &env)
	if resp.StatusCode != 400 || env.Error.Code == nil || *env.Error.Code != "model_not_embedding" ||
		!strings.Contains(env.Error.Message, "--pooling") || !strings.Contains(env.Error.Message, "none") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// TestEmbeddingsBadRequests are 400s naming the field (and the input).
func TestEmbeddingsBadRequests(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 1, BatchSize: 64, Pooling: "mean"})
	long := strings.Repeat(" hello", 100)
	for _, c := range []struct {
		name  string
		body  map[string]any
		param string
		in    string // in the message
	}{
		{"no input", map[string]any{"model": "tiny"}, "input", "required"},
		{"null input", map[string]any{"model": "tiny", "input": nil}, "input", "required"},
		{"empty string", map[string]any{"model": "tiny", "input": ""}, "input", "empty"},
		{"empty array", map[string]any{"model": "tiny", "input": []string{}}, "input", "empty"},
		{"empty string item", map[string]any{"model": "tiny", "input": []string{"a", ""}}, "input", "input[1]"},
		{"empty token array", map[string]any{"model": "tiny", "input": [][]int{{1}, {}}}, "input", "input[1]"},
		{"number", map[string]any{"model": "tiny", "input": 5}, "input", "must be"},
		{"object", map[string]any{"model": "tiny", "input": map[string]any{}}, "input", "must be"},
		{"mixed", map[string]any{"model": "tiny", "input": []any{"a", []int{1}}}, "input", "mixes"},
		{"float token", map[string]any{"model": "tiny", "input": []any{[]any{1.5}}}, "input", "input[0]"},
		{"bad token", map[string]any{"model": "tiny", "input": [][]int{{1}, {1, 1 << 20}}}, "input", "input[1]"},
		{"negative token", map[string]any{"model": "tiny", "input": []int{-1}}, "input", "-1"},
		{"too long", map[string]any{"model": "tiny", "input": []string{"a", "b", long}}, "input", "input[2]"},
		{"too many", map[string]any{"model": "tiny", "input": make([]string, engine.MaxEmbedInputs+1)}, "input", "at most"},
		{"encoding", map[string]any{"model": "tiny", "input": "a", "encoding_format": "int8"}, "encoding_format", "int8"},
		{"dimensions", map[string]any{"model": "tiny", "input": "a", "dimensions": 8}, "dimensions", "embedding size"},
		{"dimensions type", map[string]any{"model": "tiny", "input": "a", "dimensions": "8"}, "dimensions", "integer"},
	} {
		resp, b := ts.Post(t, "/v1/embeddings", c.body)
		var env wire.Envelope
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatalf("%s: %v in %s", c.name, err, b)
		}
		if resp.StatusCode != 400 || env.Error.Param == nil || *env.Error.Param != c.param || !strings.Contains(env.Error.Message, c.in) {
			t.Errorf("%s: %d %s, want 400 about %s mentioning %q", c.name, resp.StatusCode, b, c.param, c.in)
		}
	}
	// Still serving.
	embed(t, ts, map[string]any{"model": "tiny", "input": "hello"})
}

// TestEmbeddingsBesideStreams: embedding requests served while greedy
// streams run leave the streams' text what it is alone (the goldens).
func TestEmbeddingsBesideStreams(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: len(golden), BatchSize: 64, Pooling: "mean"})
	want := embed(t, ts, map[string]any{"model": "tiny", "input": "The dog barked at the cat."}).Data[0].Embedding.Floats
	type stream struct {
		resp  *http.Response
		r     *wire.Reader
		first string
	}
	var streams []stream
	for _, g := range golden {
		resp := ts.OpenStream(t, context.Background(), "/v1/completions", map[string]any{
			"model": "tiny", "prompt": g.Prompt, "max_tokens": g.N, "temperature": 0, "ignore_eos": true, "stream": true,
		})
		// Read the first text event: the stream is decoding.
		r := wire.NewReader(resp.Body)
		ev, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		var c wire.TextCompletion
		unmarshal(t, string(ev.Data), &c)
		streams = append(streams, stream{resp, r, c.Choices[0].Text})
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				resp, b := ts.Post(t, "/v1/embeddings", map[string]any{"model": "tiny", "input": []string{"Once upon a time", "The dog barked at the cat."}})
				if resp.StatusCode != 200 {
					t.Errorf("beside streams: %d %s", resp.StatusCode, b)
					return
				}
				var out wire.EmbeddingList
				if err := json.Unmarshal(b, &out); err != nil {
					t.Error(err)
					return
				}
				if d := vecDiff(out.Data[1].Embedding.Floats, want); d > embedTol {
					t.Errorf("beside streams the vector moved by %v", d)
				}
			}
		}()
	}
	for i, s := range streams {
		rest := v1StreamRest(t, s.resp, s.r)
		if got := s.first + rest; got != golden[i].Want {
			t.Errorf("%q beside embeddings:\n got %q\nwant %q", golden[i].Prompt, got, golden[i].Want)
		}
	}
	wg.Wait()
}

// v1StreamRest reads the rest of a /v1/completions stream from r, whose
// first event was read, and returns the text of the remaining events.
func v1StreamRest(t *testing.T, resp *http.Response, r *wire.Reader) string {
	t.Helper()
	defer resp.Body.Close()
	var text strings.Builder
	for {
		ev, err := r.Next()
		if err == io.EOF {
			t.Fatal("stream ended without [DONE]")
		}
		if err != nil {
			t.Fatalf("read stream: %v", err)
		}
		if string(ev.Data) == "[DONE]" {
			return text.String()
		}
		var c wire.TextCompletion
		unmarshal(t, string(ev.Data), &c)
		if len(c.Choices) == 1 {
			text.WriteString(c.Choices[0].Text)
		}
	}
}

// TestEmbeddingsCancel: a client that goes away while its embeddings are
// queued or computed leaves the server serving, with the same vectors.
func TestEmbeddingsCancel(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 1, Pooling: "mean"})
	want := embed(t, ts, map[string]any{"model": "tiny", "input": "Lily had a red ball."}).Data[0].Embedding.Floats
	inputs := make([]string, 512)
	for i := range inputs {
		inputs[i] = "Lily had a red ball and a blue hat and a green kite."
	}
	body, err := json.Marshal(map[string]any{"model": "tiny", "input": inputs})
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		// Cancelled as soon as the request is written: the handler sees
		// the client gone while it tokenizes, waits or computes.
		ctx, cancel := context.WithCancel(context.Background())
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { cancel() }})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/embeddings", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := ts.Client.Do(req); err == nil {
			resp.Body.Close()
		}
		cancel()
	}
	got := embed(t, ts, map[string]any{"model": "tiny", "input": "Lily had a red ball."}).Data[0].Embedding.Floats
	if d := vecDiff(got, want); d > embedTol {
		t.Errorf("after cancelled requests the vector moved by %v", d)
	}
	e2etest.WaitFor(t, "an empty queue", func() bool { return ts.Metrics(t)["corral_queue_depth"] == 0 })
}

// TestOllamaEmbed: Ollama's own client gets from /api/embed the vectors
// /v1/embeddings gives, with Ollama's counts; a model that cannot embed
// and a wrong dimension are Ollama-shaped errors.
func TestOllamaEmbed(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 1, Pooling: "mean"})
	base, err := url.Parse(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := ollama.NewClient(base, ts.Client)
	texts := []string{"Once upon a time", "The dog barked at the cat."}
	want := embed(t, ts, map[string]any{"model": "tiny", "input": texts})
	got, err := c.Embed(context.Background(), &ollama.EmbedRequest{Model: "tiny", Input: texts})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Embeddings) != 2 || got.PromptEvalCount != want.Usage.PromptTokens || got.Model != "tiny" || got.TotalDuration <= 0 {
		t.Fatalf("answer %+v (usage %+v)", got, want.Usage)
	}
	for i := range texts {
		if d := vecDiff(got.Embeddings[i], want.Data[i].Embedding.Floats); d > embedTol {
			t.Errorf("input %d differs from /v1/embeddings by %g", i, d)
		}
	}
	one, err := c.Embed(context.Background(), &ollama.EmbedRequest{Model: "tiny", Input: texts[0]})
	if err != nil || len(one.Embeddings) != 1 || vecDiff(one.Embeddings[0], want.Data[0].Embedding.Floats) > embedTol {
		t.Fatalf("one string: %+v, %v", one, err)
	}
	_, err = c.Embed(context.Background(), &ollama.EmbedRequest{Model: "tiny", Input: texts[0], Dimensions: 3})
	var se ollama.StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusBadRequest || !strings.Contains(se.ErrorMessage, "dimensions") {
		t.Errorf("dimensions 3: %v", err)
	}

	plain := startServer(t, engine.Config{Parallel: 1})
	resp, b := plain.Post(t, "/api/embed", map[string]any{"model": "tiny", "input": "hi"})
	var oe struct {
		Error string `json:"error"`
	}
	unmarshal(t, string(b), &oe)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(oe.Error, "--pooling") {
		t.Errorf("pooling none: %d %s", resp.StatusCode, b)
	}
}
