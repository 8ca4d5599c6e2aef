// Command agentcapture is a recording stand-in for the Anthropic Messages and
// OpenAI Responses endpoints. It listens on loopback, writes every request it
// receives (method, path, headers with secrets redacted, body) as one JSON file
// per request, and answers with the smallest valid reply of the protocol the
// client expects, so that an agent CLI (Claude Code, Codex) pointed at it runs
// a one-shot prompt to the end. The captured requests are the fixtures under
// testdata/agents/; scripts/agents.sh drives it.
//
// Usage:
//
//	agentcapture -out DIR [-addr 127.0.0.1:0] [-prefix NAME] [-reply TEXT] [-tool] [-upstream URL]
//
// With -tool, a request that carries no tool result yet is answered with one
// shell tool call (Claude Code's Bash, Codex's exec_command, running
// "echo hello", or the -command given) when the request offers that tool, so that the client's
// follow-up request, with the tool's result, is captured too.
//
// With -upstream, it answers nothing itself: it records each request and
// passes it on to the server at URL (corral), streaming the answer back.
// With -tool too, requests are steered before they go on (see steer): one
// that carries no tool result yet must be answered with that same shell
// call, any other with a short fixed answer, so that an agent session
// against a model of random weights takes a tool round trip and ends.
//
// It prints "listening on http://ADDR" on stdout once it accepts requests and
// runs until interrupted. The prefix can be changed while it runs with
// POST /_capture/prefix (body: the new prefix), so one recorder serves several
// clients in turn.
package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// maxBody bounds a captured request body; agent requests are tens to hundreds
// of kilobytes.
const maxBody = 16 << 20

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback)")
	out := flag.String("out", "", "folder for the captured requests (required)")
	prefix := flag.String("prefix", "capture", "file name prefix of the captured requests")
	reply := flag.String("reply", "Hello from agentcapture.", "the assistant text of every answer")
	tool := flag.Bool("tool", false, "answer a request without tool results with a shell tool call")
	command := flag.String("command", shellCommand, "the command of that shell tool call")
	upstream := flag.String("upstream", "", "pass requests on to the server at this URL instead of answering them")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "agentcapture: -out is required")
		os.Exit(2)
	}
	rec := &recorder{out: *out, prefix: *prefix, reply: *reply, tool: *tool, command: *command}
	if *upstream != "" {
		u, err := url.Parse(*upstream)
		if err != nil || u.Scheme == "" || u.Host == "" {
			fmt.Fprintf(os.Stderr, "agentcapture: -upstream %q: want a URL such as http://127.0.0.1:8080\n", *upstream)
			os.Exit(2)
		}
		rec.upstream = newForwarder(u)
	}
	if err := run(*addr, rec); err != nil {
		fmt.Fprintln(os.Stderr, "agentcapture:", err)
		os.Exit(1)
	}
}

