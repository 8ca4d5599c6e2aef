package toolcall

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/openai/wire"
)

// testTools are the tools of the family tables: get_weather types its
// parameters (an enum string, an integer, a boolean, an object, a free
// string), get_time has none.
var testTools = []wire.Tool{
	{Type: "function", Function: wire.FunctionDef{Name: "get_weather", Parameters: json.RawMessage(`{
		"type": "object",
		"properties": {
			"city": {"type": "string", "enum": ["Paris", "Tokyo"]},
			"days": {"type": "integer", "minimum": 1, "maximum": 7},
			"metric": {"type": "boolean"},
			"where": {"type": "object", "properties": {"lat": {"type": "number"}}},
			"note": {"type": "string"},
			"tags": {"type": ["array", "null"], "items": {"type": "string"}},
			"any": {}
		},
		"required": ["city", "days"]}`)}},
	{Type: "function", Function: wire.FunctionDef{Name: "get_time"}},
}

// familyCase is an answer as a model of the family writes it, and what
// it reads as.
type familyCase struct {
	name    string
	max     int
	text    string
	content string
	calls   []call
	raw     bool // the content is raw markup on purpose (no reasoning split)
}

var familyCases = map[Format][]familyCase{
	Qwen3Coder: {
		{name: "one call as Qwen3-Coder writes it",
			text:  "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then two calls, as Qwen3.5 writes them",
			text:    "Let me check both.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nTokyo\n</parameter>\n<parameter=days>\n1\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>",
			content: "Let me check both.",
			calls:   []call{{"get_weather", `{"city": "Tokyo", "days": 1}`}, {"get_time", `{}`}}},
		{name: "values typed by the schema",
			text: "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n" +
				"<parameter=where>\n{\"lat\": 48.8,\n \"x\": [1]}\n</parameter>\n<parameter=note>\n42\n</parameter>\n<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n<parameter=any>\n2.5\n</parameter>\n<parameter=extra>\n7\n</parameter>\n</function>\n</tool_call>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 2, "metric": true, "where": {"lat":48.8,"x":[1]}, "note": "42", "tags": ["a","b"], "any": 2.5, "extra": "7"}`}}},
		{name: "a multi-line string, and a number that is not JSON",
			text:  "<tool_call>\n<function=get_weather>\n<parameter=note>\nline one\n\n  line <two> \"quoted\"\n</parameter>\n<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>",
			calls: []call{{"get_weather", `{"note": "line one\n\n  line <two> \"quoted\"", "days": "three"}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  "<tool_call>\n<function=get_time>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
			calls: []call{{"get_time", `{}`}}},
		{name: "closing tag taken by a stop string",
			text:  "<tool_call>\n<function=get_time>\n</function>\n",
			calls: []call{{"get_time", `{}`}}},
		{name: "text after a call",
			text:    "<tool_call>\n<function=get_time>\n</function>\n</tool_call>\nDone.",
			content: "Done.", calls: []call{{"get_time", `{}`}}},
		{name: "the marker around something else",
			text: "x <tool_call> not xml </tool_call>", content: "x <tool_call> not xml </tool_call>"},
		{name: "plain text with angle brackets",
			text: "a <tool b <tool_cal c <function=x>", content: "a <tool b <tool_cal c <function=x>"},
		{name: "cut off inside a parameter",
			text: "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPar", content: "Sure."},
		{name: "whitespace only", text: "\n \n", content: "\n \n"},
	},
	Harmony: {
		{name: "a call as the splitter passes it on (<|call|> is end of generation)",
			text:  "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\", \"days\": 3}",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "with its <|call|>",
			text:  "<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}<|call|>",
			calls: []call{{"get_time", `{}`}}},
		{name: "the recipient first, as the template writes it",
			text:  "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\":\"Tokyo\",\"days\":1}<|call|>",
			calls: []call{{"get_weather", `{"city":"Tokyo","days":1}`}}},
		{name: "a preamble, then the call",
			text:    "Checking the weather now.<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json<|message|> {} ",
			content: "Checking the weather now.", calls: []call{{"get_time", `{}`}}},
		{name: "a message to another recipient is not a call",
			text:    "<|channel|>commentary to=browser.search<|message|>{\"q\": 1}",
			content: "<|channel|>commentary to=browser.search<|message|>{\"q\": 1}", raw: true},
		{name: "a raw answer (no reasoning split) keeps its channels",
			text:    "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hello.",
			content: "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hello.", raw: true},
		{name: "plain text",
			text: "Just <|an answer.", content: "Just <|an answer."},
	},
	MistralV11: {
		{name: "one call",
			text:  "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"days\": 3}",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then two calls",
			text:    "Let me look.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Tokyo\", \"days\": 2}[TOOL_CALLS]get_time[ARGS]{}",
			content: "Let me look.",
			calls:   []call{{"get_weather", `{"city": "Tokyo", "days": 2}`}, {"get_time", `{}`}}},
		{name: "a call id, as Mistral Small 3.2 writes it",
			text:  "[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{\"zone\": \"UTC\"}",
			calls: []call{{"get_time", `{"zone": "UTC"}`}}},
		{name: "arguments written as a string",
			text:  "[TOOL_CALLS]get_time[ARGS]\"{\\\"zone\\\": \\\"CET\\\"}\"",
			calls: []call{{"get_time", `{"zone": "CET"}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  "[TOOL_CALLS]get_time[ARGS]{}[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}",
			calls: []call{{"get_time", `{}`}}},
		{name: "text after a call",
			text:  "[TOOL_CALLS]get_time[ARGS]{} Done.",
			calls: []call{{"get_time", `{}`}}, content: "Done."},
		{name: "the marker around something else",
			text: "x [TOOL_CALLS] is a token [ARGS] here", content: "x [TOOL_CALLS] is a token [ARGS] here"},
		{name: "plain text", text: "[TOOL is not a call", content: "[TOOL is not a call"},
		{name: "cut off inside the arguments",
			text: "OK.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Pa", content: "OK."},
	},
	LFM2: {
		{name: "one call, as LFM2.5 writes it",
			text:  "<|tool_call_start|>[get_weather(city='Paris', days=3)]<|tool_call_end|>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then two calls, Python's literals",
			text:    "Let me check.<|tool_call_start|>[get_weather(city=\"Tokyo\", days=1, metric=True, where={'lat': 35.7, 'x': (1, 2)}, tags=['a', 'b'], note=None), get_time()]<|tool_call_end|>",
			content: "Let me check.",
			calls:   []call{{"get_weather", `{"city": "Tokyo", "days": 1, "metric": true, "where": {"lat": 35.7, "x": [1, 2]}, "tags": ["a", "b"], "note": null}`}, {"get_time", `{}`}}},
		{name: "strings with escapes and quotes, numbers",
			text:  "<|tool_call_start|>[get_weather(note='it\\'s \"fine\"\\nok \\u00e9', any=-2.5e3, days=+7)]<|tool_call_end|>",
			calls: []call{{"get_weather", `{"note": "it's \"fine\"\nok é", "any": -2.5e3, "days": 7}`}}},
		{name: "text after the calls",
			text:    "<|tool_call_start|>[get_time()]<|tool_call_end|>\nChecking the time.",
			content: "Checking the time.", calls: []call{{"get_time", `{}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  "<|tool_call_start|>[get_time(), get_weather(city='Paris')]<|tool_call_end|>",
			calls: []call{{"get_time", `{}`}}},
		{name: "a list of calls without the start token",
			text:  " [get_time(), get_weather(city='Paris',)]",
			calls: []call{{"get_time", `{}`}, {"get_weather", `{"city": "Paris"}`}}},
		{name: "end token taken by a stop string",
			text:  "<|tool_call_start|>[get_time()]",
			calls: []call{{"get_time", `{}`}}},
		{name: "the markers around something else",
			text: "<|tool_call_start|>[1, 2]<|tool_call_end|>", content: "<|tool_call_start|>[1, 2]<|tool_call_end|>"},
		{name: "plain text with brackets",
			text: "[see above] and f(x) [a](b)", content: "[see above] and f(x) [a](b)"},
		{name: "cut off inside a value",
			text: "Sure.<|tool_call_start|>[get_weather(city='Par", content: "Sure."},
	},
	Llama3: {
		{name: "JSON, as Llama 3.1-3.3 and 4 write it",
			text:  "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "a built-in tool after <|python_tag|>",
			text:  "<|python_tag|>brave_search.call(query=\"weather in Paris\")",
			calls: []call{{"brave_search", `{"query": "weather in Paris"}`}}},
		{name: "the Python list of Llama 3.2",
			text:  "[get_weather(city=\"Tokyo\", days=2), get_time()]",
			calls: []call{{"get_weather", `{"city": "Tokyo", "days": 2}`}, {"get_time", `{}`}}},
		{name: "Llama 4's list inside <|python_start|>",
			text:  "<|python_start|>[get_time()]<|python_end|>",
			calls: []call{{"get_time", `{}`}}},
		{name: "a JSON list after <|python_tag|>",
			text:  "<|python_tag|>[{\"name\": \"get_time\", \"parameters\": {}}, {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}]",
			calls: []call{{"get_time", `{}`}, {"get_weather", `{"city": "Paris"}`}}},
		{name: "code without a tool that runs it is text",
			text: "<|python_tag|>import math\nprint(math.pi)", content: "<|python_tag|>import math\nprint(math.pi)", raw: true},
		{name: "plain text with braces and brackets",
			text: "The set {x} is [small].", content: "The set {x} is [small]."},
		{name: "cut off inside the arguments",
			text: "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Pa"},
	},
	Pythonic: {
		{name: "a Python list, as Llama 4 writes it",
			text:  "[get_weather(city=\"Paris\", days=1, metric=false)]",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 1, "metric": false}`}}},
		{name: "text",
			text: "I don't have access to [Unavailable service] information.", content: "I don't have access to [Unavailable service] information."},
	},
	FunctionaryV31: {
		{name: "one call",
			text:  "<function=get_weather>{\"city\": \"Paris\", \"days\": 3}</function>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then two calls",
			text:    "Let me look.<function=get_weather>{\"city\": \"Tokyo\", \"days\": 2}</function>\n<function=get_time>{}</function>",
			content: "Let me look.",
			calls:   []call{{"get_weather", `{"city": "Tokyo", "days": 2}`}, {"get_time", `{}`}}},
		{name: "closing tag taken by a stop string",
			text:  "<function=get_time>{}",
			calls: []call{{"get_time", `{}`}}},
		{name: "closing tag broken off by the answer's end",
			text:  "<function=get_time>{}</fun",
			calls: []call{{"get_time", `{}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  "<function=get_time>{}</function><function=get_weather>{\"city\": \"Paris\"}</function>",
			calls: []call{{"get_time", `{}`}}},
		{name: "the marker around something else",
			text: "<function=get_time>not json</function>", content: "<function=get_time>not json</function>"},
		{name: "code without a python tool is text",
			text: "<|python_tag|>print(1)", content: "<|python_tag|>print(1)"},
		{name: "cut off inside the arguments",
			text: "OK.<function=get_weather>{\"city\": \"Pa", content: "OK."},
	},
	FunctionaryV32: {
		{name: "a call, after the >>> the prompt wrote",
			text:  "get_weather\n{\"city\": \"Paris\", \"days\": 3}",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text to all, then two calls",
			text:    "all\nLet me look.>>>get_weather\n{\"city\": \"Tokyo\", \"days\": 1}>>>get_time\n{}",
			content: "Let me look.",
			calls:   []call{{"get_weather", `{"city": "Tokyo", "days": 1}`}, {"get_time", `{}`}}},
		{name: "text only",
			text: "all\nHello there.", content: "Hello there."},
		{name: "an answer that writes the first >>> itself",
			text:    ">>>all\nHi.\n>>>get_time\n{}",
			content: "Hi.", calls: []call{{"get_time", `{}`}}},
		{name: "text whose first line is not a tool",
			text: "Hello\n{\"a\": 1}", content: "Hello\n{\"a\": 1}"},
		{name: "parallel off keeps the first", max: 1,
			text:  "get_time\n{}>>>get_weather\n{\"city\": \"Paris\"}",
			calls: []call{{"get_time", `{}`}}},
		{name: "cut off inside the arguments",
			text: "all\nOK>>>get_weather\n{\"ci", content: "OK"},
	},
	CommandR7B: {
		{name: "one call, as Command R7B writes it",
			text:  "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}\n]<|END_ACTION|>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "two calls, as Cohere's MoE template writes them",
			text:  "<|START_ACTION|>[\n\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Tokyo\", \"days\": 1}},\n\n    {\"tool_call_id\": \"1\", \"tool_name\": \"get_time\", \"parameters\": {}}\n\n]<|END_ACTION|>",
			calls: []call{{"get_weather", `{"city": "Tokyo", "days": 1}`}, {"get_time", `{}`}}},
		{name: "a response is content, its framing taken out",
			text: "<|START_RESPONSE|>It is sunny <|in|> Paris.<|END_RESPONSE|>", content: "It is sunny <|in|> Paris."},
		{name: "the text framing of Cohere's MoE models",
			text: "<|START_TEXT|>Hi.<|END_TEXT|>", content: "Hi."},
		{name: "parallel off keeps the first", max: 1,
			text:  "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"get_time\", \"parameters\": {}}, {\"tool_call_id\": \"1\", \"tool_name\": \"get_weather\", \"parameters\": {}}]<|END_ACTION|>",
			calls: []call{{"get_time", `{}`}}},
		{name: "the markers around something else",
			text: "<|START_ACTION|>nothing<|END_ACTION|>", content: "<|START_ACTION|>nothing<|END_ACTION|>"},
		{name: "cut off inside the arguments",
			text: "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"ci"},
	},
	CommandRPlus: {
		{name: "a call, as the template writes earlier ones",
			text:  "Action:\n```json\n[\n    {\n        \"tool_name\": \"get_weather\",\n        \"parameters\": {\n            \"city\": \"Paris\"\n        }\n    }\n]```",
			calls: []call{{"get_weather", "{\n            \"city\": \"Paris\"\n        }"}}},
		{name: "text, then two calls",
			text:    "I will look it up.\nAction: ```json\n[{\"tool_name\": \"get_time\", \"parameters\": {}}, {\"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Tokyo\", \"days\": 1}}]\n```",
			content: "I will look it up.",
			calls:   []call{{"get_time", `{}`}, {"get_weather", `{"city": "Tokyo", "days": 1}`}}},
		{name: "the word in text",
			text: "Take Action: now.", content: "Take Action: now."},
		{name: "cut off inside the arguments",
			text: "OK.\nAction:\n```json\n[{\"tool_name\": \"get_weather\", \"parameters\": {\"ci", content: "OK."},
	},
	FirefunctionV2: {
		{name: "one call",
			text:  " functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}]",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then two calls",
			text:    "Let me check. functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\", \"days\": 2}}, {\"name\": \"get_time\", \"arguments\": {}}]",
			content: "Let me check.",
			calls:   []call{{"get_weather", `{"city": "Tokyo", "days": 2}`}, {"get_time", `{}`}}},
		{name: "the module in text",
			text: "Use functools.partial, or functools[0].", content: "Use functools.partial, or functools[0]."},
		{name: "cut off inside the arguments",
			text: "OK. functools[{\"name\": \"get_weather\", \"arguments\": {\"ci", content: "OK."},
	},
	Apriel: {
		{name: "one call",
			text:  "<tool_calls>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}]</tool_calls>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then two calls, as the template writes them",
			text:    "I'll check.\n<tool_calls>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\", \"days\": 1}}, {\"name\": \"get_time\", \"arguments\": {}, \"id\": \"call_1\"}]</tool_calls>",
			content: "I'll check.",
			calls:   []call{{"get_weather", `{"city": "Tokyo", "days": 1}`}, {"get_time", `{}`}}},
		{name: "one object without the list",
			text:  "<tool_calls>{\"name\": \"get_time\", \"arguments\": {}}</tool_calls>",
			calls: []call{{"get_time", `{}`}}},
		{name: "arguments written as a string",
			text:  "<tool_calls>[{\"name\": \"get_time\", \"arguments\": \"{\\\"zone\\\": \\\"UTC\\\"}\"}]</tool_calls>",
			calls: []call{{"get_time", `{"zone": "UTC"}`}}},
		{name: "an empty list is not a call",
			text: "<tool_calls>[]</tool_calls>", content: "<tool_calls>[]</tool_calls>"},
		{name: "cut off inside the arguments",
			text: "Sure.<tool_calls>[{\"name\": \"get_weather\", \"arguments\": {\"ci", content: "Sure."},
	},
	MiniCPM: {
		{name: "one call",
			text:  "<function name=\"get_weather\"><param name=\"city\">Paris</param><param name=\"days\">3</param></function>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text, values typed by the schema, a CDATA section, Python's literals",
			text: "Checking.\n<function name=\"get_weather\"><param name=\"city\">Tokyo</param><param name=\"days\">2</param><param name=\"metric\">True</param>" +
				"<param name=\"where\">{'lat': 35.7}</param><param name=\"note\"><![CDATA[a < b & c\nline two]]></param><param name=\"tags\">['x']</param><param name=\"any\">None</param></function>\n<function name=\"get_time\"></function>",
			content: "Checking.",
			calls:   []call{{"get_weather", `{"city": "Tokyo", "days": 2, "metric": true, "where": {"lat":35.7}, "note": "a < b & c\nline two", "tags": ["x"], "any": null}`}, {"get_time", `{}`}}},
		{name: "a string that looks like a number stays a string",
			text:  "<function name=\"get_weather\"><param name=\"note\">42</param><param name=\"days\">many</param></function>",
			calls: []call{{"get_weather", `{"note": "42", "days": "many"}`}}},
		{name: "the markup around something else",
			text: "<function name=\"x\">oops</function>", content: "<function name=\"x\">oops</function>"},
		{name: "cut off inside a value",
			text: "Sure.\n<function name=\"get_weather\"><param name=\"city\">Pa", content: "Sure."},
	},
	GigaChat3: {
		{name: "a call, as GigaChat 3 writes it after an empty message",
			text:  "<|message_sep|>\n\nfunction call<|role_sep|>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then a call",
			text:    "Let me check.<|message_sep|>\n\nfunction call<|role_sep|>\n{\"name\": \"get_time\", \"arguments\": {}}",
			content: "Let me check.", calls: []call{{"get_time", `{}`}}},
		{name: "an answer that ends its message",
			text: "Hello!<|message_sep|>", content: "Hello!"},
		{name: "cut off inside the arguments",
			text: "<|message_sep|>\n\nfunction call<|role_sep|>\n{\"name\": \"get_weather\", \"arguments\": {\"ci"},
	},
	GigaChat31: {
		{name: "a call, as GigaChat 3.1 writes it",
			text:  "<|function_call|>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then a call, then the end of the message",
			text:    "Sure.<|function_call|>{\"name\": \"get_time\", \"arguments\": {}}<|message_sep|>",
			content: "Sure.", calls: []call{{"get_time", `{}`}}},
		{name: "the marker around something else",
			text: "<|function_call|>none", content: "<|function_call|>none"},
		{name: "cut off inside the arguments",
			text: "OK<|function_call|>{\"name\": \"get_weather\", \"arguments\": {\"ci", content: "OK"},
	},
	Hermes: {
		{name: "two calls, as the Hermes 2 Pro and 3 templates write them",
			text:  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}, {"get_time", `{}`}}},
		{name: "text then a call, as Bielik's template writes it",
			text:    "Sprawdzam.\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
			content: "Sprawdzam.", calls: []call{{"get_time", `{}`}}},
	},
}

func TestFamilyParsers(t *testing.T) {
	for f, cases := range familyCases {
		for _, tc := range cases {
			t.Run(f.Name()+"/"+tc.name, func(t *testing.T) {
				check := func(how, content string, calls []wire.ToolCall) {
					t.Helper()
					if content != tc.content {
						t.Errorf("%s: content %q, want %q", how, content, tc.content)
					}
					if !tc.raw {
						for _, m := range append(f.Markers(), "<function=", "<parameter=", "to=functions") {
							if strings.Contains(content, m) && !strings.Contains(tc.content, m) {
								t.Errorf("%s: markup %q in the content %q", how, m, content)
							}
						}
					}
					if len(calls) != len(tc.calls) {
						t.Fatalf("%s: %d calls %+v, want %d", how, len(calls), calls, len(tc.calls))
					}
					for i, c := range calls {
						if c.Function.Name != tc.calls[i].name || c.Function.Arguments != tc.calls[i].args || c.Type != "function" || !strings.HasPrefix(c.ID, "call_") {
							t.Errorf("%s: call %d = %+v, want %s(%s)", how, i, c, tc.calls[i].name, tc.calls[i].args)
						}
						if !json.Valid([]byte(c.Function.Arguments)) {
							t.Errorf("%s: call %d arguments %q are not JSON", how, i, c.Function.Arguments)
						}
					}
				}
				// Cut off answers hold nothing back as content either.
				content, calls := Parse(f, testTools, tc.text, tc.max, false)
				check("whole", content, calls)
				for _, n := range []int{1, 2, 3, 7, len(tc.text)} {
					content, calls, _ := streamTools(f, testTools, tc.max, tc.text, n)
					if strings.HasPrefix(tc.name, "cut off") {
						calls = nil // streamed as far as it went
					}
					check("streamed by "+string(rune('0'+n%10)), content, calls)
				}
			})
		}
	}
}

// A call whose function is named before its arguments is streamed: its
// id and name first, then fragments that add up to the arguments.
func TestFamilyParsersStream(t *testing.T) {
	for _, tc := range []struct {
		f      Format
		pieces []string
		args   string
	}{
		{Qwen3Coder, []string{"<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</para", "meter>\n<parameter=days>\n4\n</parameter>\n", "</function>\n</tool_call>"}, `{"city": "Paris", "days": 4}`},
		{Harmony, []string{"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"To", "kyo\", \"days\"", ": 5}"}, `{"city": "Tokyo", "days": 5}`},
		{MistralV11, []string{"[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Pa", "ris\", ", "\"days\": 6}"}, `{"city": "Paris", "days": 6}`},
		{Llama3, []string{"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Pa", "ris\", ", "\"days\": 6}}"}, `{"city": "Paris", "days": 6}`},
		{FunctionaryV31, []string{"<function=get_weather>{\"city\": \"Pa", "ris\", ", "\"days\": 6}</function>"}, `{"city": "Paris", "days": 6}`},
		{FunctionaryV32, []string{"get_weather\n{\"city\": \"Pa", "ris\", ", "\"days\": 6}"}, `{"city": "Paris", "days": 6}`},
		{CommandR7B, []string{"<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Pa", "ris\", ", "\"days\": 6}}\n]<|END_ACTION|>"}, `{"city": "Paris", "days": 6}`},
		{CommandRPlus, []string{"Action:\n```json\n[{\"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Pa", "ris\", ", "\"days\": 6}}]```"}, `{"city": "Paris", "days": 6}`},
		{FirefunctionV2, []string{" functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa", "ris\", ", "\"days\": 6}}]"}, `{"city": "Paris", "days": 6}`},
		{Apriel, []string{"<tool_calls>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa", "ris\", ", "\"days\": 6}}]</tool_calls>"}, `{"city": "Paris", "days": 6}`},
		{GigaChat31, []string{"<|function_call|>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa", "ris\", ", "\"days\": 6}}"}, `{"city": "Paris", "days": 6}`},
		{GigaChat3, []string{"<|message_sep|>\n\nfunction call<|role_sep|>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa", "ris\", ", "\"days\": 6}}"}, `{"city": "Paris", "days": 6}`},
		{MiniCPM, []string{"<function name=\"get_weather\"><param name=\"city\">Paris</param>", "<param name=\"days\">6</param>", "</function>"}, `{"city": "Paris", "days": 6}`},
		{LFM2, []string{"<|tool_call_start|>[get_weather(city='Paris'", ", days=6", ")]<|tool_call_end|>"}, `{"city": "Paris", "days": 6}`},
	} {
		t.Run(tc.f.Name(), func(t *testing.T) {
			p := tc.f.Parser(testTools, 0)
			var got []wire.Delta
			for _, piece := range tc.pieces {
				got = append(got, p.Push(piece)...)
			}
			got = append(got, p.Finish()...)
			var frags []string
			for i, d := range got {
				if d.Content != nil {
					t.Fatalf("delta %d has content %q", i, *d.Content)
				}
				tcd := d.ToolCalls[0]
				if i == 0 && (tcd.ID == "" || tcd.Function.Name != "get_weather") {
					t.Fatalf("first delta %+v does not name the call", tcd)
				}
				if i > 0 && (tcd.ID != "" || tcd.Function.Name != "") {
					t.Fatalf("delta %d repeats the head: %+v", i, tcd)
				}
				if tcd.Function.Arguments != "" {
					frags = append(frags, tcd.Function.Arguments)
				}
			}
			if len(frags) < 2 || strings.Join(frags, "") != tc.args {
				t.Fatalf("argument fragments %q, want them to make %s", frags, tc.args)
			}
			if c := p.Calls(); len(c) != 1 || c[0].ID != got[0].ToolCalls[0].ID || c[0].Function.Arguments != tc.args {
				t.Fatalf("calls %+v", c)
			}
		})
	}
}

// Code that Llama 3.1 and functionary write raw, after <|python_tag|> or
// to python, is a call of the tool that runs it, when the request offers
// one: its only parameter takes the code.
func TestCodeCalls(t *testing.T) {
	tools := append([]wire.Tool{
		{Type: "function", Function: wire.FunctionDef{Name: "code_interpreter", Parameters: json.RawMessage(`{"type": "object", "properties": {"source": {"type": "string"}}}`)}},
		{Type: "function", Function: wire.FunctionDef{Name: "python"}},
	}, testTools...)
	for _, tc := range []struct {
		f          Format
		text       string
		content    string
		name, args string
	}{
		{Llama3, "<|python_tag|>import math\nprint(math.pi)", "", "code_interpreter", `{"source": "import math\nprint(math.pi)"}`},
		{FunctionaryV31, "Computing.<|python_tag|>print(1 + 1)\n", "Computing.", "python", `{"code": "print(1 + 1)"}`},
		{FunctionaryV32, "all\nComputing.>>>python\nprint(2)", "Computing.", "python", `{"code": "print(2)"}`},
		{FunctionaryV32, "python\nx = 1>>>get_time\n{}", "", "python", `{"code": "x = 1"}`},
	} {
		content, calls := Parse(tc.f, tools, tc.text, 0, false)
		if content != tc.content || len(calls) == 0 || calls[0].Function.Name != tc.name || calls[0].Function.Arguments != tc.args {
			t.Errorf("%s: %q: content %q, calls %+v", tc.f.Name(), tc.text, content, calls)
		}
		// Cut off, the code may be unfinished: no call.
		if _, calls := Parse(tc.f, tools, tc.text, 0, true); len(calls) > 0 && calls[0].Function.Name == tc.name && !strings.Contains(tc.text, ">>>get_time") {
			t.Errorf("%s: %q cut off: calls %+v", tc.f.Name(), tc.text, calls)
		}
	}
}

// A call cut off at max_tokens is markup: whole, nothing of it is
// content and it is no call; a marker cut off at the end is dropped.
func TestFamilyParsersCut(t *testing.T) {
	for f, text := range map[Format]string{
		Qwen3Coder: "Hi <tool_call>\n<function=get_weather>\n<parameter=city>\nPa",
		Harmony:    "Hi <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Pa",
		MistralV11: "Hi [TOOL_CALLS]get_weather[ARGS]{\"ci",
		// Llama's markers open only at the answer's start: it is cut
		// off in the markup of a JSON call that text may not precede.
		FunctionaryV31: "Hi <function=get_weather>{\"ci",
		FunctionaryV32: "all\nHi>>>get_weather\n{\"ci",
		CommandR7B:     "Hi <|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"ci",
		CommandRPlus:   "Hi Action:\n```json\n[{\"tool_name\": \"get_weather\", \"parameters\": {\"ci",
		FirefunctionV2: "Hi functools[{\"name\": \"get_weather\", \"arguments\": {\"ci",
		Apriel:         "Hi <tool_calls>[{\"name\": \"get_weather\", \"arguments\": {\"ci",
		GigaChat31:     "Hi <|function_call|>{\"name\": \"get_weather\", \"arguments\": {\"ci",
		MiniCPM:        "Hi <function name=\"get_weather\"><param name=\"city\">Pa",
		LFM2:           "Hi <|tool_call_start|>[get_weather(city='Pa",
	} {
		content, calls := Parse(f, testTools, text, 0, true)
		if content != "Hi" || len(calls) != 0 {
			t.Errorf("%s: content %q, calls %+v", f.Name(), content, calls)
		}
		m := f.Markers()[0]
		cutMarker := "Hi " + m[:len(m)-2]
		if content, _ := Parse(f, testTools, cutMarker, 0, true); content != "Hi " {
			t.Errorf("%s: marker cut off: content %q", f.Name(), content)
		}
		if content, _ := Parse(f, testTools, cutMarker, 0, false); content != cutMarker {
			t.Errorf("%s: natural end: content %q, want %q", f.Name(), content, cutMarker)
		}
	}
}

// The families' grammars are valid GBNF in the family's own markup; a
// schema the converter cannot express names its tool.
func TestFamilyGrammars(t *testing.T) {
	for _, tc := range []struct {
		f    Format
		want []string
	}{
		{Qwen3Coder, []string{`"<tool_call>\n<function=get_weather>\n<parameter=city>\n"`, `"Paris"`, `"\n</parameter>\n"`}},
		{Harmony, []string{`"<|channel|>commentary to=functions."`, `"get_time <|constrain|>json<|message|>"`}},
		{MistralV11, []string{`"[TOOL_CALLS]get_weather[ARGS]"`}},
		{Llama3, []string{`"\"parameters\""`, `"\"get_weather\""`}},
		{Pythonic, []string{`"get_weather(city="`, `", days="`, `"get_time()"`}},
		{LFM2, []string{`"<|tool_call_start|>["`, `"]<|tool_call_end|>"`, `"get_time()"`}},
		{FunctionaryV31, []string{`"<function=get_weather>"`, `"</function>"`}},
		{FunctionaryV32, []string{`"get_weather\n"`}},
		{CommandR7B, []string{`"<|START_ACTION|>["`, `"]<|END_ACTION|>"`, `"{\"tool_name\": \"get_weather\", \"parameters\": "`}},
		{CommandRPlus, []string{"\"Action:\\n```json\\n[\\n    \"", `"{\"tool_name\": \"get_time\", \"parameters\": "`}},
		{FirefunctionV2, []string{`" functools["`, `"{\"name\": \"get_weather\", \"arguments\": "`}},
		{Apriel, []string{`"<tool_calls>["`, `"]</tool_calls>"`}},
		{GigaChat3, []string{`"function call<|role_sep|>\n"`}},
		{GigaChat31, []string{`"<|function_call|>"`}},
		{MiniCPM, []string{`"<function name=\"get_weather\"><param name=\"city\">"`, `"</param><param name=\"days\">"`, `"<function name=\"get_time\"></function>"`}},
	} {
		for _, parallel := range []bool{false, true} {
			g, err := tc.f.Grammar(testTools, parallel, grammar.SchemaLimits{})
			if err != nil {
				t.Fatalf("%s: %v", tc.f.Name(), err)
			}
			if err := grammar.Validate(g, grammar.DefaultLimits); err != nil {
				t.Fatalf("%s: %v\n%s", tc.f.Name(), err, g)
			}
			for _, w := range tc.want {
				if !strings.Contains(g, w) {
					t.Errorf("%s: grammar lacks %s:\n%s", tc.f.Name(), w, g)
				}
			}
		}
		bad := []wire.Tool{{Type: "function", Function: wire.FunctionDef{Name: "f", Parameters: json.RawMessage(`{"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}`)}}}
		if _, err := tc.f.Grammar(bad, false, grammar.SchemaLimits{}); !errors.Is(err, grammar.ErrInvalidSchema) || !strings.Contains(err.Error(), `"f"`) {
			t.Errorf("%s: bad schema: %v", tc.f.Name(), err)
		}
		if _, err := tc.f.Grammar(nil, false, grammar.SchemaLimits{}); err == nil {
			t.Errorf("%s: no tools: no error", tc.f.Name())
		}
	}
}

// Detect, on every real template: each family done maps its templates
// to itself; the others get the format their markup resembles today, or
// the JSON fallback (a family's helper moves its templates to it).
func TestDetectRealTemplates(t *testing.T) {
	want := map[string]Format{
		"Apertus-8B-Instruct":                           JSON,
		"Apriel-1.6-15b-Thinker-fixed":                  Apriel,
		"Bielik-11B-v3.0-Instruct":                      Hermes,
		"ByteDance-Seed-OSS":                            JSON, // <seed:tool_call>: not done yet
		"Cohere2MoE":                                    CommandR7B,
		"CohereForAI-c4ai-command-r-plus-tool_use":      CommandRPlus,
		"CohereForAI-c4ai-command-r7b-12-2024-tool_use": CommandR7B,
		"GLM-4.6":                             JSON, // <arg_key>: not done yet
		"GLM-4.7-Flash":                       JSON, // <arg_key>: not done yet
		"GigaChat3-10B-A1.8B":                 GigaChat3,
		"GigaChat3.1-10B-A1.8B":               GigaChat31,
		"HuggingFaceTB-SmolLM3-3B":            JSON,
		"Kimi-K2-Instruct":                    JSON, // <|tool_call_begin|>: not done yet
		"Kimi-K2-Thinking":                    JSON, // <|tool_call_begin|>: not done yet
		"Kimi-K3":                             JSON,
		"LFM2-8B-A1B":                         LFM2,
		"LFM2.5-8B-A1B":                       LFM2,
		"LFM2.5-Instruct":                     LFM2,
		"MiMo-VL":                             Hermes,
		"MiniMax-M1":                          JSON,
		"MiniMax-M2":                          JSON, // <invoke>: not done yet
		"MiniMax-M3":                          JSON, // <invoke>: not done yet
		"Mistral-Small-3.2-24B-Instruct-2506": MistralV11,
		"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": Qwen3Coder,
		"NVIDIA-Nemotron-Nano-v2":             JSON,
		"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": Hermes,
		"NousResearch-Hermes-3-Llama-3.1-8B-tool_use":   Hermes,
		"Qwen-QwQ-32B":             Hermes,
		"Qwen-Qwen2.5-7B-Instruct": Hermes,
		"Qwen-Qwen3-0.6B":          Hermes,
		"Qwen3-Coder":              Qwen3Coder,
		"Qwen3.5-4B":               Qwen3Coder,
		"Reka-Edge":                Hermes,
		"StepFun3.5-Flash":         Qwen3Coder,
		"deepseek-ai-DeepSeek-R1-Distill-Llama-8B": JSON, // DeepSeek's markup: not done yet
		"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": JSON, // DeepSeek's markup: not done yet
		"deepseek-ai-DeepSeek-V3.1":                JSON, // DeepSeek's markup: not done yet
		"deepseek-ai-DeepSeek-V3.2":                JSON, // DeepSeek's markup: not done yet
		"deepseek-ai-DeepSeek-V4-Flash-0731":       JSON, // DeepSeek's markup: not done yet
		"deepseek-ai-DeepSeek-V4":                  JSON, // DeepSeek's markup: not done yet
		"fireworks-ai-llama-3-firefunction-v2":     FirefunctionV2,
		"google-gemma-2-2b-it":                     JSON,
		"google-gemma-4-31B-it-interleaved":        JSON, // <|tool_call>call:...: not done yet
		"google-gemma-4-31B-it":                    JSON, // <|tool_call>call:...: not done yet
		"ibm-granite-granite-3.3-2B-Instruct":      JSON,
		"ibm-granite-granite-4.0":                  Hermes,
		"ibm-granite-granite-4.1":                  Hermes,
		"llama-cpp-deepseek-r1":                    JSON, // DeepSeek's markup: not done yet
		"llama-cpp-rwkv-world":                     JSON,
		"meetkai-functionary-medium-v3.1":          FunctionaryV31,
		"meetkai-functionary-medium-v3.2":          FunctionaryV32,
		"meta-llama-Llama-3.1-8B-Instruct":         Llama3,
		"meta-llama-Llama-3.2-3B-Instruct":         Llama3,
		"meta-llama-Llama-3.3-70B-Instruct":        Llama3,
		"microsoft-Phi-3.5-mini-instruct":          JSON,
		"mistralai-Ministral-3-14B-Reasoning-2512": MistralV11,
		"mistralai-Mistral-Nemo-Instruct-2407":     Mistral,
		"moonshotai-Kimi-K2":                       JSON, // <|tool_call_begin|>: not done yet
		"muse-glimmer":                             JSON,
		"openai-gpt-oss-120b":                      Harmony,
		"openbmb-MiniCPM5-1B":                      MiniCPM,
		"poolside-Laguna-S-2.1":                    JSON, // <arg_key>: not done yet
		"poolside-Laguna-XS-2.1":                   JSON, // <arg_key>: not done yet
		"poolside-Laguna-XS.2":                     JSON, // <arg_key>: not done yet
		"tencent-Hy3":                              JSON,
		"unsloth-Apriel-1.5":                       Apriel,
		"unsloth-mistral-Devstral-Small-2507":      MistralV11,
		"upstage-Solar-Open-100B":                  JSON,
	}
	files, err := filepath.Glob(filepath.Join(testmodel.TemplatesDir(), "*.jinja"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no real templates in %s: %v", testmodel.TemplatesDir(), err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".jinja")
		f, ok := want[name]
		if !ok {
			t.Errorf("%s: not in the table", name)
			continue
		}
		if got := Detect(testmodel.Template(t, name)); got != f {
			t.Errorf("%s: %s, want %s", name, got.Name(), f.Name())
		}
	}
	if len(files) != len(want) {
		t.Errorf("%d templates, %d in the table", len(files), len(want))
	}
}

func TestLookup(t *testing.T) {
	for _, name := range Names() {
		f, err := Lookup(name)
		if err != nil || f.Name() != name {
			t.Errorf("Lookup(%q) = %v, %v", name, f, err)
		}
	}
	if _, err := Lookup("xml"); err == nil || !strings.Contains(err.Error(), "qwen3-coder") {
		t.Errorf("Lookup(xml): %v", err)
	}
}
