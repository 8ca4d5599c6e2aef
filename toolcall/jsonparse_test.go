package toolcall

import (
	"strings"
	"testing"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/wire"
)

type call struct{ name, args string }

var toolParseCases = []struct {
	name    string
	format  Format
	max     int
	text    string
	content string
	calls   []call
}{
	{"hermes one call", Hermes, 0,
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
		"", []call{{"get_weather", `{"city": "Paris"}`}}},
	{"hermes text then two calls", Hermes, 0,
		"Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>\n",
		"Let me check.", []call{{"a", `{"x": [1, {"y": "}"}]}`}, {"b", `{}`}}},
	{"hermes parallel off keeps the first", Hermes, 1,
		"<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>",
		"", []call{{"a", `{}`}}},
	{"hermes arguments before name", Hermes, 0,
		"<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\"}</tool_call>",
		"", []call{{"f", `{"x": 1}`}}},
	{"hermes arguments as a string", Hermes, 0,
		"<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>",
		"", []call{{"f", `{"x": 1}`}}},
	{"hermes end tag cut by a stop", Hermes, 0,
		"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"a b\"}}\n",
		"", []call{{"f", `{"q": "a b"}`}}},
	{"hermes plain text with angle brackets", Hermes, 0,
		"a <tool b <tool_cal c",
		"a <tool b <tool_cal c", nil},
	{"hermes marker around something else", Hermes, 0,
		"x <tool_call> not json </tool_call>",
		"x <tool_call> not json </tool_call>", nil},
	{"hermes whitespace only", Hermes, 0, "\n \n", "\n \n", nil},
	{"llama3 bare call", Llama3, 0,
		"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
		"", []call{{"get_weather", `{"city": "Paris"}`}}},
	{"llama3 python tag", Llama3, 0,
		"<|python_tag|>{\"name\": \"f\", \"parameters\": {}}",
		"", []call{{"f", `{}`}}},
	{"llama3 calls separated by semicolons", Llama3, 0,
		" {\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": [1, 2]}}",
		"", []call{{"a", `{}`}, {"b", `{"x": [1, 2]}`}}},
	{"llama3 text with braces", Llama3, 0,
		"The set is {x}.", "The set is {x}.", nil},
	{"llama3 JSON that is not a call", Llama3, 0,
		"{\"foo\": 1}", "{\"foo\": 1}", nil},
	{"llama3 text after a call", Llama3, 0,
		"{\"name\": \"f\", \"parameters\": {}} done",
		"done", []call{{"f", `{}`}}},
	{"mistral list", Mistral, 0,
		"[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": \"b\"}}, {\"name\": \"g\", \"arguments\": {}}]",
		"", []call{{"f", `{"a": "b"}`}, {"g", `{}`}}},
	{"mistral with ids and text before", Mistral, 0,
		"Sure. [TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": \"abc123def\"}]",
		"Sure.", []call{{"f", `{"a": 1}`}}},
	{"mistral without the marker's text", Mistral, 0,
		"[{\"name\": \"f\", \"arguments\": {\"a\": 1}}]",
		"", []call{{"f", `{"a": 1}`}}},
	{"mistral cut after a call", Mistral, 0,
		"[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"argu",
		"", []call{{"f", `{}`}}},
	{"llama3 cut after a call", Llama3, 0,
		"{\"name\": \"f\", \"parameters\": {}}; {\"na",
		"", []call{{"f", `{}`}}},
	{"mistral plain text", Mistral, 0,
		"[TOOL is not a call", "[TOOL is not a call", nil},
	{"json wrapper", JSON, 0,
		"{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {\"q\": 1}}]}",
		"", []call{{"a", `{}`}, {"b", `{"q": 1}`}}},
	{"json list", JSON, 0,
		"[{\"name\": \"a\", \"arguments\": {\"k\": \"v\"}}]",
		"", []call{{"a", `{"k": "v"}`}}},
	{"json OpenAI shape", JSON, 0,
		"{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{}\"}}",
		"", []call{{"f", `{}`}}},
	{"json plain answer", JSON, 0,
		"Hello there.", "Hello there.", nil},
}