func run(addr string, rec *recorder) error {
	if err := os.MkdirAll(rec.out, 0o755); err != nil {
		return fmt.Errorf("create output folder: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: rec, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("listening on http://%s\n", ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// recorder captures requests and answers them.
type recorder struct {
	out, reply string
	tool       bool
	command    string                 // of the shell tool call; "": shellCommand
	upstream   *httputil.ReverseProxy // nil: answer requests here

	mu     sync.Mutex
	prefix string
	seq    int
	called map[string]bool // agent sessions steered to a call (-upstream -tool)
}

// capture is one recorded request as written to disk.
type capture struct {
	Seq      int                 `json:"seq"`
	Time     string              `json:"time"`
	Method   string              `json:"method"`
	Path     string              `json:"path"`
	Query    string              `json:"query,omitempty"`
	Headers  map[string][]string `json:"headers"`
	BodySize int                 `json:"body_bytes"`
	Body     json.RawMessage     `json:"body,omitempty"`
	BodyText string              `json:"body_text,omitempty"`
	Status   int                 `json:"answered_status"`
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		slog.Error("read body", "path", r.URL.Path, "err", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.Method == http.MethodPost && r.URL.Path == "/_capture/prefix" {
		rc.mu.Lock()
		rc.prefix = strings.TrimSpace(string(body))
		rc.seq = 0
		rc.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	}

	var status int
	if rc.upstream != nil {
		body = rc.steered(r, body)
		status = rc.forward(w, r, body)
	} else {
		var req map[string]any
		_ = json.Unmarshal(body, &req)
		status = rc.answer(w, r, req)
	}
	if err := rc.save(r, body, status); err != nil {
		slog.Error("save capture", "path", r.URL.Path, "err", err)
	}
}

// readBody reads the request body, bounded, undoing gzip content encoding.
func readBody(r *http.Request) ([]byte, error) {
	var src io.Reader = http.MaxBytesReader(nil, r.Body, maxBody)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(src)
		if err != nil {
			return nil, fmt.Errorf("gzip body: %w", err)
		}
		src = io.LimitReader(zr, maxBody)
	}
	b, err := io.ReadAll(src)
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	return b, nil
}

// answer writes the reply for the request's path and returns its status.
func (rc *recorder) answer(w http.ResponseWriter, r *http.Request, req map[string]any) int {
	p := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(p, "/messages/count_tokens"):
		writeJSON(w, map[string]any{"input_tokens": approxTokens(req)})
	case r.Method == http.MethodPost && strings.HasSuffix(p, "/messages"):
		rc.anthropic(w, req)
	case r.Method == http.MethodPost && strings.HasSuffix(p, "/responses"):
		rc.responses(w, req)
	case r.Method == http.MethodGet && strings.HasSuffix(p, "/models"):
		writeJSON(w, map[string]any{"object": "list", "data": []any{}})
	default:
		http.Error(w, "agentcapture: no such endpoint", http.StatusNotFound)
		return http.StatusNotFound
	}
	return http.StatusOK
}

// approxTokens estimates a request's prompt size as its JSON bytes over four.
func approxTokens(req map[string]any) int {
	b, _ := json.Marshal(req)
	return len(b)/4 + 1
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		slog.Error("write answer", "err", err)
	}
}

// sse writes Server-Sent Events and flushes each one.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

func (s *sse) event(name string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		slog.Error("encode event", "event", name, "err", err)
		return
	}
	fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, b)
	if s.f != nil {
		s.f.Flush()
	}
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func str(req map[string]any, key, def string) string {
	if s, ok := req[key].(string); ok && s != "" {
		return s
	}
	return def
}

// shellCommand is the command of the tool call answered in -tool mode,
// unless -command names another.
const shellCommand = "echo hello"

// shell is the command of the tool calls answered or steered to.
func (rc *recorder) shell() string {
	if rc.command != "" {
		return rc.command
	}
	return shellCommand
}

// offersTool reports whether the request's tools include one named name.
func offersTool(req map[string]any, name string) bool {
	tools, _ := req["tools"].([]any)
	for _, t := range tools {
		if m, ok := t.(map[string]any); ok && m["name"] == name {
			return true
		}
	}
	return false
}

// hasBlock reports whether any element of list (messages or input items), or
// any content block of one, has the given type.
func hasBlock(list any, typ string) bool {
	items, _ := list.([]any)
	for _, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			continue
		}
		if m["type"] == typ {
			return true
		}
		blocks, _ := m["content"].([]any)
		for _, bl := range blocks {
			if bm, ok := bl.(map[string]any); ok && bm["type"] == typ {
				return true
			}
		}
	}
	return false
}

