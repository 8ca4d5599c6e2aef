package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/media"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// Translation is a request in neutral terms: what the generation core
// renders, samples and parses.
type Translation struct {
	// Messages are the conversation: the previous response's (with
	// previous_response_id), then instructions as a system message, then
	// the input items.
	Messages []chat.Message
	// Tools are the function tools the model sees, namespaces flattened.
	Tools []wire.Tool
	// Namespaces maps the name of a function offered inside a namespace
	// tool to that namespace; a call of it is answered with both (the
	// function_call item's name and namespace).
	Namespaces map[string]string
	// Dropped are the types of the offered tools the model never sees
	// (built-in tools such as web_search, and custom tools), in order,
	// for the core to log.
	Dropped []string
	// ToolChoice is how the model may call the tools (Single when
	// parallel_tool_calls is false).
	ToolChoice serving.ToolChoice
	// ParallelToolCalls is parallel_tool_calls (true unless false).
	ParallelToolCalls bool
	// MaxOutputTokens bounds the answer; 0: no bound but the context.
	MaxOutputTokens int
	// Temperature and TopP are the sampling settings, nil when not set.
	Temperature, TopP *float64
	// Format is the text.format the answer must follow.
	Format Format
	// ReasoningEffort is reasoning.effort ("" when not set), the template
	// argument reasoning_effort.
	ReasoningEffort string
	// Store says to keep the response (OpenAI's default: true).
	Store bool
	// Media are the conversation's images (input_image parts) and sounds
	// (input_audio parts), not yet decoded: Media[k] is the medium of
	// the content part chat.MediaPart(k) in Messages. A stored
	// conversation keeps each as the part it came as (see Record), and
	// previous_response_id reads it back.
	Media []serving.MediaSource
	// instructions is the index in Messages of the instructions' system
	// message plus one, 0 when none: a stored response's conversation
	// leaves them out (OpenAI does not carry instructions over).
	instructions int
}

// Format is the text.format of a request.
type Format struct {
	// JSON says the answer must be JSON: a JSON object when Schema is
	// nil (json_object), else valid against Schema (json_schema).
	JSON   bool
	Schema json.RawMessage
	// Name is the json_schema's name.
	Name string
}

// Prior resolves what a request refers to in the store:
// previous_response_id and item_reference. Store.Prior returns one for an
// owner. Both methods return an error wrapping ErrNotFound for what is not
// there.
type Prior interface {
	// Conversation returns the messages of the stored response id: its
	// own conversation followed by its output.
	Conversation(id string) ([]chat.Message, error)
	// Item returns the stored input or output item id, as JSON.
	Item(id string) (json.RawMessage, error)
}

// Limits bound what a request may hold, and what it expands to once
// what it refers to in the store (previous_response_id, item_reference)
// is resolved; zero fields take the defaults. Translate counts the
// expansion as it resolves it, so that a small request that refers to a
// large conversation is refused before that conversation is built.
type Limits struct {
	// MaxItems bounds the input items, and the messages of the
	// conversation the request expands to: the previous response's, the
	// instructions, the input's (default 10000; corral serve
	// --max-messages).
	MaxItems int
	// MaxTools bounds the tools, namespaces' functions included (default
	// 512; --max-tools).
	MaxTools int
	// MaxBytes bounds the text of the conversation the request expands
	// to, a referenced item's counted each time it is referred to, and,
	// apart from it, the stored JSON of the items it refers to, each
	// read once (default serving.DefaultLimits.MaxPromptBytes;
	// --max-prompt-bytes).
	MaxBytes int
}

func (l Limits) items() int {
	if l.MaxItems > 0 {
		return l.MaxItems
	}
	return 10000
}

func (l Limits) tools() int {
	if l.MaxTools > 0 {
		return l.MaxTools
	}
	return 512
}

func (l Limits) bytes() int {
	if l.MaxBytes > 0 {
		return l.MaxBytes
	}
	return serving.DefaultLimits.MaxPromptBytes
}

// budget counts the conversation a request expands to as Translate
// builds it: each message, and each piece of text a message gets, is
// counted before it is added. A reference to a stored item of 1 MB costs
// 1 MB each time however small the reference is, so 8,000 references in
// a 352 KB body are refused at the eighth, not after 8 GB.
type budget struct {
	maxMessages, maxBytes int
	messages, bytes       int // of the conversation so far
	stored                int // bytes of stored items' JSON read
}

// newBudget is the budget of lim.
func newBudget(lim Limits) *budget {
	return &budget{maxMessages: lim.items(), maxBytes: lim.bytes()}
}

