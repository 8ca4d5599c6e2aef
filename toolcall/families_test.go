package toolcall

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/wire"
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
	DeepSeekR1: {
		{name: "one call as R1 writes it",
			text:  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\", \"days\": 3}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then two calls, one a line, as the distills write them",
			text:    "I will check both.\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Tokyo\",\n \"days\": 1}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			content: "I will check both.",
			calls:   []call{{"get_weather", "{\"city\": \"Tokyo\",\n \"days\": 1}"}, {"get_time", `{}`}}},
		{name: "V3.1's layout is read too",
			text:  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			calls: []call{{"get_time", `{}`}}},
		{name: "a fence without its language",
			text:  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```\n{\"zone\": \"UTC\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			calls: []call{{"get_time", `{"zone": "UTC"}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			calls: []call{{"get_time", `{}`}}},
		{name: "end tokens taken by a stop",
			text:  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```",
			calls: []call{{"get_time", `{}`}}},
		{name: "the marker around something else",
			text: "x <｜tool▁calls▁begin｜> is a token", content: "x <｜tool▁calls▁begin｜> is a token"},
		{name: "a call token around something else",
			text: "x <｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\nnot json", content: "x <｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\nnot json"},
		{name: "plain text", text: "<｜tool is not a call", content: "<｜tool is not a call"},
		{name: "cut off inside the arguments",
			text: "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Pa", content: "Sure."},
	},
	DeepSeekV31: {
		{name: "one call as V3.1 writes it",
			text:  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\", \"days\": 3}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then two calls",
			text:    "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Tokyo\", \"days\": 2}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			content: "Checking.",
			calls:   []call{{"get_weather", `{"city": "Tokyo", "days": 2}`}, {"get_time", `{}`}}},
		{name: "arguments written as a string, as the template writes the history's",
			text:  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>\"{\\\"zone\\\": \\\"UTC\\\"}\"<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			calls: []call{{"get_time", `{"zone": "UTC"}`}}},
		{name: "a tool named function",
			text:  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>{\"a\": 1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			calls: []call{{"function", `{"a": 1}`}}},
		{name: "R1's layout is read too",
			text:  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			calls: []call{{"get_time", `{}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			calls: []call{{"get_time", `{}`}}},
		{name: "end tokens taken by a stop",
			text:  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}",
			calls: []call{{"get_time", `{}`}}},
		{name: "text after the arguments, without the end tokens",
			text:  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{} and more",
			calls: []call{{"get_time", `{}`}}, content: "and more"},
		{name: "cut off inside the arguments",
			text: "OK.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Pa", content: "OK."},
	},
	DeepSeekV32: {
		{name: "one call as V3.2 writes it",
			text:  "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then two calls",
			text:    "Let me check.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Tokyo</｜DSML｜parameter>\n<｜DSML｜parameter name=\"days\" string=\"false\">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"get_time\">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
			content: "Let me check.",
			calls:   []call{{"get_weather", `{"city": "Tokyo", "days": 1}`}, {"get_time", `{}`}}},
		{name: "values as the string attribute says, else by the schema",
			text: "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"note\" string=\"true\">42</｜DSML｜parameter>\n<｜DSML｜parameter name=\"any\" string=\"true\">7</｜DSML｜parameter>\n<｜DSML｜parameter name=\"metric\" string=\"false\">true</｜DSML｜parameter>\n" +
				"<｜DSML｜parameter name=\"where\" string=\"false\">{\"lat\": 48.8}</｜DSML｜parameter>\n<｜DSML｜parameter name=\"tags\" string=\"false\">[\"a\", \"b\"]</｜DSML｜parameter>\n<｜DSML｜parameter name=\"days\">5</｜DSML｜parameter>\n" +
				"<｜DSML｜parameter name=\"city\" string=\"false\">Paris</｜DSML｜parameter>\n<｜DSML｜parameter name=\"extra\" string=\"true\">line one\n <two> \"quoted\"</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
			calls: []call{{"get_weather", `{"note": "42", "any": "7", "metric": true, "where": {"lat":48.8}, "tags": ["a","b"], "days": 5, "city": "Paris", "extra": "line one\n <two> \"quoted\""}`}}},
		{name: "V4's block is read too",
			text:  "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_time\">\n\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
			calls: []call{{"get_time", `{}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_time\">\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
			calls: []call{{"get_time", `{}`}}},
		{name: "the block's end taken by a stop",
			text:  "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_time\">\n</｜DSML｜invoke>\n",
			calls: []call{{"get_time", `{}`}}},
		{name: "text after the calls",
			text:    "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_time\">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>\nDone.",
			content: "Done.", calls: []call{{"get_time", `{}`}}},
		{name: "the marker around something else",
			text: "x <｜DSML｜function_calls> is a tag", content: "x <｜DSML｜function_calls> is a tag"},
		{name: "an invoke without a name",
			text: "<｜DSML｜invoke foo=\"bar\">", content: "<｜DSML｜invoke foo=\"bar\">"},
		{name: "cut off inside a parameter",
			text: "Sure.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Par", content: "Sure."},
	},
	DeepSeekV4: {
		{name: "one call as V4 writes it",
			text:  "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "no arguments, as the template writes them",
			text:    "On it.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_time\">\n\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
			content: "On it.", calls: []call{{"get_time", `{}`}}},
		{name: "cut off in the invoke's tag",
			text: "OK.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_wea", content: "OK."},
	},
	SeedOSS: {
		{name: "one call as Seed-OSS writes it",
			text:  "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n<parameter=days>3</parameter>\n</function>\n</seed:tool_call>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then two calls",
			text:    "I will look both up.\n\n<seed:tool_call>\n<function=get_weather>\n<parameter=city>Tokyo</parameter>\n<parameter=days>1</parameter>\n</function>\n</seed:tool_call>\n<seed:tool_call>\n<function=get_time>\n</function>\n</seed:tool_call>",
			content: "I will look both up.",
			calls:   []call{{"get_weather", `{"city": "Tokyo", "days": 1}`}, {"get_time", `{}`}}},
		{name: "a multi-line value and typed ones",
			text:  "<seed:tool_call>\n<function=get_weather>\n<parameter=note>This is the value\nthat can span\nmultiple lines</parameter>\n<parameter=metric>false</parameter>\n<parameter=where>{\"lat\": 1.5}</parameter>\n</function>\n</seed:tool_call>",
			calls: []call{{"get_weather", `{"note": "This is the value\nthat can span\nmultiple lines", "metric": false, "where": {"lat":1.5}}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  "<seed:tool_call>\n<function=get_time>\n</function>\n</seed:tool_call>\n<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>\n</seed:tool_call>",
			calls: []call{{"get_time", `{}`}}},
		{name: "the marker around something else",
			text: "x <seed:tool_call> not xml </seed:tool_call>", content: "x <seed:tool_call> not xml </seed:tool_call>"},
		{name: "the answer ends inside the closing tag",
			text:  "<seed:tool_call>\n<function=get_time>\n</function>\n</seed:tool_",
			calls: []call{{"get_time", `{}`}}},
		{name: "Qwen3-Coder's tags are text here",
			text: "<tool_call>\n<function=get_time>\n</function>\n</tool_call>", content: "<tool_call>\n<function=get_time>\n</function>\n</tool_call>", raw: true},
		{name: "cut off inside a parameter",
			text: "Sure.\n<seed:tool_call>\n<function=get_weather>\n<parameter=city>Par", content: "Sure."},
	},
	Hy3: {
		{name: "one call as Hy3 writes it",
			text:  "<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n<arg_key:opensource>city</arg_key:opensource>\n<arg_value:opensource>Paris</arg_value:opensource>\n<arg_key:opensource>days</arg_key:opensource>\n<arg_value:opensource>3</arg_value:opensource>\n</tool_call:opensource>\n</tool_calls:opensource>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then two calls",
			text:    "Checking.<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n<arg_key:opensource>city</arg_key:opensource>\n<arg_value:opensource>Tokyo</arg_value:opensource>\n</tool_call:opensource>\n<tool_call:opensource>get_time<tool_sep:opensource>\n</tool_call:opensource>\n</tool_calls:opensource>",
			content: "Checking.",
			calls:   []call{{"get_weather", `{"city": "Tokyo"}`}, {"get_time", `{}`}}},
		{name: "values typed by the schema",
			text:  "<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n<arg_key:opensource>note</arg_key:opensource>\n<arg_value:opensource>7</arg_value:opensource>\n<arg_key:opensource>where</arg_key:opensource>\n<arg_value:opensource>{\"lat\": 2}</arg_value:opensource>\n<arg_key:opensource>metric</arg_key:opensource>\n<arg_value:opensource>true</arg_value:opensource>\n</tool_call:opensource>\n</tool_calls:opensource>",
			calls: []call{{"get_weather", `{"note": "7", "where": {"lat":2}, "metric": true}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  "<tool_calls:opensource>\n<tool_call:opensource>get_time<tool_sep:opensource>\n</tool_call:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n</tool_call:opensource>\n</tool_calls:opensource>",
			calls: []call{{"get_time", `{}`}}},
		{name: "the block's end taken by a stop",
			text:  "<tool_calls:opensource>\n<tool_call:opensource>get_time<tool_sep:opensource>\n</tool_call:opensource>\n",
			calls: []call{{"get_time", `{}`}}},
		{name: "the marker around something else",
			text: "x <tool_calls:opensource> y", content: "x <tool_calls:opensource> y"},
		{name: "cut off inside a value",
			text: "Sure.<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n<arg_key:opensource>city</arg_key:opensource>\n<arg_value:opensource>Pa", content: "Sure."},
	},
	SolarOpen: {
		{name: "one call as Solar Open writes it",
			text:  "<|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>get_weather<|tool_call:args|>{\"city\": \"Paris\", \"days\": 3}<|tool_call:end|><|calls|>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "two calls, <|calls|> taken as the end of generation",
			text:  "<|tool_calls|><|tool_call:begin|>k3j4h5g6f7<|tool_call:name|>get_weather<|tool_call:args|>{\"city\": \"Tokyo\", \"days\": 1}<|tool_call:end|><|tool_call:begin|>0a9b8c7d6e<|tool_call:name|>get_time<|tool_call:args|>{}<|tool_call:end|>",
			calls: []call{{"get_weather", `{"city": "Tokyo", "days": 1}`}, {"get_time", `{}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  "<|tool_calls|><|tool_call:begin|>aaaaaaaaaa<|tool_call:name|>get_time<|tool_call:args|>{}<|tool_call:end|><|tool_call:begin|>bbbbbbbbbb<|tool_call:name|>get_weather<|tool_call:args|>{}<|tool_call:end|><|calls|>",
			calls: []call{{"get_time", `{}`}}},
		{name: "the marker around something else",
			text: "x <|tool_calls|> y", content: "x <|tool_calls|> y"},
		{name: "cut off inside the arguments",
			text: "<|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>get_weather<|tool_call:args|>{\"ci"},
	},
	Apertus: {
		{name: "one call as Apertus writes it",
			text:  "<|tools_prefix|>[{\"get_weather\": {\"city\": \"Paris\", \"days\": 3}}]<|tools_suffix|>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then two calls",
			text:    "Let me check.<|tools_prefix|>[{\"get_weather\": {\"city\": \"Tokyo\", \"days\": 1}}, {\"get_time\": {}}]<|tools_suffix|>",
			content: "Let me check.",
			calls:   []call{{"get_weather", `{"city": "Tokyo", "days": 1}`}, {"get_time", `{}`}}},
		{name: "the suffix taken by the end of generation",
			text:  "<|tools_prefix|>[{\"get_time\": {\"zone\": \"UTC\"}}]",
			calls: []call{{"get_time", `{"zone": "UTC"}`}}},
		{name: "the usual call objects are read too",
			text:  "<|tools_prefix|>[{\"name\": \"get_time\", \"arguments\": {}}]<|tools_suffix|>",
			calls: []call{{"get_time", `{}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  "<|tools_prefix|>[{\"get_time\": {}}, {\"get_weather\": {\"city\": \"Paris\"}}]<|tools_suffix|>",
			calls: []call{{"get_time", `{}`}}},
		{name: "a list that is not calls",
			text: "<|tools_prefix|>[1, 2]<|tools_suffix|>", content: "<|tools_prefix|>[1, 2]<|tools_suffix|>"},
		{name: "cut off inside the arguments",
			text: "OK.<|tools_prefix|>[{\"get_weather\": {\"city\": \"Pa", content: "OK."},
	},
	NemotronV2: {
		{name: "one call as Nemotron Nano v2 writes it",
			text:  "<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}]</TOOLCALL>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then two calls",
			text:    "Sure.\n<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\", \"days\": 2}}, {\"name\": \"get_time\", \"arguments\": {}}]</TOOLCALL>",
			content: "Sure.",
			calls:   []call{{"get_weather", `{"city": "Tokyo", "days": 2}`}, {"get_time", `{}`}}},
		{name: "arguments written as a string, as the prompt's example has them",
			text:  "<TOOLCALL>[{\"name\": \"get_time\", \"arguments\": \"{\\\"zone\\\": \\\"UTC\\\"}\"}]</TOOLCALL>",
			calls: []call{{"get_time", `{"zone": "UTC"}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  "<TOOLCALL>[{\"name\": \"get_time\", \"arguments\": {}}, {\"name\": \"get_weather\", \"arguments\": {}}]</TOOLCALL>",
			calls: []call{{"get_time", `{}`}}},
		{name: "the end tag taken by a stop",
			text:  "<TOOLCALL>[{\"name\": \"get_time\", \"arguments\": {}}]",
			calls: []call{{"get_time", `{}`}}},
		{name: "the marker around something else",
			text: "x <TOOLCALL> y </TOOLCALL>", content: "x <TOOLCALL> y </TOOLCALL>"},
		{name: "cut off inside the arguments",
			text: "OK.<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa", content: "OK."},
	},
	Granite: {
		{name: "one call as Granite 3.3 writes it",
			text:  "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}]",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "two calls",
			text:  "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\", \"days\": 2}}, {\"name\": \"get_time\", \"arguments\": {}}]",
			calls: []call{{"get_weather", `{"city": "Tokyo", "days": 2}`}, {"get_time", `{}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  "<|tool_call|>[{\"name\": \"get_time\", \"arguments\": {}}, {\"name\": \"get_weather\", \"arguments\": {}}]",
			calls: []call{{"get_time", `{}`}}},
		{name: "the marker around something else",
			text: "x <|tool_call|> y", content: "x <|tool_call|> y"},
		{name: "cut off inside the arguments",
			text: "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa"},
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

// mmNS is MiniMax M3's namespace token, in the cases below.
const mmNS = "]<]minimax[>["

func init() {
	familyCases[GLM] = []familyCase{
		{name: "one call as GLM 4.6 writes it",
			text:  "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then two calls, as GLM 4.7 writes them",
			text:    "Let me check both.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Tokyo</arg_value><arg_key>days</arg_key><arg_value>1</arg_value></tool_call><tool_call>get_time</tool_call>",
			content: "Let me check both.",
			calls:   []call{{"get_weather", `{"city": "Tokyo", "days": 1}`}, {"get_time", `{}`}}},
		{name: "values typed by the schema",
			text: "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>metric</arg_key>\n<arg_value>true</arg_value>\n" +
				"<arg_key>where</arg_key>\n<arg_value>{\"lat\": 48.8}</arg_value>\n<arg_key>note</arg_key>\n<arg_value>42</arg_value>\n<arg_key>tags</arg_key>\n<arg_value>[\"a\", \"b\"]</arg_value>\n" +
				"<arg_key>any</arg_key>\n<arg_value>2.5</arg_value>\n<arg_key>extra</arg_key>\n<arg_value>7</arg_value>\n</tool_call>",
			calls: []call{{"get_weather", `{"city": "Paris", "metric": true, "where": {"lat":48.8}, "note": "42", "tags": ["a","b"], "any": 2.5, "extra": "7"}`}}},
		{name: "a multi-line string stays as written",
			text:  "<tool_call>get_weather<arg_key>note</arg_key><arg_value>line one\n\n  line <two> \"quoted\"\n</arg_value></tool_call>",
			calls: []call{{"get_weather", `{"note": "line one\n\n  line <two> \"quoted\"\n"}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  "<tool_call>get_time\n</tool_call>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
			calls: []call{{"get_time", `{}`}}},
		{name: "closing tag taken by a stop string",
			text:  "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n",
			calls: []call{{"get_weather", `{"city": "Paris"}`}}},
		{name: "text after a call",
			text:    "<tool_call>get_time</tool_call>\nDone.",
			content: "Done.", calls: []call{{"get_time", `{}`}}},
		{name: "Hermes's JSON in the tags is not GLM's",
			text: "<tool_call>{\"name\": \"get_time\"}</tool_call>", content: "<tool_call>{\"name\": \"get_time\"}</tool_call>"},
		{name: "plain text with angle brackets",
			text: "a <tool b <tool_cal c <arg_key>", content: "a <tool b <tool_cal c <arg_key>"},
		{name: "cut off inside a value",
			text: "Sure.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Par", content: "Sure."},
	}
	familyCases[Gemma4] = []familyCase{
		{name: "one call as Gemma 4 writes it",
			text:  "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3}<tool_call|>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then two calls, then the tool response's token",
			text:    "Let me check both.<|tool_call>call:get_weather{city:<|\"|>Tokyo<|\"|>,days:1}<tool_call|><|tool_call>call:get_time{}<tool_call|><|tool_response>",
			content: "Let me check both.",
			calls:   []call{{"get_weather", `{"city": "Tokyo", "days": 1}`}, {"get_time", `{}`}}},
		{name: "nested values in Gemma's notation",
			text: "<|tool_call>call:get_weather{any:null,city:<|\"|>Paris<|\"|>,days:2,metric:true,note:<|\"|>a, b: {c} [d]<|\"|>," +
				"tags:[<|\"|>x<|\"|>,<|\"|>y<|\"|>],where:{lat:-48.8e1,name:<|\"|>Q<|\"|>,ok:False,none:None}}<tool_call|>",
			calls: []call{{"get_weather", `{"any": null, "city": "Paris", "days": 2, "metric": true, "note": "a, b: {c} [d]", "tags": ["x", "y"], "where": {"lat": -48.8e1, "name": "Q", "ok": false, "none": null}}`}}},
		{name: "JSON values, as the grammar writes them, and a bare word",
			text:  "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>, \"days\": 2, where:{\"lat\": 1.5, \"n\": \"q\"}, note: plain words }<tool_call|>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 2, "where": {"lat": 1.5, "n": "q"}, "note": "plain words"}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  "<|tool_call>call:get_time{}<tool_call|><|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>",
			calls: []call{{"get_time", `{}`}}},
		{name: "closing token taken by a stop string",
			text:  "<|tool_call>call:get_time{}",
			calls: []call{{"get_time", `{}`}}},
		{name: "text after a call",
			text:    "<|tool_call>call:get_time{}<tool_call|>\nDone.",
			content: "Done.", calls: []call{{"get_time", `{}`}}},
		{name: "the marker around something else",
			text: "x <|tool_call> not a call <tool_call|>", content: "x <|tool_call> not a call <tool_call|>"},
		{name: "plain text",
			text: "Gemma said <|tool and call:x{", content: "Gemma said <|tool and call:x{"},
		{name: "cut off inside a string",
			text: "OK.<|tool_call>call:get_weather{city:<|\"|>Pa", content: "OK."},
	}
	familyCases[MiniMaxM1] = []familyCase{
		{name: "one call as MiniMax-M1 writes it",
			text:  "<tool_calls>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_calls>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then two calls, one a line",
			text:    "I will check both.\n<tool_calls>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\"}}\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_calls>",
			content: "I will check both.",
			calls:   []call{{"get_weather", `{"city": "Tokyo"}`}, {"get_time", `{}`}}},
		{name: "arguments as a string, as the template writes earlier calls",
			text:  "<tool_calls>\n{\"name\": \"get_time\", \"arguments\": \"{\\\"zone\\\": \\\"UTC\\\"}\"}\n</tool_calls>",
			calls: []call{{"get_time", `{"zone": "UTC"}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  "<tool_calls>\n{\"name\": \"get_time\", \"arguments\": {}}\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_calls>",
			calls: []call{{"get_time", `{}`}}},
		{name: "text after the calls (the JSON formats keep the line break)",
			text:  "<tool_calls>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_calls>\nDone.",
			calls: []call{{"get_time", `{}`}}, content: "\nDone."},
		{name: "the marker around something else",
			text: "<tool_calls> is a tag", content: "<tool_calls> is a tag"},
		{name: "cut off inside the arguments",
			text: "OK.\n<tool_calls>\n{\"name\": \"get_weather\", \"arguments\": {\"ci", content: "OK."},
	}
	familyCases[MiniMaxM2] = []familyCase{
		{name: "one call as MiniMax M2 writes it",
			text:  "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n<parameter name=\"days\">3</parameter>\n</invoke>\n</minimax:tool_call>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then two calls in one block",
			text:    "Let me check both.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Tokyo</parameter>\n</invoke>\n<invoke name=\"get_time\">\n</invoke>\n</minimax:tool_call>",
			content: "Let me check both.",
			calls:   []call{{"get_weather", `{"city": "Tokyo"}`}, {"get_time", `{}`}}},
		{name: "values typed by the schema",
			text: "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"metric\">false</parameter>\n<parameter name=\"where\">{\"lat\": 1}</parameter>\n" +
				"<parameter name=\"note\">7</parameter>\n<parameter name=\"tags\">null</parameter>\n<parameter name=\"extra\">{\"x\": 1}</parameter>\n</invoke>\n</minimax:tool_call>",
			calls: []call{{"get_weather", `{"metric": false, "where": {"lat":1}, "note": "7", "tags": null, "extra": "{\"x\": 1}"}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  "<minimax:tool_call>\n<invoke name=\"get_time\">\n</invoke>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n</invoke>\n</minimax:tool_call>",
			calls: []call{{"get_time", `{}`}}},
		{name: "closing tags taken by a stop string",
			text:  "<minimax:tool_call>\n<invoke name=\"get_time\">\n</invoke>\n",
			calls: []call{{"get_time", `{}`}}},
		{name: "text after the block",
			text:    "<minimax:tool_call>\n<invoke name=\"get_time\">\n</invoke>\n</minimax:tool_call>\nDone.",
			content: "Done.", calls: []call{{"get_time", `{}`}}},
		{name: "an invoke outside a block is text",
			text: "Write <invoke name=\"x\">y</invoke> in XML.", content: "Write <invoke name=\"x\">y</invoke> in XML."},
		{name: "the marker around something else",
			text: "<minimax:tool_call> hi </minimax:tool_call>", content: "<minimax:tool_call> hi </minimax:tool_call>"},
		{name: "cut off inside a value",
			text: "OK.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Pa", content: "OK."},
	}
	familyCases[MiniMaxM3] = []familyCase{
		{name: "one call as the template writes it",
			text:  mmNS + "<tool_call>\n" + mmNS + "<invoke name=\"get_weather\">" + mmNS + "<city>Paris" + mmNS + "</city>" + mmNS + "<days>3" + mmNS + "</days>" + mmNS + "</invoke>\n" + mmNS + "</tool_call>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "nested elements typed by the schema",
			text: mmNS + "<tool_call>\n" + mmNS + "<invoke name=\"get_weather\">" + mmNS + "<where>" + mmNS + "<lat>48.8" + mmNS + "</lat>" + mmNS + "</where>" +
				mmNS + "<tags>" + mmNS + "<item>a" + mmNS + "</item>" + mmNS + "<item>2" + mmNS + "</item>" + mmNS + "</tags>" + mmNS + "<metric>true" + mmNS + "</metric>" +
				mmNS + "<note>42" + mmNS + "</note>" + mmNS + "<extra>" + mmNS + "<item>1" + mmNS + "</item>" + mmNS + "</extra>" + mmNS + "<any>" + mmNS + "<k>1" + mmNS + "</k>" + mmNS + "</any>" +
				mmNS + "</invoke>\n" + mmNS + "</tool_call>",
			calls: []call{{"get_weather", `{"where": {"lat": 48.8}, "tags": ["a", "2"], "metric": true, "note": "42", "extra": ["1"], "any": {"k": 1}}`}}},
		{name: "line breaks between the elements",
			text: mmNS + "<tool_call>\n" + mmNS + "<invoke name=\"get_weather\">\n" + mmNS + "<days>2" + mmNS + "</days>\n" + mmNS + "<tags>\n" + mmNS + "<item>a" + mmNS + "</item>\n" + mmNS + "</tags>\n" +
				mmNS + "<note>\n" + mmNS + "</note>\n" + mmNS + "</invoke>\n" + mmNS + "</tool_call>",
			calls: []call{{"get_weather", `{"days": 2, "tags": ["a"], "note": "\n"}`}}},
		{name: "JSON in an element, as the grammar writes it",
			text:  mmNS + "<tool_call>\n" + mmNS + "<invoke name=\"get_weather\">" + mmNS + "<where>{\"lat\": 1}" + mmNS + "</where>" + mmNS + "<note>" + mmNS + "</note>" + mmNS + "</invoke>\n" + mmNS + "</tool_call>",
			calls: []call{{"get_weather", `{"where": {"lat":1}, "note": ""}`}}},
		{name: "text then two calls in one block",
			text:    "Checking." + mmNS + "<tool_call>\n" + mmNS + "<invoke name=\"get_time\">" + mmNS + "</invoke>\n" + mmNS + "<invoke name=\"get_weather\">" + mmNS + "<city>Tokyo" + mmNS + "</city>" + mmNS + "</invoke>\n" + mmNS + "</tool_call>",
			content: "Checking.",
			calls:   []call{{"get_time", `{}`}, {"get_weather", `{"city": "Tokyo"}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  mmNS + "<tool_call>\n" + mmNS + "<invoke name=\"get_time\">" + mmNS + "</invoke>\n" + mmNS + "<invoke name=\"get_weather\">" + mmNS + "</invoke>\n" + mmNS + "</tool_call>",
			calls: []call{{"get_time", `{}`}}},
		{name: "text after the block",
			text:    mmNS + "<tool_call>\n" + mmNS + "<invoke name=\"get_time\">" + mmNS + "</invoke>\n" + mmNS + "</tool_call> Done.",
			content: "Done.", calls: []call{{"get_time", `{}`}}},
		{name: "an invoke outside a block is text",
			text: "x " + mmNS + "<invoke name=\"get_time\">" + mmNS + "</invoke> y", content: "x " + mmNS + "<invoke name=\"get_time\">" + mmNS + "</invoke> y", raw: true},
		{name: "cut off inside a nested element",
			text: "OK." + mmNS + "<tool_call>\n" + mmNS + "<invoke name=\"get_weather\">" + mmNS + "<where>" + mmNS + "<lat>4", content: "OK."},
	}
	familyCases[KimiK2] = []familyCase{
		{name: "one call as Kimi K2 writes it",
			text:  "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\", \"days\": 3}<|tool_call_end|><|tool_calls_section_end|>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then two calls",
			text: "Let me check both.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Tokyo\"}<|tool_call_end|>" +
				"<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
			content: "Let me check both.",
			calls:   []call{{"get_weather", `{"city": "Tokyo"}`}, {"get_time", `{}`}}},
		{name: "an id without its prefix, with spaces",
			text:  "<|tool_calls_section_begin|>\n<|tool_call_begin|> get_time:7 <|tool_call_argument_begin|> {\"zone\": \"UTC\"} <|tool_call_end|>\n<|tool_calls_section_end|>",
			calls: []call{{"get_time", `{"zone": "UTC"}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
			calls: []call{{"get_time", `{}`}}},
		{name: "text after the section",
			text:    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|> Done.",
			content: "Done.", calls: []call{{"get_time", `{}`}}},
		{name: "the marker around something else",
			text: "x <|tool_calls_section_begin|> hi <|tool_calls_section_end|>", content: "x <|tool_calls_section_begin|> hi <|tool_calls_section_end|>"},
		{name: "plain text", text: "<|tool is not a call", content: "<|tool is not a call"},
		{name: "cut off inside the arguments",
			text: "OK.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Pa", content: "OK."},
	}
	familyCases[KimiK3] = []familyCase{
		{name: "one call as the template writes it",
			text: "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|>" +
				"<|open|>argument key=\"days\" type=\"number\"<|sep|>3<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>",
			calls: []call{{"get_weather", `{"city": "Paris", "days": 3}`}}},
		{name: "text then two calls",
			text: "Checking.<|open|>tools<|sep|><|open|>call tool=\"get_time\" index=\"1\"<|sep|><|close|>call<|sep|>" +
				"<|open|>call tool=\"get_weather\" index=\"2\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>Tokyo<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>",
			content: "Checking.",
			calls:   []call{{"get_time", `{}`}, {"get_weather", `{"city": "Tokyo"}`}}},
		{name: "values typed by their type attributes, or by the schema",
			text: "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"note\" type=\"string\"<|sep|>42<|close|>argument<|sep|>" +
				"<|open|>argument key=\"where\" type=\"object\"<|sep|>{\"lat\": 1}<|close|>argument<|sep|><|open|>argument key=\"metric\" type=\"boolean\"<|sep|>true<|close|>argument<|sep|>" +
				"<|open|>argument key=\"days\"<|sep|>5<|close|>argument<|sep|><|open|>argument key=\"a &quot;b&quot; &amp; c\" type=\"string\"<|sep|>x<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>",
			calls: []call{{"get_weather", `{"note": "42", "where": {"lat":1}, "metric": true, "days": 5, "a \"b\" & c": "x"}`}}},
		{name: "the arguments whole in a json element",
			text:  "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>json type=\"object\"<|sep|>{\"city\": \"Paris\"}<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|>",
			calls: []call{{"get_weather", `{"city": "Paris"}`}}},
		{name: "parallel off keeps the first", max: 1,
			text:  "<|open|>tools<|sep|><|open|>call tool=\"get_time\" index=\"1\"<|sep|><|close|>call<|sep|><|open|>call tool=\"get_weather\" index=\"2\"<|sep|><|close|>call<|sep|><|close|>tools<|sep|>",
			calls: []call{{"get_time", `{}`}}},
		{name: "text after the calls",
			text:    "<|open|>tools<|sep|><|open|>call tool=\"get_time\" index=\"1\"<|sep|><|close|>call<|sep|><|close|>tools<|sep|> Done.",
			content: "Done.", calls: []call{{"get_time", `{}`}}},
		{name: "other tags are text",
			text: "a <|open|>b<|sep|> c <|close|>", content: "a <|open|>b<|sep|> c <|close|>"},
		{name: "cut off inside an argument",
			text: "OK.<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>Pa", content: "OK."},
	}
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
						for _, m := range append(f.Markers(), "<function=", "<parameter=", "to=functions", "<arg_key>", "<invoke", "call:") {
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
		{GLM, []string{"<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Pa", "ris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>4</arg_value>", "\n</tool_call>"}, `{"city": "Paris", "days": 4}`},
		{Gemma4, []string{"<|tool_call>call:get_weather{city:<|\"|>Par", "is<|\"|>,days:4", "}<tool_call|>"}, `{"city": "Paris", "days": 4}`},
		{MiniMaxM2, []string{"<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</param", "eter>\n<parameter name=\"days\">4</parameter>\n", "</invoke>\n</minimax:tool_call>"}, `{"city": "Paris", "days": 4}`},
		{MiniMaxM3, []string{mmNS + "<tool_call>\n" + mmNS + "<invoke name=\"get_weather\">" + mmNS + "<city>Paris" + mmNS + "</ci", "ty>" + mmNS + "<days>4" + mmNS + "</days>", mmNS + "</invoke>\n" + mmNS + "</tool_call>"}, `{"city": "Paris", "days": 4}`},
		{KimiK2, []string{"<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Pa", "ris\", ", "\"days\": 6}<|tool_call_end|><|tool_calls_section_end|>"}, `{"city": "Paris", "days": 6}`},
		{KimiK3, []string{"<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argu", "ment<|sep|><|open|>argument key=\"days\" type=\"number\"<|sep|>4<|close|>argument<|sep|>", "<|close|>call<|sep|><|close|>tools<|sep|>"}, `{"city": "Paris", "days": 4}`},
		{DeepSeekR1, []string{"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Pa", "ris\", \"days\"", ": 2}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"}, `{"city": "Paris", "days": 2}`},
		{DeepSeekV31, []string{"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"To", "kyo\", \"days\": 3}", "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"}, `{"city": "Tokyo", "days": 3}`},
		{DeepSeekV32, []string{"<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n<｜DSML｜para", "meter name=\"days\" string=\"false\">4</｜DSML｜parameter>\n", "</｜DSML｜invoke>\n</｜DSML｜function_calls>"}, `{"city": "Paris", "days": 4}`},
		{DeepSeekV4, []string{"<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n", "<｜DSML｜parameter name=\"days\" string=\"false\">4</｜DSML｜parameter>\n", "</｜DSML｜invoke>\n</｜DSML｜tool_calls>"}, `{"city": "Paris", "days": 4}`},
		{SeedOSS, []string{"<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</para", "meter>\n<parameter=days>4</parameter>\n", "</function>\n</seed:tool_call>"}, `{"city": "Paris", "days": 4}`},
		{Hy3, []string{"<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n<arg_key:opensource>city</arg_key:opensource>\n<arg_value:opensource>Paris</arg_value:opensource>\n", "<arg_key:opensource>days</arg_key:opensource>\n<arg_value:opensource>5</arg_value:opensource>\n", "</tool_call:opensource>\n</tool_calls:opensource>"}, `{"city": "Paris", "days": 5}`},
		{SolarOpen, []string{"<|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>get_weather<|tool_call:args|>{\"city\": \"Pa", "ris\", \"days\": 6}", "<|tool_call:end|><|calls|>"}, `{"city": "Paris", "days": 6}`},
		{Apertus, []string{"<|tools_prefix|>[{\"get_weather\": {\"city\": \"Pa", "ris\", \"days\": 7}", "}]<|tools_suffix|>"}, `{"city": "Paris", "days": 7}`},
		{NemotronV2, []string{"<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa", "ris\", \"days\": 1}", "}]</TOOLCALL>"}, `{"city": "Paris", "days": 1}`},
		{Granite, []string{"<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa", "ris\", \"days\": 2}", "}]"}, `{"city": "Paris", "days": 2}`},
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
		Qwen3Coder:  "Hi <tool_call>\n<function=get_weather>\n<parameter=city>\nPa",
		Harmony:     "Hi <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Pa",
		MistralV11:  "Hi [TOOL_CALLS]get_weather[ARGS]{\"ci",
		GLM:         "Hi <tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Pa",
		Gemma4:      "Hi <|tool_call>call:get_weather{city:<|\"|>Pa",
		MiniMaxM1:   "Hi <tool_calls>\n{\"name\": \"get_weather\", \"arguments\": {\"ci",
		MiniMaxM2:   "Hi <minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Pa",
		MiniMaxM3:   "Hi " + mmNS + "<tool_call>\n" + mmNS + "<invoke name=\"get_weather\">" + mmNS + "<city>Pa",
		KimiK2:      "Hi <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"ci",
		KimiK3:      "Hi <|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>Pa",
		Qwen3Coder:  "Hi <tool_call>\n<function=get_weather>\n<parameter=city>\nPa",
		Harmony:     "Hi <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Pa",
		MistralV11:  "Hi [TOOL_CALLS]get_weather[ARGS]{\"ci",
		DeepSeekR1:  "Hi <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"ci",
		DeepSeekV31: "Hi <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"ci",
		DeepSeekV32: "Hi <｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Pa",
		DeepSeekV4:  "Hi <｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Pa",
		SeedOSS:     "Hi <seed:tool_call>\n<function=get_weather>\n<parameter=city>Pa",
		Hy3:         "Hi <tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n<arg_key:opensource>ci",
		SolarOpen:   "Hi <|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>get_weather<|tool_call:args|>{\"ci",
		Apertus:     "Hi <|tools_prefix|>[{\"get_weather\": {\"ci",
		NemotronV2:  "Hi <TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"ci",
		Granite:     "Hi <|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"ci",
		Qwen3Coder:  "Hi <tool_call>\n<function=get_weather>\n<parameter=city>\nPa",
		Harmony:     "Hi <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Pa",
		MistralV11:  "Hi [TOOL_CALLS]get_weather[ARGS]{\"ci",
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

// An answer cut off inside a character of a marker ends with U+FFFD (the
// engine's stand-in for the character's first bytes): the marker cut
// off is dropped all the same, after text and after a call. A >>> cut off
// in functionary v3.2's recipient is dropped too.
func TestFamilyParsersCutInsideCharacter(t *testing.T) {
	n := 0
	for _, f := range all() {
		if len(f.Markers()) == 0 {
			continue
		}
		m := f.Markers()[0]
		for i := 1; i < len(m); i++ {
			if m[i] < utf8.RuneSelf || !utf8.RuneStart(m[i]) {
				continue
			}
			n++
			text := "Hi " + m[:i] + "\uFFFD"
			if content, _ := Parse(f, testTools, text, 0, true); content != "Hi " {
				t.Errorf("%s: %q cut off: content %q, want %q", f.Name(), text, content, "Hi ")
			}
			if content, _ := Parse(f, testTools, text, 0, false); content != text {
				t.Errorf("%s: %q at its natural end: content %q", f.Name(), text, content)
			}
		}
	}
	if n == 0 {
		t.Fatal("no marker with a character of several bytes")
	}
	call := "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{\"zone\":\"UTC\"}\n```<｜tool▁call▁end｜>"
	for _, tc := range []struct {
		f    Format
		text string
	}{
		{DeepSeekR1, "<｜tool▁calls▁begin｜>" + call + "<｜tool\uFFFD"},
		{DeepSeekR1, "<｜tool▁calls▁begin｜>" + call + call + "<｜tool▁call\uFFFD"},
		{FunctionaryV32, ">>>get_time\n{\"zone\":\"UTC\"}>>>get"},
		{FunctionaryV32, ">>>get_time\n{\"zone\":\"UTC\"}>>>"},
	} {
		content, calls := Parse(tc.f, testTools, tc.text, 0, true)
		if content != "" || len(calls) == 0 {
			t.Errorf("%s: %q cut off: content %q, %d calls", tc.f.Name(), tc.text, content, len(calls))
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
		{GLM, []string{`"<tool_call>get_weather"`, `"<arg_key>city</arg_key>"`, `"Paris"`, `"</arg_value>"`, `"</tool_call>"`}},
		{Gemma4, []string{`"<|tool_call>call:get_weather{"`, `"city:<|\"|>"`, `"Paris"`, `"}<tool_call|>"`, `",days:" days`}},
		{MiniMaxM1, []string{`"<tool_calls>\n"`, `"\n</tool_calls>"`}},
		{MiniMaxM2, []string{`"<minimax:tool_call>\n"`, `"<invoke name=\"get_weather\">\n<parameter name=\"city\">"`, `"</parameter>\n<parameter name=\"days\">"`, `"</minimax:tool_call>"`}},
		{MiniMaxM3, []string{`"]<]minimax[>[<tool_call>\n"`, `"]<]minimax[>[<invoke name=\"get_weather\">]<]minimax[>[<city>"`, `"]<]minimax[>[</tool_call>"`}},
		{KimiK2, []string{`"<|tool_calls_section_begin|>"`, `"<|tool_call_begin|>functions.get_weather:"`, `"<|tool_call_argument_begin|>"`, `"<|tool_calls_section_end|>"`}},
		{KimiK3, []string{`"<|open|>tools<|sep|>"`, `"<|open|>call tool=\"get_weather\" index=\""`, `"\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>"`, `"<|open|>argument key=\"tags\" type=\"" ("null" | "array")`, `"<|close|>tools<|sep|>"`}},
		{DeepSeekR1, []string{`"<｜tool▁calls▁begin｜>"`, `"<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n` + "```" + `json\n"`, `"\n` + "```" + `<｜tool▁call▁end｜>"`, `"<｜tool▁calls▁end｜>"`}},
		{DeepSeekV31, []string{`"<｜tool▁calls▁begin｜>"`, `"<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>"`, `"<｜tool▁call▁end｜>"`, `"<｜tool▁calls▁end｜>"`}},
		{DeepSeekV32, []string{`"<｜DSML｜function_calls>\n"`, `"<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">"`, `("<｜DSML｜parameter name=\"metric\" string=\"false\">" metric "</｜DSML｜parameter>\n")?`, `"</｜DSML｜function_calls>"`}},
		{DeepSeekV4, []string{`"<｜DSML｜tool_calls>\n"`, `"</｜DSML｜tool_calls>"`}},
		{SeedOSS, []string{`"<seed:tool_call>\n<function=get_weather>\n<parameter=city>"`, `"Paris"`, `"</parameter>\n"`, `"</function>\n</seed:tool_call>"`}},
		{Hy3, []string{`"<tool_calls:opensource>\n"`, `"<tool_call:opensource>get_weather<tool_sep:opensource>\n<arg_key:opensource>city</arg_key:opensource>\n<arg_value:opensource>"`, `"</tool_calls:opensource>"`}},
		{SolarOpen, []string{`"<|tool_calls|>"`, `"<|tool_call:name|>get_weather<|tool_call:args|>"`, `"<|tool_call:end|>"`}},
		{Apertus, []string{`"<|tools_prefix|>["`, `"{\"get_weather\": "`, `"]<|tools_suffix|>"`}},
		{NemotronV2, []string{`"<TOOLCALL>["`, `"]</TOOLCALL>"`}},
		{Granite, []string{`"<|tool_call|>["`}},
		{Llama3, []string{`",\"parameters\":"`, `"\"get_weather\""`}},
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
		"Apertus-8B-Instruct":          Apertus,
		"Bielik-11B-v3.0-Instruct":     Hermes,
		"ByteDance-Seed-OSS":           SeedOSS,
		"GLM-4.6":                      GLM,
		"GLM-4.7-Flash":                GLM,
		"Kimi-K2-Instruct":             KimiK2,
		"Kimi-K2-Thinking":             KimiK2,
		"Kimi-K3":                      KimiK3,
		"Apriel-1.6-15b-Thinker-fixed": Apriel,
		"Cohere2MoE":                   CommandR7B,
		"CohereForAI-c4ai-command-r-plus-tool_use":      CommandRPlus,
		"CohereForAI-c4ai-command-r7b-12-2024-tool_use": CommandR7B,
		"GigaChat3-10B-A1.8B":                           GigaChat3,
		"GigaChat3.1-10B-A1.8B":                         GigaChat31,
		"HuggingFaceTB-SmolLM3-3B":                      Hermes,
		"LFM2-8B-A1B":                                   LFM2,
		"LFM2.5-8B-A1B":                                 LFM2,
		"LFM2.5-Instruct":                               LFM2,
		"MiMo-VL":                                       Hermes,
		"MiniMax-M1":                                    MiniMaxM1,
		"MiniMax-M2":                                    MiniMaxM2,
		"MiniMax-M3":                                    MiniMaxM3,
		"Mistral-Small-3.2-24B-Instruct-2506":           MistralV11,
		"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16":           Qwen3Coder,
		"NVIDIA-Nemotron-Nano-v2":                       NemotronV2,
		"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": Hermes,
		"NousResearch-Hermes-3-Llama-3.1-8B-tool_use":   Hermes,
		"Qwen-QwQ-32B":                                  Hermes,
		"Qwen-Qwen2.5-7B-Instruct":                      Hermes,
		"Qwen-Qwen3-0.6B":                               Hermes,
		"Qwen3-Coder":                                   Qwen3Coder,
		"Qwen3.5-4B":                                    Qwen3Coder,
		"Reka-Edge":                                     Hermes,
		"StepFun3.5-Flash":                              Qwen3Coder,
		"deepseek-ai-DeepSeek-R1-Distill-Llama-8B":      DeepSeekR1,
		"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B":      DeepSeekR1,
		"deepseek-ai-DeepSeek-V3.1":                     DeepSeekV31,
		"deepseek-ai-DeepSeek-V3.2":                     DeepSeekV32,
		"deepseek-ai-DeepSeek-V4-Flash-0731":            DeepSeekV4,
		"deepseek-ai-DeepSeek-V4":                       DeepSeekV4,
		"fireworks-ai-llama-3-firefunction-v2":          FirefunctionV2,
		"google-gemma-2-2b-it":                          JSON,
		"google-gemma-4-31B-it-interleaved":             Gemma4,
		"google-gemma-4-31B-it":                         Gemma4,
		"ibm-granite-granite-3.3-2B-Instruct":           Granite,
		"ibm-granite-granite-4.0":                       Hermes,
		"ibm-granite-granite-4.1":                       Hermes,
		"llama-cpp-deepseek-r1":                         DeepSeekR1,
		"llama-cpp-rwkv-world":                          JSON,
		"meetkai-functionary-medium-v3.1":               FunctionaryV31,
		"meetkai-functionary-medium-v3.2":               FunctionaryV32,
		"meta-llama-Llama-3.1-8B-Instruct":              Llama3,
		"meta-llama-Llama-3.2-3B-Instruct":              Llama3,
		"meta-llama-Llama-3.3-70B-Instruct":             Llama3,
		"microsoft-Phi-3.5-mini-instruct":               JSON,
		"mistralai-Ministral-3-14B-Reasoning-2512":      MistralV11,
		"mistralai-Mistral-Nemo-Instruct-2407":          Mistral,
		"moonshotai-Kimi-K2":                            KimiK2,
		"muse-glimmer":                                  JSON,
		"openai-gpt-oss-120b":                           Harmony,
		"poolside-Laguna-S-2.1":                         GLM,
		"poolside-Laguna-XS-2.1":                        GLM,
		"poolside-Laguna-XS.2":                          GLM,
		"tencent-Hy3":                                   Hy3,
		"openbmb-MiniCPM5-1B":                           MiniCPM,
		"unsloth-Apriel-1.5":                            Apriel,
		"unsloth-mistral-Devstral-Small-2507":           MistralV11,
		"upstage-Solar-Open-100B":                       SolarOpen,
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

// SmolLM3's template, which lists no tools and writes no calls, is
// Hermes's by its reasoning-mode header; SmolLM2's, whose default system
// prompt SmolLM3's shares, and a template that only mentions a reasoning
// mode, are not. SmolLM3's answers read as Hermes's.
func TestDetectSmolLM3(t *testing.T) {
	smol2, err := os.ReadFile("../chat/testdata/smollm2-instruct.jinja")
	if err != nil {
		t.Fatal(err)
	}
	for src, want := range map[string]Format{
		testmodel.Template(t, "HuggingFaceTB-SmolLM3-3B"): Hermes,
		string(smol2): JSON,
		"{{ 'Reasoning Mode: ' + mode }}{% for m in messages %}{{ m.content }}{% endfor %}": JSON,
		"{{ '/think and /no_think' }}{% for m in messages %}{{ m.content }}{% endfor %}":    JSON,
	} {
		if got := Detect(src); got != want {
			t.Errorf("%.60q: %s, want %s", src, got.Name(), want.Name())
		}
	}
	content, calls := Parse(Detect(testmodel.Template(t, "HuggingFaceTB-SmolLM3-3B")), testTools,
		"Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", 0, false)
	if strings.TrimSpace(content) != "Let me check." || len(calls) != 1 || calls[0].Function.Name != "get_weather" || calls[0].Function.Arguments != `{"city": "Paris"}` {
		t.Errorf("SmolLM3's call: content %q, calls %+v", content, calls)
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

// Each family reads back the calls its real templates write for earlier
// turns: the markup the models learned.
func TestFamiliesReadTheirTemplates(t *testing.T) {
	calls := []wire.ToolCall{
		{ID: "call_1", Type: "function", Function: wire.FunctionCall{Name: "get_weather", Arguments: `{"city": "Paris", "days": 3, "metric": true, "note": "a \"b\" <c>", "where": {"lat": 48.8}, "tags": ["x", "y"]}`}},
		{ID: "call_2", Type: "function", Function: wire.FunctionCall{Name: "get_time", Arguments: `{}`}},
	}
	msgs := []chat.Message{
		{Role: "user", Content: json.RawMessage(`"Weather and time?"`)},
		{Role: "assistant", ToolCalls: calls},
	}
	for name, f := range map[string]Format{
		"GLM-4.6":               GLM,
		"GLM-4.7-Flash":         GLM,
		"moonshotai-Kimi-K2":    KimiK2,
		"MiniMax-M1":            MiniMaxM1,
		"MiniMax-M2":            MiniMaxM2,
		"MiniMax-M3":            MiniMaxM3,
		"Kimi-K3":               KimiK3,
		"poolside-Laguna-XS.2":  GLM,
		"google-gemma-4-31B-it": Gemma4,
		// Kimi-K2-Instruct's and -Thinking's templates append to a list
		// when they render a call, which transformers' sandbox refuses:
		// rendered with the mutable one (--chat-template-mutable).
		"Kimi-K2-Instruct": KimiK2,
		"Kimi-K2-Thinking": KimiK2,
	} {
		t.Run(name, func(t *testing.T) {
			tpl, err := chat.Parse(testmodel.Template(t, name))
			if err != nil {
				t.Fatal(err)
			}
			text, err := tpl.Render(msgs, chat.Options{BOSToken: "<s>", EOSToken: "</s>", Mutable: strings.HasPrefix(name, "Kimi-K2-")})
			if err != nil {
				t.Fatal(err)
			}
			// The assistant's turn, from its first call on; what follows
			// the calls (the turn's end) is content.
			at := -1
			for _, m := range f.Markers() {
				if i := strings.Index(text, m); i >= 0 && (at < 0 || i < at) {
					at = i
				}
			}
			if at < 0 {
				t.Fatalf("no call markup in %q", text)
			}
			_, got := Parse(f, testTools, text[at:], 0, false)
			if len(got) != len(calls) {
				t.Fatalf("%d calls %+v from %q", len(got), got, text[at:])
			}
			for i, c := range got {
				var a, b any
				json.Unmarshal([]byte(c.Function.Arguments), &a)
				json.Unmarshal([]byte(calls[i].Function.Arguments), &b)
				if c.Function.Name != calls[i].Function.Name || !reflect.DeepEqual(a, b) {
					t.Errorf("call %d: %s(%s), want %s(%s); from %q", i, c.Function.Name, c.Function.Arguments, calls[i].Function.Name, calls[i].Function.Arguments, text[at:])
				}
			}
		})
	}
}

// Every format's grammar writes the calls' JSON compact by default (no
// rule "space", which allows whitespace between JSON's tokens), with
// grammar.WhitespaceFree allows whitespace there, as before, and with
// grammar.WhitespaceSpaced writes ": " (and no rule space).
func TestGrammarsCompactJSON(t *testing.T) {
	for _, f := range all() {
		for _, parallel := range []bool{false, true} {
			g, err := f.Grammar(testTools, parallel, grammar.SchemaLimits{})
			if err != nil {
				t.Fatalf("%s: %v", f.Name(), err)
			}
			if strings.Contains(g, "space") {
				t.Errorf("%s: the default grammar allows whitespace in JSON:\n%s", f.Name(), g)
			}
			free, err := f.Grammar(testTools, parallel, grammar.SchemaLimits{Whitespace: grammar.WhitespaceFree})
			if err != nil {
				t.Fatalf("%s, free whitespace: %v", f.Name(), err)
			}
			if err := grammar.Validate(free, grammar.DefaultLimits); err != nil {
				t.Fatalf("%s, free whitespace: %v\n%s", f.Name(), err, free)
			}
			// Every format writes some value of testTools as JSON.
			if !strings.Contains(free, "\nspace ::= ") {
				t.Errorf("%s: the grammar with free whitespace has no rule space:\n%s", f.Name(), free)
			}
			spaced, err := f.Grammar(testTools, parallel, grammar.SchemaLimits{Whitespace: grammar.WhitespaceSpaced})
			if err != nil {
				t.Fatalf("%s, spaced: %v", f.Name(), err)
			}
			if err := grammar.Validate(spaced, grammar.DefaultLimits); err != nil {
				t.Fatalf("%s, spaced: %v\n%s", f.Name(), err, spaced)
			}
			if strings.Contains(spaced, "space") || !strings.Contains(spaced, ": ") {
				t.Errorf("%s: the spaced grammar has a rule space, or no \": \":\n%s", f.Name(), spaced)
			}
		}
	}
}
