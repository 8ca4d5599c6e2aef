package responses

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/wire"
)

// translate decodes body and translates it without a store.
func translate(t *testing.T, body string) (*Translation, *Error) {
	t.Helper()
	r, e := Decode([]byte(body))
	if e != nil {
		return nil, e
	}
	return Translate(r, nil, Limits{})
}

// msg is a compact view of a chat.Message for comparisons.
type msg struct {
	Role, Content, Reasoning, CallID string
	Calls                            []string // "id name args"
}

func view(t *testing.T, ms []chat.Message) []msg {
	t.Helper()
	out := make([]msg, len(ms))
	for i, m := range ms {
		text, err := m.Text()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		v := msg{Role: m.Role, Content: text, Reasoning: m.ReasoningContent, CallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			v.Calls = append(v.Calls, c.ID+" "+c.Function.Name+" "+c.Function.Arguments)
		}
		out[i] = v
	}
	return out
}

func TestTranslateInput(t *testing.T) {
	cases := []struct {
		name, body string
		want       []msg
	}{
		{"string", `{"input":"hi"}`, []msg{{Role: "user", Content: "hi"}}},
		{"instructions first", `{"instructions":"be brief","input":"hi"}`,
			[]msg{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}}},
		{"easy message", `{"input":[{"role":"user","content":"hi"}]}`, []msg{{Role: "user", Content: "hi"}}},
		{"parts", `{"input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},
			{"type":"message","role":"assistant","content":[{"type":"output_text","text":"c","annotations":[]}]}]}`,
			[]msg{{Role: "developer", Content: "a\nb"}, {Role: "assistant", Content: "c"}}},
		{"calls merge", `{"input":[{"role":"user","content":"go"},
			{"type":"message","role":"assistant","content":"doing it"},
			{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
			{"type":"function_call","call_id":"c2","name":"g","arguments":"{\"x\":1}"},
			{"type":"function_call_output","call_id":"c1","output":"one"},
			{"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"tw"},{"type":"input_text","text":"o"}]},
			{"type":"function_call","call_id":"c3","name":"f","arguments":"{}"}]}`,
			[]msg{{Role: "user", Content: "go"}, {Role: "assistant", Content: "doing it", Calls: []string{"c1 f {}", `c2 g {"x":1}`}},
				{Role: "tool", Content: "one", CallID: "c1"}, {Role: "tool", Content: "tw\no", CallID: "c2"},
				{Role: "assistant", Calls: []string{"c3 f {}"}}}},
		{"reasoning to next assistant", `{"input":[{"role":"user","content":"q"},
			{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"think"}],"encrypted_content":"xyz"},
			{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
			{"type":"function_call_output","call_id":"c1","output":"r"},
			{"type":"reasoning","id":"rs_2","summary":[{"type":"summary_text","text":"sum"}]},
			{"type":"message","role":"assistant","content":"done"}]}`,
			[]msg{{Role: "user", Content: "q"}, {Role: "assistant", Reasoning: "think", Calls: []string{"c1 f {}"}},
				{Role: "tool", Content: "r", CallID: "c1"}, {Role: "assistant", Content: "done", Reasoning: "sum"}}},
		{"reasoning after assistant text starts a new turn", `{"input":[{"role":"user","content":"q"},
			{"type":"message","role":"assistant","content":"a"},
			{"type":"reasoning","summary":[{"type":"summary_text","text":"t"}]},
			{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}]}`,
			[]msg{{Role: "user", Content: "q"}, {Role: "assistant", Content: "a"}, {Role: "assistant", Reasoning: "t", Calls: []string{"c1 f {}"}}}},
		{"consecutive reasoning joins", `{"input":[{"role":"user","content":"q"},{"type":"reasoning","summary":[{"type":"summary_text","text":"a"}]},
			{"type":"reasoning","content":[{"type":"reasoning_text","text":"b"}],"summary":[]},{"role":"assistant","content":"c"}]}`,
			[]msg{{Role: "user", Content: "q"}, {Role: "assistant", Content: "c", Reasoning: "a\nb"}}},
		{"media", `{"input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"data:image/png;base64,AA==","detail":"low"},{"type":"input_text","text":"b"},{"type":"input_text","text":"c"}]},
			{"type":"function_call","call_id":"c1","name":"shot","arguments":"{}"},
			{"type":"function_call_output","call_id":"c1","output":[{"type":"input_image","image_url":"data:image/png;base64,AA=="},{"type":"input_text","text":"t"}]},
			{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"UklG","format":"wav"}}]}]}`,
			[]msg{{Role: "user", Content: "a" + chat.MediaMarker(0) + "b\nc"}, {Role: "assistant", Calls: []string{"c1 shot {}"}},
				{Role: "tool", Content: chat.MediaMarker(1) + "t", CallID: "c1"}, {Role: "user", Content: chat.MediaMarker(2)}}},
		{"trailing reasoning", `{"input":[{"role":"user","content":"q"},{"type":"reasoning","summary":[{"type":"summary_text","text":"t"}]}]}`,
			[]msg{{Role: "user", Content: "q"}, {Role: "assistant", Reasoning: "t"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr, e := translate(t, c.body)
			if e != nil {
				t.Fatal(e)
			}
			if got := view(t, tr.Messages); !reflect.DeepEqual(got, c.want) {
				t.Errorf("messages\n got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestTranslateRefuses(t *testing.T) {
	cases := []struct {
		name, body string
		status     int
		param      string
		says       string // in the message
	}{
		{"image file", `{"input":[{"role":"user","content":[{"type":"input_image","file_id":"file_1","detail":"auto"}]}]}`, 400, "input[0].content[0].file_id", "Files API"},
		{"image without URL", `{"input":[{"role":"user","content":[{"type":"input_image","detail":"low"}]}]}`, 400, "input[0].content[0].image_url", "missing"},
		{"audio without data", `{"input":[{"role":"user","content":[{"type":"input_audio","input_audio":{"format":"wav"}}]}]}`, 400, "input[0].content[0].input_audio.data", "missing"},
		{"file part", `{"input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_file","file_id":"f"}]}]}`, 400, "input[0].content[1].type", "input_file"},
		{"image without URL in output", `{"input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_image"}]}]}`, 400, "input[0].output[0].image_url", "missing"},
		{"file in output", `{"input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_file","file_data":"x"}]}]}`, 400, "input[0].output[0].type", "input_file"},
		{"unknown item", `{"input":[{"type":"computer_call","call_id":"c"}]}`, 400, "input[0].type", "computer_call"},
		{"bad role", `{"input":[{"type":"message","role":"tool","content":"x"}]}`, 400, "input[0].role", "tool"},
		{"no input", `{}`, 400, "input", "missing"},
		{"empty input", `{"input":[]}`, 400, "input", "empty"},
		{"input not items", `{"input":3}`, 400, "input", "string or an array"},
		{"call without id", `{"input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, 400, "input[0].call_id", "call_id"},
		{"force web_search", `{"input":"x","tools":[{"type":"web_search"}],"tool_choice":{"type":"web_search"}}`, 400, "tool_choice", "web_search"},
		{"force custom", `{"input":"x","tools":[{"type":"custom","name":"exec"}],"tool_choice":{"type":"custom","name":"exec"}}`, 400, "tool_choice", "custom"},
		{"force unknown function", `{"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}}`, 400, "tool_choice", `"g"`},
		{"required without functions", `{"input":"x","tools":[{"type":"web_search"}],"tool_choice":"required"}`, 400, "tool_choice", "required"},
		{"duplicate tool", `{"input":"x","tools":[{"type":"function","name":"f"},{"type":"namespace","name":"n","tools":[{"type":"function","name":"f"}]}]}`, 400, "tools[1].tools[0].name", "twice"},
		{"bad name", `{"input":"x","tools":[{"type":"function","name":"a.b"}]}`, 400, "tools[0].name", "a.b"},
		{"bad parameters", `{"input":"x","tools":[{"type":"function","name":"f","parameters":[1]}]}`, 400, "tools[0].parameters", "schema"},
		{"effort", `{"input":"x","reasoning":{"effort":"max"}}`, 400, "reasoning.effort", "max"},
		{"format type", `{"input":"x","text":{"format":{"type":"yaml"}}}`, 400, "text.format.type", "yaml"},
		{"schema missing", `{"input":"x","text":{"format":{"type":"json_schema","name":"s"}}}`, 400, "text.format.schema", "schema"},
		{"max_output_tokens", `{"input":"x","max_output_tokens":0}`, 400, "max_output_tokens", "at least 1"},
		{"temperature", `{"input":"x","temperature":3}`, 400, "temperature", "between 0 and 2"},
		{"background", `{"input":"x","background":true}`, 400, "background", "background"},
		{"conversation", `{"input":"x","conversation":"conv_1"}`, 400, "conversation", "previous_response_id"},
		{"wrong type", `{"input":"x","store":"yes"}`, 400, "store", "wrong type"},
		{"previous without store", `{"input":"x","previous_response_id":"resp_1"}`, 404, "previous_response_id", "resp_1"},
		{"reference without store", `{"input":[{"type":"item_reference","id":"msg_1"}]}`, 404, "input[0].id", "msg_1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, e := translate(t, c.body)
			if e == nil {
				t.Fatal("accepted")
			}
			env := e.Envelope().Error
			if e.Status != c.status || e.Param != c.param || !strings.Contains(e.Message, c.says) || env.Param == nil || *env.Param != c.param {
				t.Errorf("got %d %q %q, want %d %q and a message naming %q", e.Status, e.Param, e.Message, c.status, c.param, c.says)
			}
			if env.Type != wire.TypeInvalidRequest {
				t.Errorf("type %q", env.Type)
			}
		})
	}
}

func TestTranslateLimits(t *testing.T) {
	r, _ := Decode([]byte(`{"input":[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"c"}],
		"tools":[{"type":"function","name":"f"},{"type":"namespace","name":"n","tools":[{"type":"function","name":"g"}]}]}`))
	if _, e := Translate(r, nil, Limits{MaxItems: 2}); e == nil || e.Param != "input" {
		t.Errorf("3 items past a limit of 2: %v", e)
	}
	if _, e := Translate(r, nil, Limits{MaxTools: 1}); e == nil || e.Param != "tools[1].tools[0]" || e.Code != "limit_exceeded" || !strings.Contains(e.Message, "--max-tools") {
		t.Errorf("2 tools past a limit of 1: %v", e)
	}
	if _, e := Translate(r, nil, Limits{MaxItems: 3, MaxTools: 2}); e != nil {
		t.Errorf("at the limits: %v", e)
	}
}

func TestTranslateTools(t *testing.T) {
	tr, e := translate(t, `{"input":"x","parallel_tool_calls":false,"tools":[
		{"type":"function","name":"f","description":"F","strict":true,"parameters":{"type":"object","properties":{}}},
		{"type":"web_search","external_web_access":false},
		{"type":"namespace","name":"ns","description":"d","tools":[{"type":"function","name":"g","parameters":null},{"type":"custom","name":"exec","format":{"type":"grammar"}}]},
		{"type":"file_search","vector_store_ids":[]}]}`)
	if e != nil {
		t.Fatal(e)
	}
	want := []wire.Tool{
		{Type: "function", Function: wire.FunctionDef{Name: "f", Description: "F", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}},
		{Type: "function", Function: wire.FunctionDef{Name: "g"}},
	}
	if !reflect.DeepEqual(tr.Tools, want) {
		t.Errorf("tools %+v", tr.Tools)
	}
	if !reflect.DeepEqual(tr.Namespaces, map[string]string{"g": "ns"}) {
		t.Errorf("namespaces %v", tr.Namespaces)
	}
	if !reflect.DeepEqual(tr.Dropped, []string{"web_search", "custom", "file_search"}) {
		t.Errorf("dropped %v", tr.Dropped)
	}
	if tr.ParallelToolCalls || tr.ToolChoice.Mode != "auto" {
		t.Errorf("parallel %v, choice %+v", tr.ParallelToolCalls, tr.ToolChoice)
	}

	choices := []struct{ choice, tools string }{
		{`"none"`, `{"Mode":"none","Name":"","Allowed":null,"Single":false}`},
		{`"required"`, `{"Mode":"required","Name":"","Allowed":null,"Single":false}`},
		{`{"type":"function","name":"g"}`, `{"Mode":"function","Name":"g","Allowed":null,"Single":false}`},
		{`{"type":"allowed_tools","mode":"required","tools":[{"type":"function","name":"g"},{"type":"web_search"},{"type":"function","name":"g"}]}`, `{"Mode":"required","Name":"","Allowed":["g"],"Single":false}`},
		{`{"type":"allowed_tools","mode":"auto","tools":[{"type":"web_search"}]}`, `{"Mode":"none","Name":"","Allowed":null,"Single":false}`},
	}
	for _, c := range choices {
		tr, e := translate(t, `{"input":"x","tool_choice":`+c.choice+`,"tools":[{"type":"function","name":"f"},{"type":"namespace","name":"ns","tools":[{"type":"function","name":"g"}]}]}`)
		if e != nil {
			t.Errorf("%s: %v", c.choice, e)
			continue
		}
		if got, _ := json.Marshal(tr.ToolChoice); string(got) != c.tools {
			t.Errorf("%s: got %s, want %s", c.choice, got, c.tools)
		}
	}
	if tr, e := translate(t, `{"input":"x","tool_choice":"auto","tools":[{"type":"web_search"}]}`); e != nil || tr.ToolChoice.Mode != "none" {
		t.Errorf("auto with only built-in tools: %+v %v", tr, e)
	}
}

func TestTranslateSettings(t *testing.T) {
	tr, e := translate(t, `{"input":"x","max_output_tokens":64,"temperature":0.5,"top_p":0.9,"store":false,
		"reasoning":{"effort":"low","summary":"auto"},"text":{"format":{"type":"json_schema","name":"s","schema":{"type":"object"},"strict":true}},
		"prompt_cache_key":"k","metadata":{"a":"b"},"user":"u","service_tier":"auto","truncation":"auto","include":["reasoning.encrypted_content"]}`)
	if e != nil {
		t.Fatal(e)
	}
	if tr.MaxOutputTokens != 64 || *tr.Temperature != 0.5 || *tr.TopP != 0.9 || tr.Store || tr.ReasoningEffort != "low" {
		t.Errorf("settings %+v", tr)
	}
	if !tr.Format.JSON || string(tr.Format.Schema) != `{"type":"object"}` || tr.Format.Name != "s" {
		t.Errorf("format %+v", tr.Format)
	}
	tr, e = translate(t, `{"input":"x","text":{"format":{"type":"json_object"}}}`)
	if e != nil || !tr.Format.JSON || tr.Format.Schema != nil || !tr.Store || tr.Temperature != nil {
		t.Errorf("json_object: %+v %v", tr, e)
	}
	tr, e = translate(t, `{"input":"x","text":{"format":{"type":"text"},"verbosity":"low"}}`)
	if e != nil || tr.Format.JSON {
		t.Errorf("text: %+v %v", tr, e)
	}
}

// fakePrior is a Prior over fixed maps.
type fakePrior struct {
	convs map[string][]chat.Message
	items map[string]string
}

func (p fakePrior) Conversation(id string) ([]chat.Message, error) {
	if m, ok := p.convs[id]; ok {
		return m, nil
	}
	return nil, errNotFound("response", id)
}

func (p fakePrior) Item(id string) (json.RawMessage, error) {
	if it, ok := p.items[id]; ok {
		return json.RawMessage(it), nil
	}
	return nil, errNotFound("item", id)
}

func TestTranslatePrior(t *testing.T) {
	p := fakePrior{
		convs: map[string][]chat.Message{"resp_1": {{Role: "user", Content: jsonString("q")}, {Role: "assistant", Content: jsonString("a")}}},
		items: map[string]string{"msg_1": `{"type":"message","role":"user","content":"from the store"}`, "ref": `{"type":"item_reference","id":"msg_1"}`},
	}
	r, _ := Decode([]byte(`{"previous_response_id":"resp_1","instructions":"sys","input":[{"type":"item_reference","id":"msg_1"},{"id":"msg_1"},{"role":"user","content":"next"}]}`))
	tr, e := Translate(r, p, Limits{})
	if e != nil {
		t.Fatal(e)
	}
	want := []msg{{Role: "user", Content: "q"}, {Role: "assistant", Content: "a"}, {Role: "system", Content: "sys"},
		{Role: "user", Content: "from the store"}, {Role: "user", Content: "from the store"}, {Role: "user", Content: "next"}}
	if got := view(t, tr.Messages); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	for _, body := range []string{
		`{"previous_response_id":"resp_2","input":"x"}`,
		`{"input":[{"type":"item_reference","id":"msg_2"}]}`,
		`{"input":[{"type":"item_reference","id":"ref"}]}`,
	} {
		r, _ := Decode([]byte(body))
		if _, e := Translate(r, p, Limits{}); e == nil || (e.Status != http.StatusNotFound && !strings.Contains(e.Message, "item_reference")) {
			t.Errorf("%s: %v", body, e)
		}
	}
}

// TestTranslateCodex translates every request Codex sent (testdata/agents)
// and renders the messages with a template, as the core will.
func TestTranslateCodex(t *testing.T) {
	files, _ := filepath.Glob("../testdata/agents/codex-*.json")
	if len(files) != 4 {
		t.Fatalf("%d codex fixtures", len(files))
	}
	tmpl, err := chat.Lookup("chatml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var capture struct {
				Body json.RawMessage `json:"body"`
			}
			if err := json.Unmarshal(b, &capture); err != nil {
				t.Fatal(err)
			}
			r, e := Decode(capture.Body)
			if e != nil {
				t.Fatal(e)
			}
			tr, e := Translate(r, nil, Limits{})
			if e != nil {
				t.Fatal(e)
			}
			if _, err := tmpl.Render(tr.Messages, chat.Options{Tools: tr.Tools, AddGenerationPrompt: true}); err != nil {
				t.Fatalf("render: %v", err)
			}
			roles := make([]string, len(tr.Messages))
			for i, m := range tr.Messages {
				roles[i] = m.Role
			}
			names := make([]string, len(tr.Tools))
			for i, tool := range tr.Tools {
				names[i] = tool.Function.Name
			}
			base := filepath.Base(f)
			switch {
			case strings.HasPrefix(base, "codex-default"):
				// Responses lite: the tools arrive as an additional_tools item.
				if strings.Join(roles, ",") != "developer,developer,developer,developer,user,user" || !strings.Contains(strings.Join(tr.Dropped, ","), "custom") {
					t.Errorf("roles %v, dropped %v", roles, tr.Dropped)
				}
				if tr.ReasoningEffort != "low" || tr.ParallelToolCalls {
					t.Errorf("effort %q, parallel %v", tr.ReasoningEffort, tr.ParallelToolCalls)
				}
			default:
				wantNames := "exec_command,write_stdin,request_user_input,view_image,close_agent,resume_agent,send_input,spawn_agent,wait_agent,get_goal,create_goal,update_goal"
				if got := strings.Join(names, ","); got != wantNames {
					t.Errorf("tools %s", got)
				}
				if tr.Namespaces["spawn_agent"] != "multi_agent_v1" || len(tr.Namespaces) != 5 {
					t.Errorf("namespaces %v", tr.Namespaces)
				}
				if !reflect.DeepEqual(tr.Dropped, []string{"web_search"}) || tr.ToolChoice.Mode != "auto" || !tr.ParallelToolCalls || tr.Store {
					t.Errorf("dropped %v, choice %+v, parallel %v, store %v", tr.Dropped, tr.ToolChoice, tr.ParallelToolCalls, tr.Store)
				}
				want := "developer,developer,user,user"
				if base == "codex-tool-02-v1-responses.json" {
					want += ",assistant,tool"
					call, out := tr.Messages[4], tr.Messages[5]
					if len(call.ToolCalls) != 1 || call.ToolCalls[0].ID != "call_517e53142c9415709dc14e8e" || call.ToolCalls[0].Function.Name != "exec_command" ||
						call.ToolCalls[0].Function.Arguments != `{"cmd":"echo hello"}` || out.ToolCallID != call.ToolCalls[0].ID {
						t.Errorf("round trip %+v %+v", call, out)
					}
					if text, _ := out.Text(); !strings.HasSuffix(text, "Output:\nhello\n") {
						t.Errorf("tool output %q", text)
					}
				}
				if got := strings.Join(roles, ","); got != want {
					t.Errorf("roles %s, want %s", got, want)
				}
			}
		})
	}
}

func TestTranslateMetadata(t *testing.T) {
	var keys []string
	for i := range 17 {
		keys = append(keys, fmt.Sprintf(`"k%d":"v"`, i))
	}
	for _, body := range []string{
		`{"input":"x","metadata":{` + strings.Join(keys, ",") + `}}`,
		`{"input":"x","metadata":{"k":"` + strings.Repeat("v", 513) + `"}}`,
	} {
		if _, e := translate(t, body); e == nil || e.Param != "metadata" {
			t.Errorf("%.60s: %v", body, e)
		}
	}
	if _, e := translate(t, `{"input":"x","metadata":{`+strings.Join(keys[:16], ",")+`}}`); e != nil {
		t.Errorf("16 keys: %v", e)
	}
}
