package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corral-llm/corral/wire"
)

// API selects the request format a Client speaks.
type API string

// The supported APIs.
const (
	APIChat        API = "chat"        // POST /v1/chat/completions
	APICompletions API = "completions" // POST /v1/completions
	APILlamaCpp    API = "llamacpp"    // POST /completion (llama.cpp server)
)

// ParseAPI validates an API name.
func ParseAPI(s string) (API, error) {
	switch a := API(s); a {
	case APIChat, APICompletions, APILlamaCpp:
		return a, nil
	}
	return "", fmt.Errorf("api %q: want chat, completions or llamacpp", s)
}

// Error kinds recorded in Record.Err besides http_<status>.
const (
	ErrKindTimeout    = "timeout"      // the per-request timeout expired
	ErrKindDisconnect = "disconnect"   // the connection broke or the stream ended early
	ErrKindConnect    = "connect"      // no connection could be made
	ErrKindStream     = "stream_error" // the server sent an error inside the stream
	ErrKindAborted    = "aborted"      // the run itself was cancelled
)

// Client sends streaming requests to an HTTP server. It is a Target.
type Client struct {
	// BaseURL is the server's root, like http://127.0.0.1:8080; a trailing
	// /v1 is accepted.
	BaseURL string
	// API is the request format.
	API API
	// Model is sent as "model" (OpenAI APIs).
	Model string
	// Models, when set, are sent in turn instead of Model: a load spread
	// over several models of one server. NewClient's client takes turns
	// across requests; a Client literal sends Models[0].
	Models []string
	next   *atomic.Uint64
	// MaxTokens limits each generation (0: the server's default).
	MaxTokens int
	// IgnoreEOS asks the server to generate MaxTokens tokens regardless of
	// end-of-generation tokens.
	IgnoreEOS bool
	// Priority is sent as "priority" when not 0 (lower is served first).
	Priority int
	// HTTP is the client used; NewClient sets one with connection reuse.
	HTTP *http.Client
	// APIKey, when set, is sent as Authorization: Bearer on every request.
	APIKey string
}

// NewClient returns a Client whose transport keeps up to conns idle
// connections to the server. Call Close when done.
func NewClient(baseURL string, api API, conns int) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = max(conns, 2)
	tr.MaxIdleConnsPerHost = max(conns, 2)
	return &Client{BaseURL: baseURL, API: api, HTTP: &http.Client{Transport: tr}, next: new(atomic.Uint64)}
}

// Close closes idle connections.
func (c *Client) Close() { c.HTTP.CloseIdleConnections() }

// authorize adds the API key to req.
func (c *Client) authorize(req *http.Request) {
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
}

func (c *Client) url(path string) string {
	base := strings.TrimSuffix(strings.TrimSuffix(c.BaseURL, "/"), "/v1")
	return base + path
}

