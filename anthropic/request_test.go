package anthropic

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/media"
	"github.com/corral-llm/corral/serving"
)

// capture is a request recorded from an agent CLI (testdata/agents).
type capture struct {
	Path string          `json:"path"`
	Body json.RawMessage `json:"body"`
}

// readFile reads a capture's file.
func readFile(name string) ([]byte, error) {
	return os.ReadFile(filepath.Join("..", "testdata", "agents", name))
}

func readCapture(t *testing.T, name string) capture {
	t.Helper()
	b, err := readFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var c capture
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func roles(msgs []chat.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Role
	}
	return out
}

func text(t *testing.T, m chat.Message) string {
	t.Helper()
	s, err := m.Text()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestClaudeCodeCaptures translates the four requests Claude Code 2.1.332
// sent and checks what they became: the system prompt first, the system
// message inside messages kept in place, the tool round trip as a call and
// a tool message, the tools (the deferred one left out), adaptive thinking
// with its display omitted, and the sampling fields.
func TestClaudeCodeCaptures(t *testing.T) {
	toolNames := []string{"Agent", "Bash", "Edit", "ListAgents", "Read", "ReportFindings", "ScheduleWakeup", "Skill", "ToolSearch", "Workflow", "Write"}
	for _, tc := range []struct {
		file      string
		maxTokens int
		effort    string
		roles     []string
	}{
		{"claude-code-01-v1-messages.json", 128000, "medium", []string{"system", "user", "system"}},
		{"claude-code-corral-01-v1-messages.json", 32000, "high", []string{"system", "user", "system"}},
		{"claude-code-tool-01-v1-messages.json", 32000, "high", []string{"system", "user", "system"}},
		{"claude-code-tool-02-v1-messages.json", 32000, "high", []string{"system", "user", "system", "assistant", "tool"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			c := readCapture(t, tc.file)
			if c.Path != "/v1/messages" {
				t.Fatalf("capture of %s", c.Path)
			}
			r, e := ParseMessages(c.Body)
			if e != nil {
				t.Fatalf("ParseMessages: %d %s: %s", e.Status, e.Param, e.Message)
			}
			if got := roles(r.Messages); !reflect.DeepEqual(got, tc.roles) {
				t.Errorf("roles %v, want %v", got, tc.roles)
			}
			sys := text(t, r.Messages[0])
			if !strings.HasPrefix(sys, "x-anthropic-billing-header:") || !strings.Contains(sys, "\nYou are a Claude agent") {
				t.Errorf("system prompt %.200q", sys)
			}
			if u := text(t, r.Messages[1]); !strings.HasPrefix(u, "<system-reminder>") || !strings.HasSuffix(u, "\nSay hello") {
				t.Errorf("user message %.100q ... %q", u, u[max(0, len(u)-40):])
			}
			if env := text(t, r.Messages[2]); !strings.HasPrefix(env, "# Environment") {
				t.Errorf("system message in messages: %.100q", env)
			}
			var names []string
			for _, tool := range r.Tools {
				names = append(names, tool.Function.Name)
				if tool.Type != "function" || !json.Valid(tool.Function.Parameters) || tool.Function.Description == "" {
					t.Errorf("tool %s: %+v", tool.Function.Name, tool)
				}
			}
			if !reflect.DeepEqual(names, toolNames) {
				t.Errorf("tools %v, want %v", names, toolNames)
			}
			if r.Tools[1].Function.Name != "Bash" || !strings.Contains(string(r.Tools[1].Function.Parameters), `"$schema"`) {
				t.Errorf("Bash parameters not kept as sent: %.100s", r.Tools[1].Function.Parameters)
			}
			if r.Thinking == nil || !*r.Thinking || r.Budget != nil || !r.OmitThinking {
				t.Errorf("thinking %v budget %v omit %v, want adaptive: on, no budget, omitted", r.Thinking, r.Budget, r.OmitThinking)
			}
			if r.MaxTokens != tc.maxTokens || !r.Stream || r.Effort != tc.effort || !reflect.DeepEqual(r.ToolChoice, serving.ToolChoice{}) {
				t.Errorf("max_tokens %d stream %v effort %q tool_choice %+v", r.MaxTokens, r.Stream, r.Effort, r.ToolChoice)
			}
			if len(tc.roles) == 5 {
				call := r.Messages[3].ToolCalls
				if len(call) != 1 || call[0].ID != "toolu_90a6218d089c06c7cbb523b8" || call[0].Function.Name != "Bash" ||
					call[0].Function.Arguments != `{"command":"echo hello","description":"Print hello"}` {
					t.Errorf("tool call %+v", call)
				}
				res := r.Messages[4]
				if res.ToolCallID != "toolu_90a6218d089c06c7cbb523b8" || res.Name != "Bash" || text(t, res) != "hello" {
					t.Errorf("tool result %+v", res)
				}
			}
			// count_tokens reads the same request.
			ct, e := ParseCountTokens(c.Body)
			if e != nil || !reflect.DeepEqual(ct.Messages, r.Messages) || !reflect.DeepEqual(ct.Tools, r.Tools) {
				t.Errorf("ParseCountTokens differs: %v", e)
			}
		})
	}
}

// TestClaudeCodeRenders renders the translated tool round trip with a real
// template (Qwen3's), tools included: the call and its result reach the
// prompt.
func TestClaudeCodeRenders(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "chat", "testdata", "templates", "Qwen-Qwen3-0.6B.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chat.Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	r, e := ParseMessages(readCapture(t, "claude-code-tool-02-v1-messages.json").Body)
	if e != nil {
		t.Fatal(e)
	}
	prompt, err := tmpl.Render(r.Messages, chat.Options{AddGenerationPrompt: true, Tools: r.Tools})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"name": "Bash"`, // the tool definition
		"<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"echo hello\", \"description\": \"Print hello\"}}\n</tool_call>",
		"<tool_response>\nhello\n</tool_response>",
		"<|im_start|>system\n# Environment",
	} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt lacks %q", want)
		}
	}
}

// TestTranslate checks each form of the request, one field at a time.
func TestTranslate(t *testing.T) {
	const base = `"model":"m","max_tokens":100`
	msg := func(rest string) string {
		return `{` + base + `,"messages":[{"role":"user","content":"hi"}]` + rest + `}`
	}
	ptr := func(b bool) *bool { return &b }
	budget := 2048
	for _, tc := range []struct {
		name  string
		body  string
		check func(*Request) bool
	}{
		{"system string", msg(`,"system":"be brief"`), func(r *Request) bool {
			return reflect.DeepEqual(roles(r.Messages), []string{"system", "user"}) && string(r.Messages[0].Content) == `"be brief"`
		}},
		{"system blocks", msg(`,"system":[{"type":"text","text":"a"},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}}]`), func(r *Request) bool {
			return string(r.Messages[0].Content) == `"a\nb"`
		}},
		{"user blocks", `{` + base + `,"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`, func(r *Request) bool {
			return len(r.Messages) == 1 && string(r.Messages[0].Content) == `"a\nb"`
		}},
		{"assistant history", `{` + base + `,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[
			{"type":"thinking","thinking":"hmm","signature":"sig"},{"type":"redacted_thinking","data":"xx"},
			{"type":"text","text":"let me look"},{"type":"tool_use","id":"toolu_1","name":"f","input":{ "a" : 1 },"caller":{"type":"direct"}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"r1"},{"type":"text","text":"r2"}]},
			{"type":"tool_result","tool_use_id":"toolu_1","is_error":true,"content":"boom"},{"type":"tool_result","tool_use_id":"toolu_2"},{"type":"text","text":"go on"}]}]}`,
			func(r *Request) bool {
				a := r.Messages[1]
				return reflect.DeepEqual(roles(r.Messages), []string{"user", "assistant", "tool", "tool", "tool", "user"}) &&
					a.ReasoningContent == "hmm" && string(a.Content) == `"let me look"` &&
					len(a.ToolCalls) == 1 && a.ToolCalls[0].Function.Arguments == `{"a":1}` && a.ToolCalls[0].Type == "function" &&
					string(r.Messages[2].Content) == `"r1\nr2"` && r.Messages[2].Name == "f" &&
					string(r.Messages[3].Content) == `"Error: boom"` &&
					string(r.Messages[4].Content) == `""` && r.Messages[4].ToolCallID == "toolu_2" && r.Messages[4].Name == "" &&
					string(r.Messages[5].Content) == `"go on"`
			}},
		{"images", `{` + base + `,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"s","name":"shot","input":{}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"s","is_error":true,"content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}},{"type":"text","text":"t"}]},
			{"type":"text","text":"a"},{"type":"image","source":{"type":"url","url":"data:image/gif;base64,AA=="}},{"type":"text","text":"b"},{"type":"text","text":"c"}]}]}`, func(r *Request) bool {
			tool, user := text(t, r.Messages[1]), text(t, r.Messages[2])
			return len(r.Media) == 2 && r.Media[0] == serving.MediaSource{Param: "messages.1.content.0.content.0.source.data", Kind: media.KindImage, Base64: "AA==", Type: "image/png"} &&
				r.Media[1] == serving.MediaSource{Param: "messages.1.content.2.source.url", Kind: media.KindImage, URL: "data:image/gif;base64,AA=="} &&
				tool == "Error: "+chat.MediaMarker(0)+"t" && user == "a"+chat.MediaMarker(1)+"b\nc"
		}},
		{"tool use without input", `{` + base + `,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"x","name":"f"}]}]}`, func(r *Request) bool {
			return r.Messages[0].ToolCalls[0].Function.Arguments == "{}" && string(r.Messages[0].Content) == `""`
		}},
		{"tools", msg(`,"tools":[{"name":"f","description":"d","input_schema":{"type":"object"}},{"type":"custom","name":"g","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"},"strict":true},{"name":"h","input_schema":{"type":"object"},"defer_loading":true}]`), func(r *Request) bool {
			return len(r.Tools) == 2 && r.Tools[0].Function.Name == "f" && r.Tools[0].Function.Description == "d" && string(r.Tools[0].Function.Parameters) == `{"type":"object"}` && r.Tools[1].Function.Name == "g"
		}},
		{"deferred tool loaded by a tool_reference", `{` + base + `,"tools":[{"name":"h","input_schema":{"type":"object"},"defer_loading":true}],"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"s","name":"search","input":{}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"s","content":[{"type":"tool_reference","tool_name":"h"}]}]}]}`, func(r *Request) bool {
			return len(r.Tools) == 1 && r.Tools[0].Function.Name == "h" && string(r.Messages[1].Content) == `"h"`
		}},
		{"tool_choice auto", msg(`,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"auto","disable_parallel_tool_use":true}`), func(r *Request) bool {
			return reflect.DeepEqual(r.ToolChoice, serving.ToolChoice{Mode: serving.ToolsAuto, Single: true})
		}},
		{"tool_choice any", msg(`,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"any"}`), func(r *Request) bool {
			return reflect.DeepEqual(r.ToolChoice, serving.ToolChoice{Mode: serving.ToolsRequired})
		}},
		{"tool_choice tool", msg(`,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"tool","name":"f"}`), func(r *Request) bool {
			return reflect.DeepEqual(r.ToolChoice, serving.ToolChoice{Mode: serving.ToolsFunction, Name: "f"})
		}},
		{"tool_choice none", msg(`,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"none"}`), func(r *Request) bool {
			return reflect.DeepEqual(r.ToolChoice, serving.ToolChoice{Mode: serving.ToolsNone})
		}},
		{"sampling", msg(`,"temperature":0.5,"top_p":0.9,"top_k":40,"stop_sequences":["END","\n\n"],"metadata":{"user_id":"u"},"stream":true`), func(r *Request) bool {
			return *r.Temperature == 0.5 && *r.TopP == 0.9 && *r.TopK == 40 && reflect.DeepEqual(r.StopSequences, []string{"END", "\n\n"}) && r.Stream && r.MaxTokens == 100
		}},
		{"thinking enabled", msg(`,"thinking":{"type":"enabled","budget_tokens":2048}`), func(r *Request) bool {
			return reflect.DeepEqual(r.Thinking, ptr(true)) && reflect.DeepEqual(r.Budget, &budget) && !r.OmitThinking
		}},
		{"thinking disabled", msg(`,"thinking":{"type":"disabled"}`), func(r *Request) bool {
			return reflect.DeepEqual(r.Thinking, ptr(false)) && r.Budget == nil
		}},
		{"no thinking", msg(``), func(r *Request) bool { return r.Thinking == nil && r.Budget == nil }},
		{"output format", msg(`,"output_config":{"effort":"low","format":{"type":"json_schema","schema":{"type":"object"}}}`), func(r *Request) bool {
			return r.Effort == "low" && string(r.Format) == `{"type":"object"}`
		}},
		{"ignored fields", msg(`,"context_management":{"edits":[]},"cache_control":{"type":"ephemeral"},"service_tier":"auto","some_future_field":[1,2]`), func(r *Request) bool {
			return len(r.Messages) == 1
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, e := ParseMessages([]byte(tc.body))
			if e != nil {
				t.Fatalf("%s: %s", e.Param, e.Message)
			}
			if !tc.check(r) {
				b, _ := json.MarshalIndent(r, "", " ")
				t.Errorf("translated to %s", b)
			}
		})
	}
}

