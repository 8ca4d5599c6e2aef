package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

const testReply = "Hello there, agent."

func newTestServer(t *testing.T, tool bool) (*httptest.Server, string) {
	t.Helper()
	out := t.TempDir()
	srv := httptest.NewServer(&recorder{out: out, prefix: "t", reply: testReply, tool: tool})
	t.Cleanup(srv.Close)
	return srv, out
}

// streamResponses runs one streamed Responses request through the official
// SDK and returns the completed response, failing on any field the SDK does
// not know.
func streamResponses(t *testing.T, url string, tools []responses.ToolUnionParam) responses.Response {
	t.Helper()
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("sk-test-secret"), option.WithMaxRetries(0))
	stream := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
		Model: "m",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello")},
		Tools: tools,
	})
	defer stream.Close()
	var done *responses.Response
	var types []string
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		var extra map[string]any
		switch ev.Type {
		case "response.output_text.delta":
			e := ev.AsResponseOutputTextDelta()
			extra = fields(e.JSON.ExtraFields)
		case "response.output_item.done":
			e := ev.AsResponseOutputItemDone()
			extra = fields(e.JSON.ExtraFields)
		case "response.completed":
			e := ev.AsResponseCompleted()
			extra = fields(e.JSON.ExtraFields)
			for k, v := range e.Response.JSON.ExtraFields {
				extra["response."+k] = v
			}
			for k, v := range e.Response.Usage.JSON.ExtraFields {
				extra["usage."+k] = v
			}
			done = &e.Response
		}
		if len(extra) != 0 {
			t.Errorf("%s: fields the SDK does not know: %v", ev.Type, extra)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if done == nil {
		t.Fatalf("no response.completed in %v", types)
	}
	return *done
}

func fields[T any](m map[string]T) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func TestResponsesStreamText(t *testing.T) {
	srv, out := newTestServer(t, false)
	res := streamResponses(t, srv.URL, nil)
	if got := res.OutputText(); got != testReply {
		t.Errorf("output text %q, want %q", got, testReply)
	}
	if res.Status != "completed" || res.Usage.TotalTokens == 0 {
		t.Errorf("status %q usage %+v", res.Status, res.Usage)
	}

	// The request was captured, with the key redacted.
	b, err := os.ReadFile(filepath.Join(out, "t-01-v1-responses.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c capture
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if got := c.Headers["authorization"]; len(got) != 1 || got[0] != "Bearer REDACTED" {
		t.Errorf("authorization captured as %q", got)
	}
	if strings.Contains(string(b), "sk-test-secret") {
		t.Error("the key is in the capture")
	}
	if c.Path != "/v1/responses" || !strings.Contains(string(c.Body), `"Say hello"`) {
		t.Errorf("capture: path %q body %s", c.Path, c.Body)
	}
}

func TestResponsesStreamToolCall(t *testing.T) {
	srv, _ := newTestServer(t, true)
	tools := []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{
		Name:       "exec_command",
		Parameters: map[string]any{"type": "object"},
	}}}
	res := streamResponses(t, srv.URL, tools)
	if len(res.Output) != 1 {
		t.Fatalf("output %+v", res.Output)
	}
	call := res.Output[0].AsFunctionCall()
	if call.Name != "exec_command" || call.Arguments != `{"cmd":"echo hello"}` || call.CallID == "" {
		t.Errorf("function call %+v", call)
	}
}

// sseEvents reads an SSE body into its events' names and data.
func sseEvents(t *testing.T, resp *http.Response) (names []string, data []map[string]any) {
	t.Helper()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			names = append(names, name)
		}
		if raw, ok := strings.CutPrefix(line, "data: "); ok {
			var m map[string]any
			if err := json.Unmarshal([]byte(raw), &m); err != nil {
				t.Fatalf("event data %q: %v", raw, err)
			}
			data = append(data, m)
		}
	}
	return names, data
}

func TestMessagesStream(t *testing.T) {
	for _, tool := range []bool{false, true} {
		srv, out := newTestServer(t, tool)
		body := `{"model":"m","max_tokens":10,"stream":true,"tools":[{"name":"Bash","input_schema":{"type":"object"}}],` +
			`"messages":[{"role":"user","content":"Say hello"}]}`
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(body))
		req.Header.Set("x-api-key", "sk-ant-secret")
		req.Header.Set("anthropic-version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		names, data := sseEvents(t, resp)
		resp.Body.Close()

		want := "message_start content_block_start ping content_block_delta content_block_stop message_delta message_stop"
		if got := strings.Join(dedup(names), " "); got != want {
			t.Errorf("tool=%v: events %q, want %q", tool, got, want)
		}
		var text, args string
		for i, d := range data {
			if d["type"] != names[i] {
				t.Errorf("event %q has type %v", names[i], d["type"])
			}
			if delta, ok := d["delta"].(map[string]any); ok && names[i] == "content_block_delta" {
				text += str(delta, "text", "")
				args += str(delta, "partial_json", "")
			}
		}
		stop := data[len(data)-2]["delta"].(map[string]any)["stop_reason"]
		if !tool && (text != testReply || stop != "end_turn") {
			t.Errorf("text %q stop %v", text, stop)
		}
		if tool && (args != `{"command":"echo hello","description":"Run a command"}` || stop != "tool_use") {
			t.Errorf("tool input %q stop %v", args, stop)
		}
		b, err := os.ReadFile(filepath.Join(out, "t-01-v1-messages.json"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "sk-ant-secret") || !strings.Contains(string(b), `"x-api-key": [`) {
			t.Errorf("capture does not redact x-api-key:\n%s", b)
		}
	}
}

// dedup collapses runs of the same name (the text deltas).
func dedup(names []string) []string {
	var out []string
	for _, n := range names {
		if len(out) == 0 || out[len(out)-1] != n {
			out = append(out, n)
		}
	}
	return out
}

func TestUnknownPathIs404AndCaptured(t *testing.T) {
	srv, out := newTestServer(t, false)
	resp, err := http.Head(srv.URL + "/api/hello")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("status %d", resp.StatusCode)
	}
	if _, err := os.Stat(filepath.Join(out, "t-01-api-hello.json")); err != nil {
		t.Error(err)
	}
}