// unlimited is a budget that bounds nothing: for reading back what the
// server wrote itself.
func unlimited() *budget {
	return &budget{maxMessages: math.MaxInt, maxBytes: math.MaxInt}
}

// expand counts messages and size bytes of text that param adds to the
// conversation; past the limits it is a 400 naming param.
func (g *budget) expand(param string, messages, size int) *Error {
	g.messages += messages
	g.bytes += size
	switch {
	case g.messages > g.maxMessages:
		return overLimit(param, "max-messages", g.maxMessages, "messages",
			"'%s' makes the conversation, with what it refers to in the store, too long", param)
	case g.bytes > g.maxBytes:
		return overLimit(param, "max-prompt-bytes", g.maxBytes, "bytes of text",
			"'%s' makes the conversation, with what it refers to in the store, too long", param)
	}
	return nil
}

// read counts the n bytes of JSON of the stored item id that param
// refers to, before it is parsed (once a request).
func (g *budget) read(param, id string, n int) *Error {
	g.stored += n
	if g.stored > g.maxBytes {
		return overLimit(param, "max-prompt-bytes", g.maxBytes, "bytes of stored JSON",
			"'%s' refers to item '%s': the stored items the request refers to are too large together", param, id)
	}
	return nil
}

// textBytes is the bytes of text m holds: what it counts against
// Limits.MaxBytes.
func textBytes(m chat.Message) int {
	n := len(m.Role) + len(m.Content) + len(m.Name) + len(m.ToolCallID) + len(m.ReasoningContent) + len(m.Reasoning)
	for _, c := range m.ToolCalls {
		n += callBytes(c)
	}
	return n
}

// callBytes is the bytes of text of a tool call.
func callBytes(c wire.ToolCall) int {
	return len(c.ID) + len(c.Type) + len(c.Function.Name) + len(c.Function.Arguments)
}

// efforts are the reasoning.effort values OpenAI defines.
var efforts = []string{"none", "minimal", "low", "medium", "high", "xhigh"}

// Translate checks r and turns it into neutral terms. prior resolves
// previous_response_id and item_reference; nil means there is no store
// (both are then refused as not found).
//
// Tools: function tools become wire.Tool (strict is accepted and not
// enforced; a forced call is). A namespace tool's functions are flattened
// into the list under their own names, which must not clash with another
// tool's; calls of them are answered with the namespace (Namespaces).
// Built-in tools (web_search, file_search, code_interpreter, computer use,
// image_generation, local_shell, mcp, …) and custom tools that are merely
// offered are dropped, so the model never sees them, and listed in
// Dropped. The issue asked for a 400 on built-in tools, but Codex offers
// web_search with every request: refusing it would fail every Codex
// request, so only a tool_choice that forces a built-in or custom tool
// is refused, with a 400 naming it.
//
// Input: a string is one user message. message items (roles user,
// assistant, system, developer; content a string or input_text,
// output_text, refusal, input_image and input_audio parts) become
// messages, each image or sound a medium of Media; input_file parts and
// an input_image's file_id are refused naming them. function_call items
// become the ToolCalls of an assistant message (consecutive ones, and
// one right after an assistant message, join it); function_call_output
// becomes a tool message (its output text, or parts with images); a
// reasoning item's text becomes the ReasoningContent of the next
// assistant message (encrypted_content is ignored); additional_tools
// items (Codex's "responses lite" format) add their tools to the tools;
// item_reference (its type may be left out: {"id": …}) is looked up in
// prior. Other item types are refused naming the type.
//
// Limits: besides the tools and input items, lim bounds what the
// request expands to (see Limits): the previous response's conversation,
// the instructions and the input, a referenced item counted each time it
// is referred to, are counted as they are added, and the first to go
// past a limit is refused with a 400 limit_exceeded naming it and the
// corral serve flag. A referenced item is looked up and parsed once a
// request however often it is referred to, and its stored JSON counts
// against lim.MaxBytes too.
func Translate(r *Request, prior Prior, lim Limits) (*Translation, *Error) {
	t := &Translation{ParallelToolCalls: r.ParallelToolCalls == nil || *r.ParallelToolCalls, Store: r.Store == nil || *r.Store}
	switch {
	case r.Background != nil && *r.Background:
		return nil, invalid("background", "'background' responses are not supported")
	case !isNull(r.Conversation):
		return nil, invalid("conversation", "'conversation' is not supported; use 'previous_response_id'")
	case !isNull(r.Prompt):
		return nil, invalid("prompt", "prompt templates ('prompt') are not supported")
	}
	if e := t.sampling(r); e != nil {
		return nil, e
	}
	g := newBudget(lim)
	if r.PreviousResponseID != "" {
		if prior == nil {
			return nil, notFound("previous_response_id", "Previous response", r.PreviousResponseID)
		}
		msgs, err := prior.Conversation(r.PreviousResponseID)
		if err != nil {
			return nil, notFound("previous_response_id", "Previous response", r.PreviousResponseID)
		}
		var e *Error
		if msgs, e = t.storedMedia(msgs); e != nil {
			return nil, e
		}
		size := 0
		for _, m := range msgs {
			size += textBytes(m)
		}
		if e := g.expand("previous_response_id", len(msgs), size); e != nil {
			return nil, e
		}
		t.Messages = append(t.Messages, msgs...)
	}
	if r.Instructions != nil && *r.Instructions != "" {
		if e := g.expand("instructions", 1, len(*r.Instructions)); e != nil {
			return nil, e
		}
		t.Messages = append(t.Messages, chat.Message{Role: "system", Content: jsonString(*r.Instructions)})
		t.instructions = len(t.Messages)
	}
	tb := toolBuilder{t: t, max: lim.tools(), names: map[string]bool{}}
	for i, raw := range r.Tools {
		if e := tb.add(raw, fmt.Sprintf("tools[%d]", i), ""); e != nil {
			return nil, e
		}
	}
	in := inputBuilder{t: t, prior: prior, tools: &tb, budget: g}
	if e := in.input(r.Input, lim.items()); e != nil {
		return nil, e
	}
	if len(t.Messages) == 0 {
		return nil, invalid("input", "'input' is empty")
	}
	choice, e := toolChoice(r.ToolChoice, tb.names, len(t.Tools) > 0)
	if e != nil {
		return nil, e
	}
	choice.Single = !t.ParallelToolCalls
	t.ToolChoice = choice
	return t, nil
}

