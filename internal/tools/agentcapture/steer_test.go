package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"
)

// fixture reads the body of a request the agent CLIs sent
// (testdata/agents).
func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "agents", name))
	if err != nil {
		t.Fatal(err)
	}
	var c capture
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c.Body
}

// TestSteerAgentTurns: through the forwarder, each CLI's first turn
// reaches the server forced to the shell call with the command pinned,
// and its second turn (with the tool's output) pinned to the final
// answer; the rest of each request goes on as the CLI sent it, and the
// server's answer comes back.
func TestSteerAgentTurns(t *testing.T) {
	var got map[string]any
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = nil
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &got); err != nil {
			t.Errorf("%s: the body that went on: %v", r.URL.Path, err)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: ping\ndata: {}\n\n")
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	srv := httptest.NewServer(&recorder{out: t.TempDir(), prefix: "t", tool: true, upstream: newForwarder(u)})
	defer srv.Close()

	schema := func(m map[string]any, tool, key string) string {
		for _, x := range m["tools"].([]any) {
			if x.(map[string]any)["name"] == tool {
				b, _ := json.Marshal(x.(map[string]any)[key])
				return string(b)
			}
		}
		return ""
	}
	jsonOf := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	pinned := func(arg string) string {
		return `{"additionalProperties":false,"properties":{"` + arg + `":{"enum":["echo hello"],"type":"string"}},"required":["` + arg + `"],"type":"object"}`
	}
	final := `{"additionalProperties":false,"properties":{"answer":{"enum":["done"],"type":"string"}},"required":["answer"],"type":"object"}`
	for _, tc := range []struct {
		file, path string
		check      func(m map[string]any) string
	}{
		{"claude-code-tool-01-v1-messages.json", "/v1/messages", func(m map[string]any) string {
			if s := jsonOf(m["tool_choice"]); s != `{"name":"Bash","type":"tool"}` {
				return "tool_choice " + s
			}
			if s := schema(m, "Bash", "input_schema"); s != pinned("command") {
				return "Bash's schema " + s
			}
			if m["thinking"] != nil {
				return "thinking kept with a forced tool"
			}
			return ""
		}},
		{"claude-code-tool-02-v1-messages.json", "/v1/messages", func(m map[string]any) string {
			oc, _ := m["output_config"].(map[string]any)
			if s := jsonOf(oc["format"]); s != `{"schema":`+final+`,"type":"json_schema"}` {
				return "output_config.format " + s
			}
			if oc["effort"] == nil {
				return "output_config.effort dropped"
			}
			if m["tool_choice"] != nil || m["thinking"] == nil {
				return "tool_choice or thinking changed"
			}
			return ""
		}},
		{"codex-tool-01-v1-responses.json", "/v1/responses", func(m map[string]any) string {
			if s := jsonOf(m["tool_choice"]); s != `{"name":"exec_command","type":"function"}` {
				return "tool_choice " + s
			}
			if s := schema(m, "exec_command", "parameters"); s != pinned("cmd") {
				return "exec_command's schema " + s
			}
			return ""
		}},
		{"codex-tool-02-v1-responses.json", "/v1/responses", func(m map[string]any) string {
			text, _ := m["text"].(map[string]any)
			if s := jsonOf(text["format"]); s != `{"name":"final","schema":`+final+`,"strict":true,"type":"json_schema"}` {
				return "text.format " + s
			}
			if m["tool_choice"] != "auto" {
				return "tool_choice changed"
			}
			return ""
		}},
	} {
		body := fixture(t, tc.file)
		resp, err := http.Post(srv.URL+tc.path, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(answer) != "event: ping\ndata: {}\n\n" {
			t.Errorf("%s: answered %d %q, not the server's answer", tc.file, resp.StatusCode, answer)
		}
		if got == nil {
			t.Fatalf("%s: nothing reached the server", tc.file)
		}
		if msg := tc.check(got); msg != "" {
			t.Errorf("%s: %s", tc.file, msg)
		}
		var sent map[string]any
		json.Unmarshal(body, &sent)
		if jsonOf(got["messages"]) != jsonOf(sent["messages"]) || jsonOf(got["input"]) != jsonOf(sent["input"]) {
			t.Errorf("%s: the conversation changed on its way", tc.file)
		}
	}
}

// TestSteerOneCallPerSession: a session's request without tool results is
// steered to the call once; after that (a compacted conversation, whose
// tool results were summarised away) to the final answer.
func TestSteerOneCallPerSession(t *testing.T) {
	rc := &recorder{tool: true}
	body := fixture(t, "claude-code-tool-01-v1-messages.json")
	for i, want := range []string{"tool_choice", "output_config", "tool_choice"} {
		r := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
		session := "s1"
		if i == 2 {
			session = "s2"
		}
		r.Header.Set("X-Claude-Code-Session-Id", session)
		var got map[string]any
		if err := json.Unmarshal(rc.steered(r, body), &got); err != nil {
			t.Fatal(err)
		}
		oc, _ := got["output_config"].(map[string]any)
		switch is := got["tool_choice"] != nil; {
		case want == "tool_choice" && !is, want == "output_config" && (is || oc["format"] == nil):
			t.Errorf("request %d of session %s: tool_choice %v, output_config %v; want it steered by %s", i+1, session, got["tool_choice"], oc, want)
		}
	}
}
