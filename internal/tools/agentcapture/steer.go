package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
)

// newForwarder returns the proxy that passes requests on to upstream (a
// server's root URL), streaming its answers back as they come.
func newForwarder(upstream *url.URL) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.Out.Host = upstream.Host
		},
		FlushInterval: -1, // server-sent events go out as they are written
	}
}

// forward passes the request, with body (decoded, perhaps steered) in
// place of its own, to the upstream server and returns the status it
// answered.
func (rc *recorder) forward(w http.ResponseWriter, r *http.Request, body []byte) int {
	out := r.Clone(r.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	out.Header.Set("Content-Length", strconv.Itoa(len(body)))
	out.Header.Del("Content-Encoding") // readBody undid it
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	rc.upstream.ServeHTTP(sw, out)
	return sw.status
}

// statusWriter remembers the status written through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the writer's Flush.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// steer rewrites a request so that the server it goes to, whatever its
// model's weights, answers as an agent's model would in a short session:
// a request that offers the shell tool and carries no tool result yet
// must be answered with one call of that tool running command, as the
// recorder itself answers in -tool mode (tool_choice names the tool, and
// its schema allows that command alone), unless command is ""; any
// other with the JSON object finalAnswer (a structured-output schema that
// allows it alone), after which the model can only end its answer. It
// reports whether it rewrote req, and whether to a call.
func steer(path string, req map[string]any, command string) (steered, called bool) {
	path = strings.TrimSuffix(path, "/")
	switch {
	case command != "" && strings.HasSuffix(path, "/messages") && offersTool(req, "Bash") && !hasBlock(req["messages"], "tool_result"):
		pin(req, "Bash", "input_schema", "command", command)
		req["tool_choice"] = map[string]any{"type": "tool", "name": "Bash"}
		delete(req, "thinking") // Anthropic's API refuses thinking with a forced tool
		return true, true
	case strings.HasSuffix(path, "/messages"):
		oc, _ := req["output_config"].(map[string]any)
		if oc == nil {
			oc = map[string]any{}
		}
		oc["format"] = map[string]any{"type": "json_schema", "schema": finalSchema()}
		req["output_config"] = oc
	case command != "" && strings.HasSuffix(path, "/responses") && offersTool(req, "exec_command") && !hasBlock(req["input"], "function_call_output"):
		pin(req, "exec_command", "parameters", "cmd", command)
		req["tool_choice"] = map[string]any{"type": "function", "name": "exec_command"}
		return true, true
	case strings.HasSuffix(path, "/responses"):
		text, _ := req["text"].(map[string]any)
		if text == nil {
			text = map[string]any{}
		}
		text["format"] = map[string]any{"type": "json_schema", "name": "final", "strict": true, "schema": finalSchema()}
		req["text"] = text
	default:
		return false, false
	}
	return true, false
}

// finalAnswer is the answer steer pins a request to when it does not pin
// a shell call.
const finalAnswer = "done"

// finalSchema is the JSON schema that allows {"answer":"done"} alone.
func finalSchema() map[string]any {
	return map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"answer": map[string]any{"type": "string", "enum": []any{finalAnswer}}},
		"required":             []any{"answer"},
		"additionalProperties": false,
	}
}

// pin replaces the schema (under key) of the request's tool name with one
// whose only argument, arg, must be command.
func pin(req map[string]any, name, key, arg, command string) {
	tools, _ := req["tools"].([]any)
	for _, t := range tools {
		if m, ok := t.(map[string]any); ok && m["name"] == name {
			m[key] = map[string]any{
				"type":                 "object",
				"properties":           map[string]any{arg: map[string]any{"type": "string", "enum": []any{command}}},
				"required":             []any{arg},
				"additionalProperties": false,
			}
		}
	}
}

// steered returns body as it goes upstream: steered in -tool mode (see
// steer), to a call at most once per agent session (named by the header
// each CLI sends), so that a session whose context was compacted, and
// whose tool results were summarised away, is not made to call again.
func (rc *recorder) steered(r *http.Request, body []byte) []byte {
	var req map[string]any
	if !rc.tool || json.Unmarshal(body, &req) != nil {
		return body
	}
	session := r.Header.Get("X-Claude-Code-Session-Id") + r.Header.Get("Session-Id")
	rc.mu.Lock()
	defer rc.mu.Unlock()
	command := rc.shell()
	if session != "" && rc.called[session] {
		command = ""
	}
	did, called := steer(r.URL.Path, req, command)
	if !did {
		return body
	}
	if called && session != "" {
		if rc.called == nil {
			rc.called = map[string]bool{}
		}
		rc.called[session] = true
	}
	b, err := json.Marshal(req)
	if err != nil {
		return body
	}
	slog.Info("steered", "path", r.URL.Path, "call", called)
	return b
}
