package toolcall

import "github.com/corral-llm/corral/grammar"

// JSON reads an answer that is a call object, an array of them, or
// {"tool_calls": [...]}: the fallback for templates without a recognised
// convention.
var JSON Format = &jsonFormat{
	name: "json",
	sx:   syntax{bare: true, argsKey: "arguments", frame: grammar.Frame{Open: "[", Close: "]", Sep: ", "}},
}