// sampling reads the sampling, format and reasoning settings.
func (t *Translation) sampling(r *Request) *Error {
	if r.MaxOutputTokens != nil {
		if *r.MaxOutputTokens < 1 {
			return invalid("max_output_tokens", "'max_output_tokens' must be at least 1, got %d", *r.MaxOutputTokens)
		}
		t.MaxOutputTokens = *r.MaxOutputTokens
	}
	if v := r.Temperature; v != nil && (*v < 0 || *v > 2) {
		return invalid("temperature", "'temperature' must be between 0 and 2, got %g", *v)
	}
	if v := r.TopP; v != nil && (*v < 0 || *v > 1) {
		return invalid("top_p", "'top_p' must be between 0 and 1, got %g", *v)
	}
	t.Temperature, t.TopP = r.Temperature, r.TopP
	if len(r.Metadata) > 16 {
		return invalid("metadata", "'metadata' has %d keys; at most 16 are allowed", len(r.Metadata))
	}
	for k, v := range r.Metadata {
		if len(k) > 64 || len(v) > 512 {
			return invalid("metadata", "'metadata' keys may have 64 characters and values 512; %q is longer", k)
		}
	}
	switch r.Truncation {
	case "", "auto", "disabled":
	default:
		return invalid("truncation", "'truncation' must be \"auto\" or \"disabled\", got %q", r.Truncation)
	}
	if r.Reasoning != nil && r.Reasoning.Effort != "" {
		if !slices.Contains(efforts, r.Reasoning.Effort) {
			return invalid("reasoning.effort", "'reasoning.effort' must be one of %s, got %q", strings.Join(efforts, ", "), r.Reasoning.Effort)
		}
		t.ReasoningEffort = r.Reasoning.Effort
	}
	if r.Text != nil && !isNull(r.Text.Format) {
		var f struct {
			Type   string          `json:"type"`
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
		}
		if err := json.Unmarshal(r.Text.Format, &f); err != nil {
			return invalid("text.format", "'text.format' must be an object with a type")
		}
		switch f.Type {
		case "text":
		case "json_object":
			t.Format = Format{JSON: true}
		case "json_schema":
			if s := bytes.TrimSpace(f.Schema); len(s) == 0 || s[0] != '{' {
				return invalid("text.format.schema", "'text.format.schema' must be a JSON schema object")
			}
			t.Format = Format{JSON: true, Schema: f.Schema, Name: f.Name}
		default:
			return invalid("text.format.type", "'text.format.type' must be \"text\", \"json_object\" or \"json_schema\", got %q", f.Type)
		}
	}
	return nil
}