// stream feeds text to a parser in pieces of n bytes and reassembles what
// it sends the way an OpenAI client does.
func stream(f Format, max int, text string, n int) (content string, calls []wire.ToolCall, ids map[int]string) {
	return streamTools(f, nil, max, text, n)
}

// streamTools is stream for a format that reads the tools' schemas.
func streamTools(f Format, tools []wire.Tool, max int, text string, n int) (content string, calls []wire.ToolCall, ids map[int]string) {
	p := f.Parser(tools, max)
	var deltas []wire.Delta
	for i := 0; i < len(text); i += n {
		deltas = append(deltas, p.Push(text[i:min(i+n, len(text))])...)
	}
	deltas = append(deltas, p.Finish()...)
	var b strings.Builder
	ids = map[int]string{}
	for _, d := range deltas {
		b.WriteString(d.Text())
		for _, tc := range d.ToolCalls {
			for len(calls) <= tc.Index {
				calls = append(calls, wire.ToolCall{})
			}
			c := &calls[tc.Index]
			if tc.ID != "" {
				if c.ID != "" {
					panic("id sent twice")
				}
				c.ID, c.Type, c.Function.Name = tc.ID, tc.Type, tc.Function.Name
				ids[tc.Index] = tc.ID
			}
			c.Function.Arguments += tc.Function.Arguments
		}
	}
	return b.String(), calls, ids
}

func TestToolParser(t *testing.T) {
	for _, tc := range toolParseCases {
		t.Run(tc.name, func(t *testing.T) {
			check := func(how, content string, calls []wire.ToolCall) {
				t.Helper()
				if content != tc.content {
					t.Errorf("%s: content %q, want %q", how, content, tc.content)
				}
				if len(calls) != len(tc.calls) {
					t.Fatalf("%s: %d calls %+v, want %d", how, len(calls), calls, len(tc.calls))
				}
				for i, c := range calls {
					if c.Function.Name != tc.calls[i].name || c.Function.Arguments != tc.calls[i].args || c.Type != "function" || !strings.HasPrefix(c.ID, "call_") {
						t.Errorf("%s: call %d = %+v, want %s(%s)", how, i, c, tc.calls[i].name, tc.calls[i].args)
					}
				}
			}
			content, calls := Parse(tc.format, nil, tc.text, tc.max, false)
			check("whole", content, calls)
			for _, n := range []int{1, 2, 3, 7, len(tc.text)} {
				content, calls, _ := stream(tc.format, tc.max, tc.text, n)
				check("streamed by "+string(rune('0'+n%10)), content, calls)
			}
		})
	}
}

// A call that names its function first is sent as it is written: its
// name before the arguments are complete, then argument fragments.
func TestToolParserStreamsArguments(t *testing.T) {
	p := Hermes.Parser(nil, 0)
	var got []wire.Delta
	for _, piece := range []string{"<tool_", "call>\n{\"name\": \"f\", \"arg", "uments\": {\"q\": \"par", "is\"}", "}\n</tool_call>"} {
		got = append(got, p.Push(piece)...)
	}
	got = append(got, p.Finish()...)
	var frags []string
	for i, d := range got {
		if d.Content != nil {
			t.Fatalf("delta %d has content %q", i, *d.Content)
		}
		tc := d.ToolCalls[0]
		if i == 0 && (tc.ID == "" || tc.Function.Name != "f") {
			t.Fatalf("first delta %+v does not name the call", tc)
		}
		if i > 0 && (tc.ID != "" || tc.Function.Name != "") {
			t.Fatalf("delta %d repeats the head: %+v", i, tc)
		}
		frags = append(frags, tc.Function.Arguments)
	}
	if len(frags) < 2 || strings.Join(frags, "") != `{"q": "paris"}` {
		t.Fatalf("argument fragments %q", frags)
	}
	if c := p.Calls(); len(c) != 1 || c[0].ID != got[0].ToolCalls[0].ID {
		t.Fatalf("calls %+v", c)
	}
}

