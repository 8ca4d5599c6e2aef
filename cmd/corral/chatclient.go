package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/corral-llm/corral/wire"
)

// chatClient is a conversation with a model over the OpenAI chat API.
type chatClient struct {
	http        *http.Client
	base        string // server base URL
	model       string // model id to request
	system      string // system message, "" for none
	params      chatParams
	history     []wire.Message // user and assistant messages, in turn
	out, errOut io.Writer
	stats       bool // show the tokens and speed of each answer
}

// healthPoll is how often waitReady asks a loading server again.
const healthPoll = 250 * time.Millisecond

// waitReady returns nil once the server at url is up: GET /health answers
// anything but 503 (which corral and llama-server answer while they load
// the model: waitReady waits for them). It returns the dial error when
// nothing listens there.
func (c *chatClient) waitReady(ctx context.Context, url string) error {
	waiting := false
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
		if err != nil {
			return fmt.Errorf("server URL %q: %w", url, err)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			return nil
		}
		if bytes.Contains(body, []byte("draining")) {
			return fmt.Errorf("the server at %s is shutting down", url)
		}
		if !waiting {
			waiting = true
			fmt.Fprintf(c.errOut, "waiting for the server at %s to load its model…\n", url)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(healthPoll):
		}
	}
}

// answerStats describe an answer: its tokens, and their rate over the
// whole request, prompt included (a server coalesces the text of a fast
// answer into few events, so their arrival times say little).
type answerStats struct {
	tokens int
	rate   float64 // tokens per second; 0 when unknown
}

// send asks for the answer to the conversation followed by the user
// message line, writing its text to c.out as it streams. It returns the
// text written, also when it fails or ctx ends midway.
func (c *chatClient) send(ctx context.Context, line string) (string, answerStats, error) {
	msgs := make([]wire.Message, 0, len(c.history)+2)
	if c.system != "" {
		msgs = append(msgs, wire.Message{Role: "system", Content: c.system})
	}
	msgs = append(append(msgs, c.history...), wire.Message{Role: "user", Content: line})
	// The parameters /set sets are any of chatParamTable's: a map.
	body := map[string]any{
		"model": c.model, "messages": msgs, "stream": true,
		"stream_options": wire.StreamOptions{IncludeUsage: true},
	}
	for _, p := range chatParamTable {
		if v, ok := c.params[p.name]; ok {
			body[p.field] = v
		}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return "", answerStats{}, fmt.Errorf("encode request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		return "", answerStats{}, fmt.Errorf("chat request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return "", answerStats{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return "", answerStats{}, responseError(resp)
	}

	var text strings.Builder
	usage, err := readChatStream(resp.Body, func(s string) {
		if ctx.Err() != nil {
			return // cancelled: write no more
		}
		text.WriteString(s)
		io.WriteString(c.out, s)
	})
	var st answerStats
	if usage != nil {
		st.tokens = usage.CompletionTokens
		if d := time.Since(start); d > 0 {
			st.rate = float64(st.tokens) / d.Seconds()
		}
	}
	return text.String(), st, err
}

// responseError is the error a non-2xx response reports: the message of
// OpenAI's error envelope, else the status and body.
func responseError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var env struct {
		Error *wire.ErrorObject `json:"error"`
	}
	if json.Unmarshal(b, &env) == nil && env.Error != nil && env.Error.Message != "" {
		return errors.New(env.Error.Message)
	}
	if s := strings.TrimSpace(string(b)); s != "" {
		return fmt.Errorf("%s: %.200s", resp.Status, s)
	}
	return errors.New(resp.Status)
}

// readChatStream reads a chat completion event stream up to its
// "data: [DONE]", calling text with each piece of content, and returns the
// usage it reported (nil if none). An error event is an error.
func readChatStream(r io.Reader, text func(string)) (*wire.Usage, error) {
	var usage *wire.Usage
	sr := wire.NewReader(r)
	for {
		ev, err := sr.Next()
		if err == io.EOF {
			return usage, errors.New("the answer stream ended early")
		}
		if err != nil {
			return usage, fmt.Errorf("read answer stream: %w", err)
		}
		if ev.Done {
			return usage, nil
		}
		var ch wire.ChatCompletionChunk
		if err := wire.DecodeEvent(ev.Data, &ch); err != nil {
			var ee *wire.EventError
			switch {
			case !errors.As(err, &ee):
				return usage, fmt.Errorf("bad stream event %.200q: %w", ev.Data, err)
			case ee.Object.Message == "":
				return usage, fmt.Errorf("error event without a message: %.200s", ev.Data)
			}
			return usage, errors.New(ee.Object.Message)
		}
		for _, c := range ch.Choices {
			if t := c.Delta.Text(); t != "" {
				text(t)
			}
		}
		if ch.Usage != nil {
			usage = ch.Usage
		}
	}
}

// chatParam is a parameter /set parameter takes: its name (ollama's), the
// request field it sets and how its value is parsed.
type chatParam struct {
	name, field string
	parse       func(string) (any, error)
}

// chatParamTable are the parameters, in the order /show lists them. The
// server validates their values.
var chatParamTable = []chatParam{
	{"temperature", "temperature", parseFloat},
	{"top_p", "top_p", parseFloat},
	{"top_k", "top_k", parseInt},
	{"seed", "seed", parseInt},
	{"num_predict", "max_tokens", parseInt},
	{"ignore_eos", "ignore_eos", parseBool}, // llama.cpp's extension
}

func parseFloat(s string) (any, error) { return strconv.ParseFloat(s, 64) }
func parseInt(s string) (any, error)   { return strconv.ParseInt(s, 10, 64) }
func parseBool(s string) (any, error)  { return strconv.ParseBool(s) }

// chatParamNames are the names of the parameters.
func chatParamNames() []string {
	names := make([]string, len(chatParamTable))
	for i, p := range chatParamTable {
		names[i] = p.name
	}
	return names
}

// chatParams are the parameters set, by name.
type chatParams map[string]any

// set sets the parameter name to value.
func (ps chatParams) set(name, value string) error {
	for _, p := range chatParamTable {
		if p.name == name {
			v, err := p.parse(value)
			if err != nil {
				return fmt.Errorf("parameter %s: %w", name, err)
			}
			ps[name] = v
			return nil
		}
	}
	return fmt.Errorf("unknown parameter %q (known: %s)", name, strings.Join(chatParamNames(), ", "))
}