// toolBuilder collects the tools.
type toolBuilder struct {
	t     *Translation
	max   int
	names map[string]bool // function names offered
}

// tooMany is the 400 for a tool past the limit, named as corral serve's
// other limits are (serving.OverLimit).
func (b *toolBuilder) tooMany(param string) *Error {
	return overLimit(param, "max-tools", b.max, "tools", "too many tools, namespaces' functions included")
}

// add adds one tool of tools (or of a namespace, ns).
func (b *toolBuilder) add(raw json.RawMessage, param, ns string) *Error {
	var tool struct {
		Type        string            `json:"type"`
		Name        string            `json:"name"`
		Description string            `json:"description"`
		Parameters  json.RawMessage   `json:"parameters"`
		Tools       []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(raw, &tool); err != nil {
		return invalid(param, "'%s' must be a tool object", param)
	}
	switch tool.Type {
	case "function":
		if !functionName.MatchString(tool.Name) {
			return invalid(param+".name", "'%s.name' must be 1 to 64 letters, digits, '_' or '-', got %q", param, tool.Name)
		}
		if b.names[tool.Name] {
			return invalid(param+".name", "tool %q is defined twice", tool.Name)
		}
		if p := bytes.TrimSpace(tool.Parameters); len(p) > 0 && p[0] != '{' && !bytes.Equal(p, []byte("null")) {
			return invalid(param+".parameters", "'%s.parameters' must be a JSON schema object", param)
		}
		if len(b.t.Tools) >= b.max {
			return b.tooMany(param)
		}
		b.names[tool.Name] = true
		def := wire.FunctionDef{Name: tool.Name, Description: tool.Description}
		if !isNull(tool.Parameters) {
			def.Parameters = tool.Parameters
		}
		b.t.Tools = append(b.t.Tools, wire.Tool{Type: "function", Function: def})
		if ns != "" {
			if b.t.Namespaces == nil {
				b.t.Namespaces = map[string]string{}
			}
			b.t.Namespaces[tool.Name] = ns
		}
	case "namespace":
		if ns != "" {
			return invalid(param, "'%s': a namespace may not hold a namespace", param)
		}
		if !functionName.MatchString(tool.Name) {
			return invalid(param+".name", "'%s.name' must be 1 to 64 letters, digits, '_' or '-', got %q", param, tool.Name)
		}
		for j, inner := range tool.Tools {
			if e := b.add(inner, fmt.Sprintf("%s.tools[%d]", param, j), tool.Name); e != nil {
				return e
			}
		}
	case "":
		return invalid(param+".type", "'%s.type' is missing", param)
	default:
		if len(b.t.Dropped) >= b.max {
			return b.tooMany(param)
		}
		b.t.Dropped = append(b.t.Dropped, tool.Type)
	}
	return nil
}

// toolChoice reads tool_choice. names are the function tools offered.
func toolChoice(raw json.RawMessage, names map[string]bool, tools bool) (serving.ToolChoice, *Error) {
	c := serving.ToolChoice{Mode: serving.ToolsNone}
	if tools {
		c.Mode = serving.ToolsAuto
	}
	if isNull(raw) {
		return c, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto", "none":
			if !tools {
				s = "none"
			}
			return serving.ToolChoice{Mode: serving.ToolMode(s)}, nil
		case "required":
			if !tools {
				return c, invalid("tool_choice", "'tool_choice' \"required\" needs function tools in 'tools'")
			}
			return serving.ToolChoice{Mode: serving.ToolMode(s)}, nil
		}
		return c, invalid("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or an object, got %q", s)
	}
	var o struct {
		Type  string `json:"type"`
		Name  string `json:"name"`
		Mode  string `json:"mode"`
		Tools []struct {
			Type string `json:"type"`
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return c, invalid("tool_choice", "'tool_choice' must be a string or an object")
	}
	switch o.Type {
	case "function":
		if !names[o.Name] {
			return c, invalid("tool_choice", "'tool_choice' names function %q, which is not among the function tools", o.Name)
		}
		return serving.ToolChoice{Mode: serving.ToolsFunction, Name: o.Name}, nil
	case "allowed_tools":
		if o.Mode != "auto" && o.Mode != "required" {
			return c, invalid("tool_choice.mode", "'tool_choice.mode' must be \"auto\" or \"required\", got %q", o.Mode)
		}
		allowed := []string{}
		seen := map[string]bool{}
		for _, tool := range o.Tools {
			switch {
			case tool.Type != "function":
				// A built-in tool is never shown; allowing it allows nothing.
			case !names[tool.Name]:
				return c, invalid("tool_choice.tools", "'tool_choice.tools' names function %q, which is not among the function tools", tool.Name)
			case !seen[tool.Name]:
				seen[tool.Name] = true
				allowed = append(allowed, tool.Name)
			}
		}
		if len(allowed) == 0 {
			if o.Mode == "required" {
				return c, invalid("tool_choice.tools", "'tool_choice' requires a call of one of %d tools, none of them a function tool", len(o.Tools))
			}
			return serving.ToolChoice{Mode: serving.ToolsNone}, nil
		}
		return serving.ToolChoice{Mode: serving.ToolMode(o.Mode), Allowed: allowed}, nil
	case "":
		return c, invalid("tool_choice.type", "'tool_choice.type' is missing")
	}
	return c, invalid("tool_choice", "'tool_choice' forces the tool type %q, which corral does not provide (only function tools)", o.Type)
}

// inputBuilder turns input items into messages.
type inputBuilder struct {
	t     *Translation
	prior Prior
	tools *toolBuilder
	// budget counts the conversation as it is built.
	budget *budget
	// refs are the items item_reference found, by id: each is looked
	// up and parsed once, and added as often as it is referred to.
	refs map[string]*piece
	// reasoning are the texts of the reasoning items waiting for the next
	// assistant message; pending says there was one.
	reasoning []string
	pending   bool
	// open is the index in t.Messages of the assistant message that
	// function calls join, -1 when none.
	open int
}

// item is the union of the input item shapes corral reads.
type item struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
	Summary   []struct {
		Text string `json:"text"`
	} `json:"summary"`
	Tools []json.RawMessage `json:"tools"`
}

