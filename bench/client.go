package bench

import (
	"bufio"
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
	m := map[string]any{"stream": true}
	var path string
	switch c.API {
	case APIChat, APICompletions:
		path = "/v1/completions"
		m["prompt"] = p.Text()
		if c.API == APIChat {
			path = "/v1/chat/completions"
			delete(m, "prompt")
			m["messages"] = p.Messages
		}
		if len(c.Models) > 0 {
			i := uint64(0)
			if c.next != nil {
				i = (c.next.Add(1) - 1) % uint64(len(c.Models))
			}
			m["model"] = c.Models[i]
		} else if c.Model != "" {
			m["model"] = c.Model
		}
		m["stream_options"] = map[string]any{"include_usage": true}
		m["temperature"] = 0
		if c.MaxTokens > 0 {
			m["max_tokens"] = c.MaxTokens
		}
	case APILlamaCpp:
		path = "/completion"
		m["prompt"] = p.Text()
		m["cache_prompt"] = true
		m["temperature"] = 0
		if c.MaxTokens > 0 {
			m["n_predict"] = c.MaxTokens
		}
	default:
		return "", nil, fmt.Errorf("unknown api %q", c.API)
	}
	if c.IgnoreEOS {
		m["ignore_eos"] = true
	}
	if c.Priority != 0 {
		m["priority"] = c.Priority
	}
	b, err := json.Marshal(m)
	return path, b, err
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

	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			ev, perr := c.parseLine(line)
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
		if err != nil {
			rec.End = time.Since(start)
			if err == io.EOF {
				rec.Err, rec.ErrMsg = ErrKindDisconnect, "stream ended before its final event"
			} else {
				rec.Err, rec.ErrMsg = classify(ctx, err), err.Error()
			}
			return rec
		}
	}
	if !rec.FromUsage {
		rec.OutputTokens = len(rec.Chunks)
	}
	return rec
}

// event is what one SSE line said.
type event struct {
	content bool   // carried generated text
	text    string // the text (llama.cpp's /completion)
	done    bool   // the stream is complete
	usage   *usage // token usage, when sent
	errMsg  string // an error object's message
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// streamChunk holds the fields of every API's stream chunk that matter here.
type streamChunk struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *usage          `json:"usage"`
	Error json.RawMessage `json:"error"`
	// llama.cpp /completion
	Content         string `json:"content"`
	Stop            bool   `json:"stop"`
	TokensPredicted int    `json:"tokens_predicted"`
	TokensEvaluated int    `json:"tokens_evaluated"`
	TokensCached    int    `json:"tokens_cached"`
}

// parseLine interprets one line of a server-sent event stream.
func (c *Client) parseLine(line []byte) (event, error) {
	line = bytes.TrimSpace(line)
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return event{}, nil // blank separator, comment or other SSE field
	}
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		return event{done: true}, nil
	}
	var ch streamChunk
	if err := json.Unmarshal(data, &ch); err != nil {
		return event{}, fmt.Errorf("bad stream chunk %.200q: %w", data, err)
	}
	if len(ch.Error) > 0 && string(ch.Error) != "null" {
		return event{errMsg: errorMessage(ch.Error)}, nil
	}
	var ev event
	if c.API == APILlamaCpp {
		ev.content, ev.text = ch.Content != "", ch.Content
		if ch.Stop {
			ev.done = true
			if ch.TokensPredicted > 0 || ch.TokensEvaluated > 0 {
				ev.usage = &usage{PromptTokens: ch.TokensEvaluated, CompletionTokens: ch.TokensPredicted}
				ev.usage.PromptTokensDetails.CachedTokens = ch.TokensCached
			}
		}
		return ev, nil
	}
	for _, choice := range ch.Choices {
		if choice.Text != "" || choice.Delta.Content != "" || choice.Delta.ReasoningContent != "" {
			ev.content = true
		}
	}
	ev.usage = ch.Usage
	return ev, nil
}

// errorMessage extracts "message" from an error object, or returns it raw.
func errorMessage(raw json.RawMessage) string {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Message != "" {
		return e.Message
	}
	return string(raw)
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