// TestRefused checks that each request corral cannot serve gets a 400
// that names the field.
func TestRefused(t *testing.T) {
	user := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		body, param, says string
	}{
		{`{"model":"m",` + user + `}`, "max_tokens", "required"},
		{`{"model":"m","max_tokens":0,` + user + `}`, "max_tokens", "at least 1"},
		{`{"model":"m","max_tokens":1.5,` + user + `}`, "max_tokens", "an integer"},
		{`{"max_tokens":1,` + user + `}`, "model", "required"},
		{`{"model":"m","max_tokens":1,"messages":[]}`, "messages", "at least one"},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"tool","content":"x"}]}`, "messages.0.role", `"tool"`},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"user"}]}`, "messages.0.content", "required"},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image"}]}]}`, "messages.0.content.0.source", "required"},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","data":"AA=="}}]}]}`, "messages.0.content.0.source.media_type", "required"},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/bmp","data":"AA=="}}]}]}`, "messages.0.content.0.source.media_type", "image/bmp"},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png"}}]}]}`, "messages.0.content.0.source.data", "required"},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":""}}]}]}`, "messages.0.content.0.source.url", "required"},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"file_1"}}]}]}`, "messages.0.content.0.source.file_id", "file sources are not supported"},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"text"}}]}]}`, "messages.0.content.0.source.type", `"text"`},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"image"}]}]}]}`, "messages.0.content.0.content.0.source", "required"},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"document"}]}]}]}`, "messages.0.content.0.content.0", "document blocks are not supported"},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}`, "messages.0.content.0", "only in user messages"},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"document"}]}]}`, "messages.0.content.0", "document blocks are not supported"},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"server_tool_use","id":"a","name":"web_search"}]}]}`, "messages.0.content.0", `"server_tool_use"`},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":[1]}]}]}`, "messages.0.content.0.input", "object"},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result"}]}]}`, "messages.0.content.0.tool_use_id", "required"},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"text":"a"}]}]}`, "messages.0.content.0.type", "required"},
		{`{"model":"m","max_tokens":1,"system":[{"type":"image"}],` + user + `}`, "system.0", "image"},
		{`{"model":"m","max_tokens":1,"temperature":1.5,` + user + `}`, "temperature", "between 0 and 1"},
		{`{"model":"m","max_tokens":1,"top_p":-1,` + user + `}`, "top_p", "between 0 and 1"},
		{`{"model":"m","max_tokens":1,"top_k":-1,` + user + `}`, "top_k", "0 or more"},
		{`{"model":"m","max_tokens":1,"stop_sequences":[""],` + user + `}`, "stop_sequences", "1 to 256 bytes"},
		{`{"model":"m","max_tokens":1,"stop_sequences":["` + strings.Repeat("a,", 8) + `"],` + user + `}`, "", ""}, // accepted: see below
		{`{"model":"m","max_tokens":1,"stop_sequences":["a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a"],` + user + `}`, "stop_sequences", "at most 16"},
		{`{"model":"m","max_tokens":1,"tools":[{"type":"web_search_20250305","name":"web_search"}],` + user + `}`, "tools.0.type", "Anthropic's own tools"},
		{`{"model":"m","max_tokens":1,"tools":[{"name":"a b","input_schema":{}}],` + user + `}`, "tools.0.name", "letters"},
		{`{"model":"m","max_tokens":1,"tools":[{"name":"f"}],` + user + `}`, "tools.0.input_schema", "JSON schema object"},
		{`{"model":"m","max_tokens":1,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"tool","name":"g"},` + user + `}`, "tool_choice.name", `"g" is not among the tools`},
		{`{"model":"m","max_tokens":1,"tool_choice":{"type":"any"},` + user + `}`, "tool_choice", "needs tools"},
		{`{"model":"m","max_tokens":1,"tool_choice":"auto",` + user + `}`, "tool_choice", "must be"},
		{`{"model":"m","max_tokens":1,"tool_choice":{"type":"required"},` + user + `}`, "tool_choice.type", `"required"`},
		{`{"model":"m","max_tokens":1,"thinking":{"type":"enabled"},` + user + `}`, "thinking.budget_tokens", "required"},
		{`{"model":"m","max_tokens":1,"thinking":{"type":"on"},` + user + `}`, "thinking.type", `"on"`},
		{`{"model":"m","max_tokens":1,"thinking":{"type":"adaptive","display":"full"},` + user + `}`, "thinking.display", `"full"`},
		{`{"model":"m","max_tokens":1,"output_config":{"format":{"type":"text"}},` + user + `}`, "output_config.format.type", "json_schema"},
		{`{"model":"m","max_tokens":1,"container":"c",` + user + `}`, "container", "not supported"},
		{`{"model":"m","max_tokens":1,"mcp_servers":[{"type":"url"}],` + user + `}`, "mcp_servers", "not supported"},
		{`{"model":"m","max_tokens":1,` + user + `} {}`, "", "after the top-level object"},
		{`[]`, "", "JSON object"},
		{"{\"model\":\"m\xff\"}", "", "UTF-8"},
		{``, "", "empty"},
	} {
		r, e := ParseMessages([]byte(tc.body))
		if tc.says == "" {
			if e != nil {
				t.Errorf("%s: refused: %s", tc.body, e.Message)
			}
			continue
		}
		if e == nil {
			t.Errorf("%.120s: accepted as %+v", tc.body, r)
			continue
		}
		if e.Status != 400 || e.Param != tc.param || !strings.Contains(e.Message, tc.says) {
			t.Errorf("%.120s: %d %q %q, want 400 %q saying %q", tc.body, e.Status, e.Param, e.Message, tc.param, tc.says)
		}
	}
	// count_tokens has no max_tokens.
	if _, e := ParseCountTokens([]byte(`{"model":"m",` + user + `}`)); e != nil {
		t.Errorf("count_tokens without max_tokens: %s", e.Message)
	}
}