// pieceKind is what an input item adds to the conversation.
type pieceKind int

const (
	kindMessage   pieceKind = iota // a message: an assistant one opens a turn
	kindCall                       // a function call: it joins the open assistant message
	kindReasoning                  // reasoning, for the next assistant message
	kindTools                      // tools to add (additional_tools)
)

// piece is an input item read: what it adds to the conversation, and
// the bytes of text that costs each time it is added.
type piece struct {
	kind pieceKind
	msg  chat.Message  // kindMessage
	call wire.ToolCall // kindCall
	// reasoning is a reasoning item's texts joined by newlines; texts
	// says it had any.
	reasoning string
	texts     bool
	tools     []json.RawMessage // kindTools
	size      int
}

// input reads the input: a string or an array of at most max items.
func (b *inputBuilder) input(raw json.RawMessage, max int) *Error {
	b.open = -1
	if isNull(raw) {
		return invalid("input", "'input' is missing")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if e := b.budget.expand("input", 0, len(s)); e != nil {
			return e
		}
		return b.push(chat.Message{Role: "user", Content: jsonString(s)}, "input")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return invalid("input", "'input' must be a string or an array of items")
	}
	if len(items) > max {
		return overLimit("input", "max-messages", max, "items", "'input' has %d items", len(items))
	}
	for i, raw := range items {
		if e := b.item(raw, fmt.Sprintf("input[%d]", i), true); e != nil {
			return e
		}
	}
	return b.flush("input")
}

// item reads one input item and adds it; refs says whether it may be an
// item_reference (a referenced item may not be one itself).
func (b *inputBuilder) item(raw json.RawMessage, param string, refs bool) *Error {
	p, e := b.read(raw, param, refs)
	if e != nil {
		return e
	}
	return b.apply(p, param)
}

