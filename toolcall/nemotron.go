package toolcall

import (
	"strings"

	"github.com/corral-llm/corral/grammar"
)

// NemotronV2 writes its calls as a JSON list of {"name": ..., "arguments":
// {...}} between <TOOLCALL> and </TOOLCALL>, after any text: NVIDIA
// Nemotron Nano v2 (9B, 12B).
//
//	<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</TOOLCALL>
//
// (Nemotron 3 Nano writes Qwen3-Coder's XML instead.)
var NemotronV2 Format = &jsonFormat{
	name:    "nemotron-v2",
	markers: []string{"<TOOLCALL>", "</TOOLCALL>"},
	sx: syntax{
		start: []string{"<TOOLCALL>"}, end: "</TOOLCALL>", argsKey: "arguments",
		frame: grammar.Frame{Open: "<TOOLCALL>[", Close: "]</TOOLCALL>", Sep: ", "},
	},
}

// isNemotronV2 reports a template that writes <TOOLCALL>.
func isNemotronV2(src string) bool { return strings.Contains(src, "<TOOLCALL>") }