// A call cut off by the end of the answer stays as far as it was
// streamed; the whole-answer parse drops it. Neither gives its markup as
// content. A bare answer that only begins like a call is content.
func TestToolParserTruncated(t *testing.T) {
	text := "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"pa"
	content, calls, ids := stream(Hermes, 0, text, 4)
	if content != "Sure." || len(calls) != 1 || len(ids) != 1 || calls[0].Function.Arguments != `{"q": "pa` {
		t.Fatalf("streamed: content %q calls %+v", content, calls)
	}
	content, whole := Parse(Hermes, nil, text, 0, true)
	if content != "Sure." || len(whole) != 0 {
		t.Fatalf("whole: content %q calls %+v", content, whole)
	}
	// A marker cut off at max_tokens is markup; at a natural end, text.
	for _, cut := range []bool{true, false} {
		want := "Hi "
		if !cut {
			want = "Hi <tool_ca"
		}
		if content, calls := Parse(Hermes, nil, "Hi <tool_ca", 0, cut); content != want || len(calls) != 0 {
			t.Errorf("cut %v: content %q calls %+v, want %q", cut, content, calls, want)
		}
		p := Hermes.Parser(nil, 0)
		got := deltaText(t, append(p.Push("Hi <tool_ca"), func() []wire.Delta {
			if cut {
				p.Cut()
			}
			return p.Finish()
		}()...))
		if got != want {
			t.Errorf("streamed, cut %v: content %q, want %q", cut, got, want)
		}
	}
	bare := "{Once upon a time"
	for _, n := range []int{1, len(bare)} {
		if content, calls, _ := stream(Llama3, 0, bare, n); content != bare || len(calls) != 0 {
			t.Fatalf("bare by %d: content %q calls %+v", n, content, calls)
		}
	}
}

func TestDetectToolFormat(t *testing.T) {
	builtin := func(name string) string {
		tpl, err := chat.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		return tpl.Source()
	}
	for src, want := range map[string]Format{
		`{{- '<tool_call>\n' + call | tojson + '\n</tool_call>' }}`:                Hermes,
		`{{- '[TOOL_CALLS][' }}`:                                                   Mistral,
		`{{- '<|start_header_id|>assistant<|end_header_id|>' }}`:                   Llama3,
		`{{- '<|python_tag|>' + tool_call.function.name }}`:                        Llama3,
		`{%- for m in messages %}{{ '<start_of_turn>' + m.content }}{%- endfor %}`: JSON,
		builtin("chatml"):  Hermes,
		builtin("llama3"):  Llama3,
		builtin("mistral"): Mistral,
		builtin("gemma"):   JSON,
	} {
		if got := Detect(src); got != want {
			t.Errorf("Detect(%.40q) = %s, want %s", src, got.Name(), want.Name())
		}
	}
}

// BenchmarkToolParserStream feeds a Hermes answer with one call whose
// arguments are about 2 KB, four bytes at a time, as tokens arrive. The
// parser scans the open call again at each piece, so the cost per piece
// grows with the call's length.
func BenchmarkToolParserStream(b *testing.B) {
	var args strings.Builder
	args.WriteString(`{"items": [`)
	for i := range 100 {
		if i > 0 {
			args.WriteString(", ")
		}
		args.WriteString(`{"k": "value", "n": 12}`)
	}
	args.WriteString(`]}`)
	text := "Let me look.\n<tool_call>\n{\"name\": \"f\", \"arguments\": " + args.String() + "}\n</tool_call>"
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		p := Hermes.Parser(nil, 0)
		for i := 0; i < len(text); i += 4 {
			p.Push(text[i:min(i+4, len(text))])
		}
		p.Finish()
		if len(p.Calls()) != 1 {
			b.Fatal("no call")
		}
	}
}

func deltaText(t *testing.T, ds []wire.Delta) string {
	t.Helper()
	var b strings.Builder
	for _, d := range ds {
		if len(d.ToolCalls) > 0 {
			t.Fatalf("unexpected call %+v", d.ToolCalls)
		}
		b.WriteString(d.Text())
	}
	return b.String()
}