// read reads one input item into a piece; an item_reference is the
// piece of the item it refers to.
func (b *inputBuilder) read(raw json.RawMessage, param string, refs bool) (*piece, *Error) {
	var it item
	if err := json.Unmarshal(raw, &it); err != nil {
		return nil, invalid(param, "'%s' must be an input item object", param)
	}
	switch {
	case it.Type == "" && it.Role != "":
		it.Type = "message" // EasyInputMessage: {"role","content"}
	case it.Type == "" && it.ID != "" && refs:
		it.Type = "item_reference" // its type is optional: openai-go's ResponseInputItemParamOfItemReference leaves it out
	}
	switch it.Type {
	case "message":
		switch it.Role {
		case "user", "assistant", "system", "developer":
		default:
			return nil, invalid(param+".role", "'%s.role' must be user, assistant, system or developer, got %q", param, it.Role)
		}
		content, e := b.t.messageContent(it.Content, param+".content")
		if e != nil {
			return nil, e
		}
		m := chat.Message{Role: it.Role, Content: content}
		return &piece{kind: kindMessage, msg: m, size: textBytes(m)}, nil
	case "function_call":
		if it.CallID == "" {
			return nil, invalid(param+".call_id", "'%s.call_id' is missing", param)
		}
		if it.Name == "" {
			return nil, invalid(param+".name", "'%s.name' is missing", param)
		}
		call := wire.ToolCall{ID: it.CallID, Type: "function", Function: wire.FunctionCall{Name: it.Name, Arguments: it.Arguments}}
		return &piece{kind: kindCall, call: call, size: callBytes(call)}, nil
	case "function_call_output":
		if it.CallID == "" {
			return nil, invalid(param+".call_id", "'%s.call_id' is missing", param)
		}
		content, e := b.t.callOutput(it.Output, param+".output")
		if e != nil {
			return nil, e
		}
		m := chat.Message{Role: "tool", ToolCallID: it.CallID, Content: content}
		return &piece{kind: kindMessage, msg: m, size: textBytes(m)}, nil
	case "reasoning":
		var content []struct {
			Text string `json:"text"`
		}
		json.Unmarshal(it.Content, &content) // content may be absent: then the summary
		texts := make([]string, 0, len(content))
		for _, p := range content {
			texts = append(texts, p.Text)
		}
		if len(texts) == 0 {
			for _, p := range it.Summary {
				texts = append(texts, p.Text)
			}
		}
		p := &piece{kind: kindReasoning, reasoning: strings.Join(texts, "\n"), texts: len(texts) > 0}
		p.size = len(p.reasoning) + 1 // and the newline that joins it to the next
		return p, nil
	case "additional_tools":
		p := &piece{kind: kindTools, tools: it.Tools}
		for _, tool := range it.Tools {
			p.size += len(tool)
		}
		return p, nil
	case "item_reference":
		if !refs {
			return nil, invalid(param, "'%s': a referenced item is itself an item_reference", param)
		}
		return b.resolve(it.ID, param)
	case "":
		return nil, invalid(param+".type", "'%s.type' is missing", param)
	}
	return nil, invalid(param+".type", "input item type %q is not supported (corral reads message, function_call, function_call_output, reasoning and item_reference items)", it.Type)
}

// resolve returns the piece of the stored item id that param refers to:
// looked up and parsed the first time, its stored JSON counted against
// the budget before it is parsed.
func (b *inputBuilder) resolve(id, param string) (*piece, *Error) {
	if p := b.refs[id]; p != nil {
		return p, nil
	}
	if b.prior == nil {
		return nil, notFound(param+".id", "Item", id)
	}
	raw, err := b.prior.Item(id)
	if err != nil {
		return nil, notFound(param+".id", "Item", id)
	}
	if e := b.budget.read(param, id, len(raw)); e != nil {
		return nil, e
	}
	p, e := b.read(raw, param, false)
	if e != nil {
		return nil, e
	}
	if b.refs == nil {
		b.refs = map[string]*piece{}
	}
	b.refs[id] = p
	return p, nil
}

// apply adds a piece that param gave, counting its text first.
func (b *inputBuilder) apply(p *piece, param string) *Error {
	if e := b.budget.expand(param, 0, p.size); e != nil {
		return e
	}
	switch p.kind {
	case kindMessage:
		if p.msg.Role == "assistant" {
			return b.assistant(p.msg, param)
		}
		return b.add(p.msg, param)
	case kindCall:
		if b.open >= 0 && !b.pending {
			m := &b.t.Messages[b.open]
			m.ToolCalls = append(m.ToolCalls, p.call)
			return nil
		}
		return b.assistant(chat.Message{Role: "assistant", ToolCalls: []wire.ToolCall{p.call}}, param)
	case kindReasoning:
		if p.texts {
			b.reasoning = append(b.reasoning, p.reasoning)
		}
		b.pending = true
	case kindTools:
		for j, tool := range p.tools {
			if e := b.tools.add(tool, fmt.Sprintf("%s.tools[%d]", param, j), ""); e != nil {
				return e
			}
		}
	}
	return nil
}

// takeReasoning returns the pending reasoning, joined, and clears it.
func (b *inputBuilder) takeReasoning() string {
	r := strings.Join(b.reasoning, "\n")
	b.reasoning, b.pending = nil, false
	return r
}

// push adds a message that param gave, counting it first.
func (b *inputBuilder) push(m chat.Message, param string) *Error {
	if e := b.budget.expand(param, 1, 0); e != nil {
		return e
	}
	b.t.Messages = append(b.t.Messages, m)
	return nil
}

// flush adds pending reasoning as an assistant message of its own.
func (b *inputBuilder) flush(param string) *Error {
	if !b.pending {
		return nil
	}
	return b.push(chat.Message{Role: "assistant", ReasoningContent: b.takeReasoning()}, param)
}