// anthropic answers POST /v1/messages, streamed or whole: with the reply
// text, or in -tool mode with one Bash tool call.
func (rc *recorder) anthropic(w http.ResponseWriter, req map[string]any) {
	id := newID("msg_")
	model := str(req, "model", "agentcapture")
	in := approxTokens(req)
	out := len(strings.Fields(rc.reply))
	call := rc.tool && offersTool(req, "Bash") && !hasBlock(req["messages"], "tool_result")
	input := map[string]any{"command": rc.shell(), "description": "Run a command"}
	args, _ := json.Marshal(input)
	block := map[string]any{"type": "text", "text": rc.reply}
	stop := "end_turn"
	if call {
		block = map[string]any{"type": "tool_use", "id": newID("toolu_"), "name": "Bash", "input": input}
		stop = "tool_use"
	}
	if stream, _ := req["stream"].(bool); !stream {
		writeJSON(w, map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": model,
			"content":       []any{block},
			"stop_reason":   stop,
			"stop_sequence": nil,
			"usage": map[string]any{
				"input_tokens": in, "output_tokens": out,
				"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
			},
		})
		return
	}
	s := newSSE(w)
	s.event("message_start", map[string]any{
		"type": "message_start",
		"message": map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": model,
			"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
			"usage": map[string]any{
				"input_tokens": in, "output_tokens": 1,
				"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
			},
		},
	})
	start := map[string]any{"type": "text", "text": ""}
	if call {
		start = map[string]any{"type": "tool_use", "id": block["id"], "name": "Bash", "input": map[string]any{}}
	}
	s.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": start})
	s.event("ping", map[string]any{"type": "ping"})
	if call {
		s.event("content_block_delta", map[string]any{
			"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "input_json_delta", "partial_json": string(args)},
		})
	} else {
		for _, piece := range pieces(rc.reply) {
			s.event("content_block_delta", map[string]any{
				"type": "content_block_delta", "index": 0,
				"delta": map[string]any{"type": "text_delta", "text": piece},
			})
		}
	}
	s.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	s.event("message_delta", map[string]any{
		"type":  "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": out},
	})
	s.event("message_stop", map[string]any{"type": "message_stop"})
}

// pieces splits text into word-sized deltas, spaces kept.
func pieces(text string) []string {
	var out []string
	for len(text) > 0 {
		i := strings.IndexByte(text[1:], ' ')
		if i < 0 {
			out = append(out, text)
			break
		}
		out = append(out, text[:i+1])
		text = text[i+1:]
	}
	return out
}

// responses answers POST /v1/responses, streamed or whole: with the reply
// text, or in -tool mode with one exec_command function call.
func (rc *recorder) responses(w http.ResponseWriter, req map[string]any) {
	respID := newID("resp_")
	itemID := newID("msg_")
	callID := newID("call_")
	created := time.Now().Unix()
	in := approxTokens(req)
	out := len(strings.Fields(rc.reply))
	base := func(status string, output []any, usage any) map[string]any {
		r := map[string]any{
			"id": respID, "object": "response", "created_at": created,
			"status": status, "model": str(req, "model", "agentcapture"),
			"output": output, "error": nil, "incomplete_details": nil,
			"instructions": req["instructions"], "metadata": map[string]any{},
			"parallel_tool_calls": req["parallel_tool_calls"] == true,
			"temperature":         1.0, "top_p": 1.0,
			"tool_choice":          valueOr(req["tool_choice"], "auto"),
			"tools":                valueOr(req["tools"], []any{}),
			"text":                 valueOr(req["text"], map[string]any{"format": map[string]any{"type": "text"}}),
			"reasoning":            valueOr(req["reasoning"], map[string]any{"effort": nil, "summary": nil}),
			"previous_response_id": req["previous_response_id"],
			"max_output_tokens":    req["max_output_tokens"],
			"truncation":           "disabled",
			"usage":                usage,
		}
		if status == "completed" {
			r["completed_at"] = time.Now().Unix()
		}
		return r
	}
	part := func(text string) map[string]any {
		return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
	}
	item := func(status string, content []any) map[string]any {
		return map[string]any{"id": itemID, "type": "message", "status": status, "role": "assistant", "content": content}
	}
	usage := map[string]any{
		"input_tokens":          in,
		"input_tokens_details":  map[string]any{"cached_tokens": 0},
		"output_tokens":         out,
		"output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens":          in + out,
	}
	call := rc.tool && offersTool(req, "exec_command") && !hasBlock(req["input"], "function_call_output")
	args, _ := json.Marshal(map[string]any{"cmd": rc.shell()})
	fc := func(status, arguments string) map[string]any {
		return map[string]any{
			"id": itemID, "type": "function_call", "status": status, "call_id": callID,
			"name": "exec_command", "arguments": arguments,
		}
	}
	done := item("completed", []any{part(rc.reply)})
	if call {
		done = fc("completed", string(args))
	}

	if stream, _ := req["stream"].(bool); !stream {
		writeJSON(w, base("completed", []any{done}, usage))
		return
	}
	s := newSSE(w)
	seq := 0
	ev := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		s.event(typ, fields)
	}
	ev("response.created", map[string]any{"response": base("in_progress", []any{}, nil)})
	ev("response.in_progress", map[string]any{"response": base("in_progress", []any{}, nil)})
	if call {
		ev("response.output_item.added", map[string]any{"output_index": 0, "item": fc("in_progress", "")})
		ev("response.function_call_arguments.delta", map[string]any{"item_id": itemID, "output_index": 0, "delta": string(args)})
		ev("response.function_call_arguments.done", map[string]any{"item_id": itemID, "output_index": 0, "arguments": string(args)})
	} else {
		ev("response.output_item.added", map[string]any{"output_index": 0, "item": item("in_progress", []any{})})
		loc := func(m map[string]any) map[string]any {
			m["item_id"], m["output_index"], m["content_index"] = itemID, 0, 0
			return m
		}
		ev("response.content_part.added", loc(map[string]any{"part": part("")}))
		for _, piece := range pieces(rc.reply) {
			ev("response.output_text.delta", loc(map[string]any{"delta": piece, "logprobs": []any{}}))
		}
		ev("response.output_text.done", loc(map[string]any{"text": rc.reply, "logprobs": []any{}}))
		ev("response.content_part.done", loc(map[string]any{"part": part(rc.reply)}))
	}
	ev("response.output_item.done", map[string]any{"output_index": 0, "item": done})
	ev("response.completed", map[string]any{"response": base("completed", []any{done}, usage)})
}

