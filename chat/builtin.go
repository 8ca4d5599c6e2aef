package chat

import (
	"slices"
	"strings"
)

// builtin is a chat template corral ships, for models whose GGUF has none
// or a broken one. Built-ins render the conversation and tool-call
// history; they do not describe tools to the model.
type builtin struct {
	source   string
	bos, eos string // used when Options leave BOSToken/EOSToken empty
	stops    []string
}

var builtinTemplates = map[string]builtin{
	// chatml: <|im_start|>role\ncontent<|im_end|>\n, tool calls in Hermes
	// <tool_call> form.
	"chatml": {
		source: `{%- for message in messages %}
{{- '<|im_start|>' + message.role + '\n' + message.content }}
{%- for call in message.tool_calls %}
{%- if message.content or not loop.first %}{{- '\n' }}{% endif %}
{{- '<tool_call>\n' + {'name': call.function.name, 'arguments': call.function.arguments} | tojson + '\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}`,
		eos:   "<|im_end|>",
		stops: []string{"<|im_end|>"},
	},
	// llama3: Llama 3 headers, tool results as the ipython role.
	"llama3": {
		source: `{{- bos_token }}
{%- for message in messages %}
{%- set role = 'ipython' if message.role == 'tool' else message.role %}
{{- '<|start_header_id|>' + role + '<|end_header_id|>\n\n' + message.content | trim }}
{%- for call in message.tool_calls %}
{{- {'name': call.function.name, 'parameters': call.function.arguments} | tojson }}
{%- endfor %}
{{- '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}`,
		bos:   "<|begin_of_text|>",
		eos:   "<|eot_id|>",
		stops: []string{"<|eot_id|>", "<|eom_id|>"},
	},
	// mistral: [INST] turns; a system message is prepended to the first
	// user turn, tool calls follow [TOOL_CALLS] as a JSON list, tool
	// results are given as user turns.
	"mistral": {
		source: `{{- bos_token }}
{%- set ns = namespace(system='') %}
{%- for message in messages %}
{%- if message.role == 'system' %}
{%- set ns.system = ns.system + message.content + '\n\n' %}
{%- elif message.role == 'assistant' %}
{{- ' ' + message.content | trim }}
{%- if message.tool_calls %}
{{- '[TOOL_CALLS][' }}
{%- for call in message.tool_calls %}
{%- if not loop.first %}{{- ', ' }}{% endif %}
{{- {'name': call.function.name, 'arguments': call.function.arguments} | tojson }}
{%- endfor %}
{{- ']' }}
{%- endif %}
{{- eos_token }}
{%- else %}
{{- '[INST] ' + ns.system + message.content | trim + ' [/INST]' }}
{%- set ns.system = '' %}
{%- endif %}
{%- endfor %}`,
		bos:   "<s>",
		eos:   "</s>",
		stops: []string{"</s>", "[INST]"},
	},
	// gemma: user and model turns; system text opens the next user turn.
	"gemma": {
		source: `{{- bos_token }}
{%- set ns = namespace(system='') %}
{%- for message in messages %}
{%- if message.role == 'system' %}
{%- set ns.system = ns.system + message.content + '\n\n' %}
{%- else %}
{%- set role = 'model' if message.role == 'assistant' else 'user' %}
{{- '<start_of_turn>' + role + '\n' + ns.system + message.content | trim }}
{%- for call in message.tool_calls %}
{{- {'name': call.function.name, 'arguments': call.function.arguments} | tojson }}
{%- endfor %}
{{- '<end_of_turn>\n' }}
{%- set ns.system = '' %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<start_of_turn>model\n' }}{%- endif %}`,
		bos:   "<bos>",
		eos:   "<eos>",
		stops: []string{"<end_of_turn>"},
	},
	// phi3: <|role|>\ncontent<|end|>\n.
	"phi3": {
		source: `{%- for message in messages %}
{{- '<|' + message.role + '|>\n' + message.content }}
{%- for call in message.tool_calls %}
{{- {'name': call.function.name, 'arguments': call.function.arguments} | tojson }}
{%- endfor %}
{{- '<|end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|assistant|>\n' }}{%- endif %}`,
		eos:   "<|endoftext|>",
		stops: []string{"<|end|>"},
	},
}

// Names lists the built-in template names Lookup knows, sorted.
func Names() []string {
	names := make([]string, 0, len(builtinTemplates))
	for name := range builtinTemplates {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// turnMarkers are end-of-turn strings of well-known template families;
// a parsed template stops on those its source mentions.
var turnMarkers = []string{"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|end|>"}

func markersIn(src string) []string {
	var stops []string
	for _, m := range turnMarkers {
		if strings.Contains(src, m) {
			stops = append(stops, m)
		}
	}
	return stops
}

// Detect names the built-in template a chat template source (as found in
// a GGUF's tokenizer.chat_template) follows, judged by its turn markers,
// or returns "" when it follows none of them.
func Detect(src string) string {
	switch {
	case strings.Contains(src, "<|im_start|>"):
		return "chatml"
	case strings.Contains(src, "<|start_header_id|>"):
		return "llama3"
	case strings.Contains(src, "<start_of_turn>"):
		return "gemma"
	case strings.Contains(src, "<|assistant|>") && strings.Contains(src, "<|end|>"):
		return "phi3"
	case strings.Contains(src, "[INST]"):
		return "mistral"
	}
	return ""
}