// assistant adds an assistant message, taking the pending reasoning; the
// function calls that follow join it.
func (b *inputBuilder) assistant(m chat.Message, param string) *Error {
	if b.pending {
		m.ReasoningContent = b.takeReasoning()
	}
	if e := b.push(m, param); e != nil {
		return e
	}
	b.open = len(b.t.Messages) - 1
	return nil
}

// add adds a message of another role. Reasoning left pending before it
// becomes an assistant message of its own.
func (b *inputBuilder) add(m chat.Message, param string) *Error {
	if e := b.flush(param); e != nil {
		return e
	}
	b.open = -1
	return b.push(m, param)
}

// textParts are the content part types read as text.
var textParts = []string{"input_text", "output_text", "text", "refusal"}

// part is a piece of a content: text, or a medium (an index into
// Translation.Media; -1 for text).
type part struct {
	text   string
	medium int
}

// contentPart is the union of the content parts corral reads.
type contentPart struct {
	Type       string  `json:"type"`
	Text       *string `json:"text"`
	Refusal    *string `json:"refusal"`
	ImageURL   *string `json:"image_url"`
	FileID     *string `json:"file_id"`
	InputAudio *struct {
		Data   *string `json:"data"`
		Format string  `json:"format"`
	} `json:"input_audio"`
}

// parts reads content parts: text (input_text, output_text, refusal),
// images (input_image, its image_url a base64 data URL or an http(s)
// URL, see serving.Limits.ImageURL; detail is ignored) and sounds (input_audio), each medium added to t.Media;
// param names the content. A file (input_file, an image's file_id) is
// refused: corral has no Files API.
func (t *Translation) parts(raw json.RawMessage, param string) ([]part, *Error) {
	var ps []json.RawMessage
	if err := json.Unmarshal(raw, &ps); err != nil {
		return nil, invalid(param, "'%s' must be a string or an array of content parts", param)
	}
	out := make([]part, 0, len(ps))
	for i, raw := range ps {
		pp := fmt.Sprintf("%s[%d]", param, i)
		var p contentPart
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, invalid(pp, "'%s' must be a content part object", pp)
		}
		switch {
		case p.Type == "input_image":
			switch {
			case p.FileID != nil && *p.FileID != "":
				return nil, invalid(pp+".file_id", "'%s.file_id': files are not supported (corral has no Files API): send the image in 'image_url' as a base64 data URL (data:image/png;base64,...)", pp)
			case p.ImageURL == nil || *p.ImageURL == "":
				return nil, invalid(pp+".image_url", "'%s.image_url' is missing", pp)
			}
			out = append(out, t.medium(serving.MediaSource{Param: pp + ".image_url", Kind: media.KindImage, URL: *p.ImageURL}))
			continue
		case p.Type == "input_audio":
			if p.InputAudio == nil || p.InputAudio.Data == nil {
				return nil, invalid(pp+".input_audio.data", "'%s.input_audio.data' is missing", pp)
			}
			out = append(out, t.medium(serving.MediaSource{Param: pp + ".input_audio.data", Kind: media.KindAudio, Base64: *p.InputAudio.Data, Type: p.InputAudio.Format}))
			continue
		case p.Type == "input_file":
			return nil, invalid(pp+".type", "content part type \"input_file\" is not supported (corral reads no files): send a file's text as input_text, its pages as input_image")
		case !slices.Contains(textParts, p.Type):
			return nil, invalid(pp+".type", "content part type %q is not supported (corral reads input_text, output_text, input_image and input_audio)", p.Type)
		}
		switch {
		case p.Text != nil:
			out = append(out, part{text: *p.Text, medium: -1})
		case p.Refusal != nil:
			out = append(out, part{text: *p.Refusal, medium: -1})
		default:
			return nil, invalid(pp+".text", "'%s.text' is missing", pp)
		}
	}
	return out, nil
}

// medium adds m to t.Media and returns its part.
func (t *Translation) medium(m serving.MediaSource) part {
	t.Media = append(t.Media, m)
	return part{medium: len(t.Media) - 1}
}

// hasMedia reports whether ps has a medium.
func hasMedia(ps []part) bool {
	return slices.ContainsFunc(ps, func(p part) bool { return p.medium >= 0 })
}