func valueOr(v, def any) any {
	if v == nil {
		return def
	}
	return v
}

// secretWords mark the headers whose values are redacted: any header whose
// name contains one of them.
var secretWords = []string{"authorization", "api-key", "apikey", "token", "secret", "cookie"}

func redact(h http.Header) map[string][]string {
	out := make(map[string][]string, len(h))
	for name, vals := range h {
		lower := strings.ToLower(name)
		secret := false
		for _, w := range secretWords {
			if strings.Contains(lower, w) {
				secret = true
				break
			}
		}
		if !secret {
			out[lower] = vals
			continue
		}
		red := make([]string, len(vals))
		for i, v := range vals {
			// Keep the scheme ("Bearer") so the fixture shows which header carried the key.
			if scheme, _, ok := strings.Cut(v, " "); ok && lower == "authorization" {
				red[i] = scheme + " REDACTED"
			} else {
				red[i] = "REDACTED"
			}
		}
		out[lower] = red
	}
	return out
}

// save writes one request as PREFIX-NN-SLUG.json in the output folder.
func (rc *recorder) save(r *http.Request, body []byte, status int) error {
	rc.mu.Lock()
	rc.seq++
	seq, prefix := rc.seq, rc.prefix
	rc.mu.Unlock()

	c := capture{
		Seq: seq, Time: time.Now().UTC().Format(time.RFC3339Nano),
		Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
		Headers: redact(r.Header), BodySize: len(body), Status: status,
	}
	if json.Valid(body) {
		c.Body = body
	} else if len(body) > 0 {
		c.BodyText = string(body)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(c); err != nil {
		return fmt.Errorf("encode capture: %w", err)
	}
	slug := strings.Trim(strings.NewReplacer("/", "-", "?", "-").Replace(r.URL.Path), "-")
	if slug == "" {
		slug = "root"
	}
	name := filepath.Join(rc.out, fmt.Sprintf("%s-%02d-%s.json", prefix, seq, slug))
	if err := os.WriteFile(name, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write capture: %w", err)
	}
	keys := make([]string, 0, len(c.Headers))
	for k := range c.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	slog.Info("captured", "file", filepath.Base(name), "method", r.Method, "path", r.URL.Path,
		"bytes", len(body), "status", status, "headers", strings.Join(keys, ","))
	return nil
}