// CountTokens asks the server's /tokenize endpoint ({"content"} →
// {"tokens"}) for the number of tokens of text.
func (c *Client) CountTokens(ctx context.Context, text string) (int, error) {
	body, err := json.Marshal(map[string]any{"content": text, "add_special": false})
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url("/tokenize"), bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("tokenize: %w", err)
	}
	c.authorize(req)
	req.Header.Set("Content-Type", "application/json")
	// Tokenizing is idempotent: a nil Idempotency-Key (not sent) lets the
	// Transport retry it on a kept-alive connection the server had just
	// closed, which llama-server does under load (seen as EOF).
	req.Header["Idempotency-Key"] = nil
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, fmt.Errorf("tokenize: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return 0, fmt.Errorf("tokenize: %s", resp.Status)
	}
	var out struct {
		Tokens []json.RawMessage `json:"tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, fmt.Errorf("tokenize: decode response: %w", err)
	}
	if out.Tokens == nil {
		return 0, errors.New("tokenize: response has no \"tokens\"")
	}
	return len(out.Tokens), nil
}

// FirstModel returns the first model id listed by GET /v1/models.
func (c *Client) FirstModel(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url("/v1/models"), nil)
	if err != nil {
		return "", fmt.Errorf("list models: %w", err)
	}
	c.authorize(req)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return "", fmt.Errorf("list models: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("list models: %s", resp.Status)
	}
	var out struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", fmt.Errorf("list models: decode response: %w", err)
	}
	if len(out.Data) == 0 || out.Data[0].ID == "" {
		return "", errors.New("list models: the server lists none")
	}
	return out.Data[0].ID, nil
}

// requestBody builds the JSON body and path for p.
func (c *Client) requestBody(p Prompt) (string, []byte, error) {
	var (
		path string
		body any
	)
	zero := 0.0
	params := func() wire.RequestParams {
		return wire.RequestParams{Model: c.model(), Stream: true, StreamOptions: &wire.StreamOptions{IncludeUsage: true},
			MaxTokens: c.MaxTokens, Temperature: &zero, IgnoreEOS: c.IgnoreEOS, Priority: c.Priority}
	}
	switch c.API {
	case APIChat:
		path = "/v1/chat/completions"
		body = wire.ChatRequest{Messages: p.Messages, RequestParams: params()}
	case APICompletions:
		path = "/v1/completions"
		body = wire.CompletionRequest{Prompt: p.Text(), RequestParams: params()}
	case APILlamaCpp:
		path = "/completion"
		m := map[string]any{"stream": true, "prompt": p.Text(), "cache_prompt": true, "temperature": 0}
		if c.MaxTokens > 0 {
			m["n_predict"] = c.MaxTokens
		}
		if c.IgnoreEOS {
			m["ignore_eos"] = true
		}
		if c.Priority != 0 {
			m["priority"] = c.Priority
		}
		body = m
	default:
		return "", nil, fmt.Errorf("unknown api %q", c.API)
	}
	b, err := json.Marshal(body)
	return path, b, err
}

// model is the model to name in the next request, "" for none: the next
// of Models in turn, else Model.
func (c *Client) model() string {
	if len(c.Models) == 0 {
		return c.Model
	}
	i := uint64(0)
	if c.next != nil {
		i = (c.next.Add(1) - 1) % uint64(len(c.Models))
	}
	return c.Models[i]
}

// Do sends p as one streaming request and records its timings. With
// cancelAfter > 0 it hangs up after that many content chunks and marks the
// record Cancelled. ctx bounds the request: its deadline expiring is
// recorded as a timeout, its cancellation as aborted.
func (c *Client) Do(ctx context.Context, p Prompt, cancelAfter int) Record {
	rec := Record{PromptTokens: p.Tokens}
	path, body, err := c.requestBody(p)
	if err != nil {
		rec.Err, rec.ErrMsg = ErrKindStream, err.Error()
		return rec
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url(path), bytes.NewReader(body))
	if err != nil {
		rec.Err, rec.ErrMsg = ErrKindConnect, err.Error()
		return rec
	}
	c.authorize(req)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")

	start := time.Now()
	resp, err := c.HTTP.Do(req)
	rec.Submit = time.Since(start)
	if err != nil {
		rec.End = rec.Submit
		rec.Err, rec.ErrMsg = classify(ctx, err), err.Error()
		return rec
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		rec.End = time.Since(start)
		rec.Err = fmt.Sprintf("http_%d", resp.StatusCode)
		rec.ErrMsg = strings.TrimSpace(string(msg))
		return rec
	}

	r := wire.NewReader(resp.Body)
	for {
		sse, err := r.Next()
		if err != nil {
			rec.End = time.Since(start)
			switch {
			case err == io.EOF:
				rec.Err, rec.ErrMsg = ErrKindDisconnect, "stream ended before its final event"
			case errors.Is(err, wire.ErrLineTooLong):
				rec.Err, rec.ErrMsg = ErrKindStream, err.Error()
			default:
				rec.Err, rec.ErrMsg = classify(ctx, err), err.Error()
			}
			return rec
		}
		ev, perr := c.parseEvent(sse)
		now := time.Since(start)
		switch {
		case perr != nil:
			rec.End, rec.Err, rec.ErrMsg = now, ErrKindStream, perr.Error()
			return rec
		case ev.errMsg != "":
			rec.End, rec.Err, rec.ErrMsg = now, ErrKindStream, ev.errMsg
			return rec
		}
		if ev.content {
			rec.Chunks = append(rec.Chunks, now)
		}
		if ev.usage != nil {
			rec.FromUsage = true
			rec.PromptTokens = ev.usage.PromptTokens
			rec.OutputTokens = ev.usage.CompletionTokens
			rec.CachedTokens = ev.usage.PromptTokensDetails.CachedTokens
		}
		if ev.done {
			rec.End = now
			break
		}
		if cancelAfter > 0 && len(rec.Chunks) >= cancelAfter {
			rec.End, rec.Cancelled = now, true
			return rec
		}
	}
	if !rec.FromUsage {
		rec.OutputTokens = len(rec.Chunks)
	}
	return rec
}

// event is what one server-sent event said.
type event struct {
	content bool        // carried generated text
	text    string      // the text (llama.cpp's /completion)
	done    bool        // the stream is complete
	usage   *wire.Usage // token usage, when sent
	errMsg  string      // an error event's message
}

// llamaChunk is an event of llama.cpp's /completion stream (not OpenAI's
// format).
type llamaChunk struct {
	Content         string `json:"content"`
	Stop            bool   `json:"stop"`
	TokensPredicted int    `json:"tokens_predicted"`
	TokensEvaluated int    `json:"tokens_evaluated"`
	TokensCached    int    `json:"tokens_cached"`
}

// parseEvent interprets one server-sent event.
func (c *Client) parseEvent(sse wire.Event) (event, error) {
	if sse.Done {
		return event{done: true}, nil
	}
	var (
		ev    event
		err   error
		llama llamaChunk
		chat  wire.ChatCompletionChunk
		text  wire.TextCompletion
	)
	switch c.API {
	case APILlamaCpp:
		err = wire.DecodeEvent(sse.Data, &llama)
	case APICompletions:
		err = wire.DecodeEvent(sse.Data, &text)
	default:
		err = wire.DecodeEvent(sse.Data, &chat)
	}
	var ee *wire.EventError
	if errors.As(err, &ee) {
		return event{errMsg: ee.Error()}, nil
	}
	if err != nil {
		return event{}, fmt.Errorf("bad stream chunk %.200q: %w", sse.Data, err)
	}
	switch c.API {
	case APILlamaCpp:
		ev.content, ev.text = llama.Content != "", llama.Content
		if llama.Stop {
			ev.done = true
			if llama.TokensPredicted > 0 || llama.TokensEvaluated > 0 {
				ev.usage = &wire.Usage{PromptTokens: llama.TokensEvaluated, CompletionTokens: llama.TokensPredicted,
					PromptTokensDetails: wire.PromptTokensDetails{CachedTokens: llama.TokensCached}}
			}
		}
	case APICompletions:
		for _, choice := range text.Choices {
			ev.content = ev.content || choice.Text != ""
		}
		ev.usage = text.Usage
	default:
		for _, choice := range chat.Choices {
			d := choice.Delta
			ev.content = ev.content || d.Text() != "" || d.ReasoningContent != nil && *d.ReasoningContent != ""
		}
		ev.usage = chat.Usage
	}
	return ev, nil
}

// classify names the kind of a transport error.
func classify(ctx context.Context, err error) string {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return ErrKindTimeout
	case ctx.Err() != nil:
		return ErrKindAborted
	case errors.Is(err, syscall.ECONNREFUSED):
		return ErrKindConnect
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return ErrKindConnect
	}
	return ErrKindDisconnect
}