// mediaContent is the content of parts with a medium: text parts and
// chat.MediaPart's, which chat.Message.Text joins by newlines, with none
// on either side of a medium, as llama.cpp joins them.
func mediaContent(ps []part) json.RawMessage {
	raw := make([]json.RawMessage, len(ps))
	for i, p := range ps {
		if p.medium >= 0 {
			raw[i] = chat.MediaPart(p.medium)
		} else {
			raw[i] = textPart(p.text)
		}
	}
	b, _ := json.Marshal(raw) // valid JSON parts: cannot fail
	return b
}

// textPart is a text content part.
func textPart(s string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"type": "text", "text": s}) // strings: cannot fail
	return b
}

// messageContent reads a message's content into chat's shape: a string as
// it is, one text part as a string, several parts, or any with a medium,
// as parts.
func (t *Translation) messageContent(raw json.RawMessage, param string) (json.RawMessage, *Error) {
	if isNull(raw) {
		return nil, invalid(param, "'%s' is missing", param)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return jsonString(s), nil
	}
	ps, e := t.parts(raw, param)
	if e != nil {
		return nil, e
	}
	switch {
	case hasMedia(ps):
		return mediaContent(ps), nil
	case len(ps) == 1:
		return jsonString(ps[0].text), nil
	}
	out := make([]map[string]string, len(ps))
	for i, p := range ps {
		out[i] = map[string]string{"type": "text", "text": p.text}
	}
	b, _ := json.Marshal(out) // strings only: cannot fail
	return b, nil
}

// callOutput reads a function_call_output's output into chat's shape: a
// string, or text parts joined by newlines; with an image (a tool's
// screenshot), parts.
func (t *Translation) callOutput(raw json.RawMessage, param string) (json.RawMessage, *Error) {
	if isNull(raw) {
		return nil, invalid(param, "'%s' is missing", param)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return jsonString(s), nil
	}
	ps, e := t.parts(raw, param)
	if e != nil {
		return nil, e
	}
	if hasMedia(ps) {
		return mediaContent(ps), nil
	}
	texts := make([]string, len(ps))
	for i, p := range ps {
		texts[i] = p.text
	}
	return jsonString(strings.Join(texts, "\n")), nil
}

// storedMedia reads back the media of a stored conversation (Record
// keeps each as the input_image or input_audio part it came as): each
// becomes a medium of t.Media, and its part the medium's. The messages
// without media are msgs' own; the others are copies.
func (t *Translation) storedMedia(msgs []chat.Message) ([]chat.Message, *Error) {
	var out []chat.Message
	for i, m := range msgs {
		c := bytes.TrimSpace(m.Content)
		if len(c) == 0 || c[0] != '[' || !bytes.Contains(c, []byte(`"input_image"`)) && !bytes.Contains(c, []byte(`"input_audio"`)) {
			continue
		}
		ps, e := t.parts(c, fmt.Sprintf("previous_response_id.messages[%d].content", i))
		if e != nil {
			return nil, e
		}
		if out == nil {
			out = slices.Clone(msgs)
		}
		out[i].Content = mediaContent(ps)
	}
	if out == nil {
		return msgs, nil
	}
	return out, nil
}

// storable is m as a stored conversation keeps it: each medium's part
// (chat.MediaPart, whose marker holds a nonce of this process) back to
// the input_image or input_audio part it came as (media are t.Media),
// which storedMedia reads back.
func storable(m chat.Message, media []serving.MediaSource) chat.Message {
	c := bytes.TrimSpace(m.Content)
	if len(c) == 0 || c[0] != '[' || !bytes.Contains(c, []byte(`"media_marker"`)) {
		return m
	}
	var ps []json.RawMessage
	if json.Unmarshal(c, &ps) != nil {
		return m
	}
	for i, raw := range ps {
		var p struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(raw, &p) != nil || p.Type != "media_marker" {
			continue
		}
		marks := chat.FindMediaMarkers(p.Text)
		if len(marks) != 1 || marks[0].Index >= len(media) {
			continue
		}
		src := media[marks[0].Index]
		var v any
		if src.URL != "" {
			v = map[string]string{"type": "input_image", "image_url": src.URL}
		} else {
			v = map[string]any{"type": "input_audio", "input_audio": map[string]string{"data": src.Base64, "format": src.Type}}
		}
		ps[i], _ = json.Marshal(v) // strings: cannot fail
	}
	b, _ := json.Marshal(ps) // valid JSON parts: cannot fail
	m.Content = b
	return m
}

// jsonString is s as a JSON string.
func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s) // a string: cannot fail
	return b
}

// errNotFound wraps ErrNotFound with what was not found.
func errNotFound(what, id string) error { return fmt.Errorf("%s %q: %w", what, id, ErrNotFound) }
