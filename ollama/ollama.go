// Package ollama serves Ollama's API
// (https://github.com/ollama/ollama/blob/main/docs/api.md, as of
// APIVersion), for the tools that speak it, on package serving's core: /api/chat and
// /api/generate generate, /api/tags, /api/ps and /api/show describe the
// models, /api/version names the API version. Streams are NDJSON, on by
// default; errors are {"error": message} with the HTTP status. Where
// corral differs from Ollama:
//
//   - Sampling options share the other endpoints' validation and defaults
//     (llama-server's: top_p 0.95, min_p 0.05, no repeat penalty), not
//     Ollama's (top_p 0.9, repeat_penalty 1.1); "options" also take
//     corral's ignore_eos and logit_bias. Load-time options (num_ctx,
//     num_gpu, num_thread, ...) are ignored: an engine is configured when
//     its model loads. num_predict -1, -2 and 0 all mean "until the slot's
//     context is full" (corral does not shift the context).
//   - "images" (base64 strings) go where Ollama puts them: a message's (or
//     /api/generate's prompt's) at its "[img]"s in turn, the others before
//     its content; a raw prompt's at its "[img-N]" tags, an image no tag
//     places at its start (Ollama leaves it out), a tag of no image a 400.
//     A model without a projector answers 400.
//   - "suffix" and "template" are refused (400): corral has no
//     fill-in-the-middle, and renders prompts with the model's Jinja chat
//     template. "think" sets the chat template's
//     enable_thinking, thinking or reasoning_effort, whichever it reads;
//     the reasoning of a model whose template has a reasoning format
//     corral knows comes apart, in "thinking", unless --reasoning-format
//     is none. The deprecated "context" is ignored: no "context" is
//     returned either, since the engine keeps the tokens of a
//     conversation only for paced requests.
//   - /api/chat takes corral's "tool_choice" and "parallel_tool_calls"
//     (OpenAI's shapes: "none", "auto", "required", a named function),
//     since Ollama's API has no way to force a call.
//   - A tool's function name is 1 to 128 letters, digits, '_' or '-'
//     (toolName), else 400. Ollama checks no name; corral takes the
//     widest rule of the dialects it speaks (Anthropic's), which every
//     tool-call format it reads writes and parses back, rather than
//     accept a name whose calls the model's format cannot carry (a
//     space, a quote or an angle bracket ends a name in most of them).
//   - A request without "model" is served by the default model, as on the
//     other endpoints.
//   - prompt_eval_count counts the whole prompt, cached or not, as Ollama
//     does; prompt_eval_duration is the time spent evaluating what was not
//     cached. load_duration is the time spent getting the model, loading
//     it if need be.
//   - done_reason is "stop" or "length"; corral's other finish reasons end
//     in an error ({"error"} line or status) except the paced ones, which
//     these endpoints never start.
package ollama

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/media"
	"github.com/corral-llm/corral/openai"
	"github.com/corral-llm/corral/registry"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

var _ serving.MediaBody = (*ollamaParams)(nil)

// ollamaParams are the fields /api/generate and /api/chat share.
type ollamaParams struct {
	Model string `json:"model"`
	// Stream is true when absent, as in Ollama.
	Stream    *bool              `json:"stream"`
	Format    json.RawMessage    `json:"format"`
	KeepAlive *serving.KeepAlive `json:"keep_alive"`
	Options   json.RawMessage    `json:"options"`
	// Priority is the request's class, as on the other endpoints
	// (corral's extension).
	Priority *int `json:"priority"`
	// Think (true, false, "low", "medium" or "high") sets the template
	// variables of thinking models (see thinkVars).
	Think json.RawMessage `json:"think"`
	// req is the request translated by Check; media are its images
	// (Check), which CheckMedia decodes into req.Media.
	req   serving.Request
	media []serving.MediaSource
	// mediaParam names the field of all the images ("images",
	// "messages").
	mediaParam string
}

// CheckMedia decodes the request's images within lim, before the model
// is leased.
func (p *ollamaParams) CheckMedia(ctx context.Context, lim *serving.Limits) *serving.Error {
	var e *serving.Error
	p.req.Media, e = lim.DecodeMedia(ctx, p.media, p.mediaParam)
	return e
}

// Media returns the images CheckMedia decoded.
func (p *ollamaParams) Media() []engine.Media { return p.req.Media }

func (p *ollamaParams) stream() bool { return p.Stream == nil || *p.Stream }

// ollamaGenerateRequest is the body of POST /api/generate.
type ollamaGenerateRequest struct {
	Prompt   string            `json:"prompt"`
	System   string            `json:"system"`
	Raw      bool              `json:"raw"`
	Template string            `json:"template"`
	Suffix   string            `json:"suffix"`
	Images   []json.RawMessage `json:"images"`
	ollamaParams
}

// ollamaChatRequest is the body of POST /api/chat.
type ollamaChatRequest struct {
	Messages []ollamaMessage `json:"messages"`
	// ToolFields are the tools, and corral's extension: OpenAI's
	// tool_choice and parallel_tool_calls, which Ollama's API lacks.
	openai.ToolFields
	ollamaParams
}

// ollamaMessage is a chat message in Ollama's shape: its "thinking" is
// the reasoning an assistant's message carries (sent back to the
// template, returned apart from the content).
type ollamaMessage struct {
	Role       string            `json:"role"`
	Content    string            `json:"content"`
	Thinking   string            `json:"thinking,omitempty"`
	Images     []json.RawMessage `json:"images,omitempty"`
	ToolCalls  []ollamaToolCall  `json:"tool_calls,omitempty"`
	ToolName   string            `json:"tool_name,omitempty"`
	ToolCallID string            `json:"tool_call_id,omitempty"`
}

// ollamaToolCall is an assistant's call of a tool; unlike OpenAI's, its
// arguments are a JSON object, not JSON text.
type ollamaToolCall struct {
	ID       string `json:"id,omitempty"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// ollamaOptions are the "options" corral applies: num_predict, the
// reasoning budget and the sampling fields of the other endpoints.
type ollamaOptions struct {
	NumPredict *int `json:"num_predict"`
	openai.ReasoningParams
	openai.SamplingParams
}

// Generate serves Ollama's POST /api/generate. An empty prompt
// loads the model (with keep_alive 0: unloads it) and generates nothing.
func Generate(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	serving.Handle(c, w, r, WriteError, false, func(x *serving.Exchange, body *ollamaGenerateRequest) *serving.Error {
		return serveOllama(x, body, false)
	})
}

// Chat serves Ollama's POST /api/chat. Empty messages load the model
// (with keep_alive 0: unload it) and generate nothing.
func Chat(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	serving.Handle(c, w, r, WriteError, false, func(x *serving.Exchange, body *ollamaChatRequest) *serving.Error {
		return serveOllama(x, body, true)
	})
}

// ollamaBody is the body of /api/generate or /api/chat.
type ollamaBody interface {
	params() *ollamaParams
	// empty reports a request with nothing to generate (load or unload).
	empty() bool
	// check refuses what corral does not serve, whatever the model;
	// translate makes the request of a body check passed.
	check(lim *serving.Limits) *serving.Error
	translate(lim *serving.Limits) (serving.Request, *serving.Error)
}

// serveOllama answers body, its refusals checked and translated (so that
// a request turned away whatever the model does not load one, and evict
// others) and its model leased, unless it has nothing to generate.
func serveOllama(x *serving.Exchange, body ollamaBody, isChat bool) *serving.Error {
	p := body.params()
	if body.empty() {
		return ollamaLoad(x, p, isChat)
	}
	req, g, e := x.Core.Build(x.Model, &p.req)
	if e != nil {
		return e
	}
	f := &ollamaEncoder{model: ollamaResponseName(p.Model, x.Lease.ID()), chat: isChat, start: x.Start, load: x.LoadTime, now: time.Now, reads: g.Plan.Reads()}
	g.Framing = serving.NDJSON
	return x.Core.Generate(x, req, g, f)
}

func (body *ollamaGenerateRequest) params() *ollamaParams { return &body.ollamaParams }
func (body *ollamaGenerateRequest) empty() bool           { return body.Prompt == "" }
func (body *ollamaChatRequest) params() *ollamaParams     { return &body.ollamaParams }
func (body *ollamaChatRequest) empty() bool               { return len(body.Messages) == 0 }

// Lease names the model and the keep_alive the request asks; a request
// with nothing to generate leases it itself (see ollamaLoad).
func (body *ollamaGenerateRequest) Lease() (string, *serving.KeepAlive, bool) {
	return body.Model, body.KeepAlive, !body.empty()
}

// Lease names the model and the keep_alive the request asks; a request
// with nothing to generate leases it itself (see ollamaLoad).
func (body *ollamaChatRequest) Lease() (string, *serving.KeepAlive, bool) {
	return body.Model, body.KeepAlive, !body.empty()
}

// ModelError words e as Ollama does when the model p names is unknown.
func (p *ollamaParams) ModelError(e *serving.Error) *serving.Error {
	return ollamaModelError(e, p.Model)
}

// ollamaLoad answers a request with nothing to generate: it loads the
// model ("done_reason": "load"), or with keep_alive 0 unloads it once no
// request holds it ("unload"; a model that is not loaded is not loaded
// for that, one still loading is unloaded once loaded).
func ollamaLoad(x *serving.Exchange, p *ollamaParams, isChat bool) *serving.Error {
	f := &ollamaEncoder{chat: isChat, now: time.Now}
	reason := "load"
	if p.KeepAlive != nil && p.KeepAlive.Duration == 0 {
		reason = "unload"
		st, e := x.Core.Status(p.Model)
		if e != nil {
			return p.ModelError(e)
		}
		if st.State == registry.StateUnloaded || st.State == registry.StateUnloading {
			f.model = ollamaResponseName(p.Model, st.ID)
			serving.WriteJSON(x.W, http.StatusOK, f.object("", "", true, reason, ollamaMetrics{}))
			return nil
		}
	}
	// A lease with keep-alive 0 unloads the model when it is given back.
	l, e := x.Core.Acquire(x.Context(), p.Model, p.KeepAlive)
	if e != nil {
		return p.ModelError(e)
	}
	f.model = ollamaResponseName(p.Model, l.ID())
	l.Release()
	serving.WriteJSON(x.W, http.StatusOK, f.object("", "", true, reason, ollamaMetrics{}))
	return nil
}

// Check refuses what corral does not serve, whatever the model, and
// translates the request (checkBody).
func (body *ollamaGenerateRequest) Check(lim *serving.Limits) *serving.Error {
	return checkBody(body, lim)
}

// Check refuses what corral does not serve, whatever the model, and
// translates the request (checkBody).
func (body *ollamaChatRequest) Check(lim *serving.Limits) *serving.Error { return checkBody(body, lim) }

// checkBody refuses what corral does not serve in body, whatever the
// model, and translates it; nothing when there is nothing to generate.
func checkBody(body ollamaBody, lim *serving.Limits) *serving.Error {
	if body.empty() {
		return nil
	}
	if e := body.check(lim); e != nil {
		return e
	}
	var e *serving.Error
	body.params().req, e = body.translate(lim)
	return e
}

// check refuses what corral does not serve, whatever the model.
func (body *ollamaGenerateRequest) check(lim *serving.Limits) *serving.Error {
	if e := lim.CheckPrompt(body.Prompt, "prompt"); e != nil {
		return e
	}
	switch {
	case body.Suffix != "":
		return serving.Invalid("suffix", "'suffix' (fill-in-the-middle) is not supported")
	case body.Template != "":
		return serving.Invalid("template", "'template' is not supported: prompts are rendered with the model's chat template")
	case body.Raw && body.System != "":
		return serving.Invalid("system", "raw mode does not support 'system'")
	}
	return nil
}

// toolName is the rule for a tool's function name on /api/chat (see the
// package doc): Anthropic's, the widest of the dialects corral speaks.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)

// check refuses what corral does not serve, whatever the model.
func (body *ollamaChatRequest) check(lim *serving.Limits) *serving.Error {
	if len(body.Messages) > lim.MaxMessages {
		return serving.OverLimit("messages", "max-messages", lim.MaxMessages, "messages", "'messages' has %d messages", len(body.Messages))
	}
	if e := lim.CheckTools(body.Tools); e != nil {
		return e
	}
	for i, t := range body.Tools {
		if !toolName.MatchString(t.Function.Name) {
			return serving.Invalid("tools", "tool %d: the function's name must be 1 to 128 letters, digits, '_' or '-', got %q", i, t.Function.Name)
		}
	}
	return nil
}

// translate validates an /api/generate request with a prompt (check
// passed) and translates it: the prompt as it is when raw, else a user
// message after the system one, for the chat template.
func (body *ollamaGenerateRequest) translate(lim *serving.Limits) (serving.Request, *serving.Error) {
	r, e := body.ollamaParams.translate(lim, "prompt")
	if e != nil {
		return r, e
	}
	body.mediaParam = "images"
	if body.media, e = imageSources(nil, body.Images, "images"); e != nil {
		return r, e
	}
	if body.Raw {
		text, e := rawImages(body.Prompt, len(body.Images))
		if e != nil {
			return r, e
		}
		r.Prompt, r.ReadPrompt = &serving.Prompt{Text: text}, true
		return r, nil
	}
	if body.System != "" {
		r.Messages = append(r.Messages, chat.Message{Role: "system", Content: jsonString(body.System)})
	}
	r.Messages = append(r.Messages, chat.Message{Role: "user", Content: withImages(body.Prompt, 0, len(body.Images))})
	return r, nil
}

// translate validates an /api/chat request with messages (check passed)
// and translates it. Ollama has no tool_choice: without corral's, the
// model sees the tools and its calls are read when the request has
// tools (tool_choice "auto").
func (body *ollamaChatRequest) translate(lim *serving.Limits) (serving.Request, *serving.Error) {
	r, e := body.ollamaParams.translate(lim, "messages")
	if e != nil {
		return r, e
	}
	r.Tools.Defined = body.Tools
	if r.Tools.Choice, e = body.ToolFields.Choice(lim); e != nil {
		return r, e
	}
	r.Messages = make([]chat.Message, len(body.Messages))
	body.mediaParam = "messages"
	for i, om := range body.Messages {
		first := len(body.media)
		if body.media, e = imageSources(body.media, om.Images, fmt.Sprintf("messages[%d].images", i)); e != nil {
			return r, e
		}
		r.Messages[i] = chat.Message{Role: strings.ToLower(om.Role), Content: withImages(om.Content, first, len(om.Images)), Name: om.ToolName, ToolCallID: om.ToolCallID,
			ReasoningContent: om.Thinking}
		for _, tc := range om.ToolCalls {
			var call wire.ToolCall
			call.ID, call.Type, call.Function.Name = tc.ID, "function", tc.Function.Name
			call.Function.Arguments = "{}"
			if !serving.IsNull(tc.Function.Arguments) {
				call.Function.Arguments = string(tc.Function.Arguments)
			}
			r.Messages[i].ToolCalls = append(r.Messages[i].ToolCalls, call)
		}
	}
	return r, nil
}

// imageSources appends to dst the images of "images" (param names it):
// base64 strings, as Ollama's client sends them.
func imageSources(dst []serving.MediaSource, images []json.RawMessage, param string) ([]serving.MediaSource, *serving.Error) {
	for j, raw := range images {
		p := fmt.Sprintf("%s[%d]", param, j)
		var b64 string
		if err := json.Unmarshal(raw, &b64); err != nil {
			return dst, serving.Invalid(p, "'%s' must be a string: an image in base64", p)
		}
		if len(b64) > 5 && strings.EqualFold(b64[:5], "data:") {
			return dst, serving.Invalid(p, "'%s' is a data URL: send the image's base64 alone, without the data:...;base64, prefix", p)
		}
		dst = append(dst, serving.MediaSource{Param: p, Kind: media.KindImage, Base64: b64})
	}
	return dst, nil
}

// imageTag is where Ollama's prompts put the next of a message's
// images.
const imageTag = "[img]"

// withImages is a message's content with its n images, the request's
// media first to first+n-1, where Ollama puts them (server/prompt.go,
// chatPrompt): each at the next "[img]" of the content, those left before
// the content. Ollama writes "[img-N]" tags that its runner finds in the
// rendered prompt; corral puts the media's content parts
// (chat.MediaPart), which no client text can spell. Without images it is
// the content as it is.
func withImages(content string, first, n int) json.RawMessage {
	if n == 0 {
		return jsonString(content)
	}
	var before, parts []json.RawMessage
	rest := content
	for k := first; k < first+n; k++ {
		i := strings.Index(rest, imageTag)
		if i < 0 {
			before = append(before, chat.MediaPart(k))
			continue
		}
		if i > 0 {
			parts = append(parts, textPart(rest[:i]))
		}
		parts = append(parts, chat.MediaPart(k))
		rest = rest[i+len(imageTag):]
	}
	if rest != "" {
		parts = append(parts, textPart(rest))
	}
	b, _ := json.Marshal(append(before, parts...)) // valid JSON parts: cannot fail
	return b
}

// textPart is a text content part.
func textPart(s string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"type": "text", "text": s}) // strings: cannot fail
	return b
}

// rawTag is an image's tag in a raw prompt, "[img-N]" for images[N], as
// Ollama's runner reads them.
var rawTag = regexp.MustCompile(`\[img-([0-9]+)\]`)

// rawImages is a raw prompt with n images: each "[img-N]" tag of
// images[N] replaced by its media marker (chat.MediaMarker(N)), as
// Ollama's runner splits the prompt at the tags; a tag of no image is a
// 400. An image no tag places goes at the start of the prompt (Ollama
// leaves it out). Without images the prompt is as it is.
func rawImages(prompt string, n int) (string, *serving.Error) {
	if n == 0 {
		return prompt, nil
	}
	placed := make([]bool, n)
	var bad *serving.Error
	text := rawTag.ReplaceAllStringFunc(prompt, func(tag string) string {
		k, err := strconv.Atoi(tag[len("[img-") : len(tag)-1])
		if err != nil || k >= n {
			if bad == nil {
				bad = serving.Invalid("prompt", "'prompt' has the tag %s, but 'images' has %d images ([img-0] to [img-%d])", tag, n, n-1)
			}
			return tag
		}
		placed[k] = true
		return chat.MediaMarker(k)
	})
	if bad != nil {
		return "", bad
	}
	var b strings.Builder
	for k, ok := range placed {
		if !ok {
			b.WriteString(chat.MediaMarker(k))
		}
	}
	return b.String() + text, nil
}

// translate validates the options, format and think of p within lim
// and translates them, less the prompt or messages; promptParam names
// the request's prompt field.
func (p *ollamaParams) translate(lim *serving.Limits, promptParam string) (serving.Request, *serving.Error) {
	r := serving.Request{Priority: p.Priority, Stream: p.stream(),
		Params: serving.Params{Prompt: promptParam, Grammar: "format", Logprobs: "logprobs"}}
	var o ollamaOptions
	if !serving.IsNull(p.Options) {
		if b := bytes.TrimSpace(p.Options); b[0] != '{' {
			return r, serving.Invalid("options", "'options' must be an object")
		}
		if e := serving.DecodeJSON(p.Options, &o); e != nil {
			e.Message = "options: " + e.Message
			return r, e
		}
	}
	if o.NumPredict != nil {
		switch n := *o.NumPredict; {
		case n > 0:
			r.MaxTokens = n
		case n < -2:
			return r, serving.Invalid("num_predict", "'num_predict' must be -1 or -2 (until the context is full) or >= 1, got %d", n)
		}
	}
	r.IgnoreEOS = o.IgnoreEOS
	var e *serving.Error
	if r.Sampling, e = o.Sampling(); e != nil {
		return r, e
	}
	if r.Stop, e = serving.ParseStop(o.Stop); e != nil {
		return r, e
	}
	if r.Grammar, e = formatGrammar(p.Format, lim); e != nil {
		return r, e
	}
	if r.ReasoningBudget, e = o.ReasoningParams.Budget(); e != nil {
		return r, e
	}
	if r.Vars, e = thinkVars(p.Think); e != nil {
		return r, e
	}
	return r, nil
}

// formatGrammar returns the grammar that enforces Ollama's "format":
// "json" (any JSON object) or a JSON schema within lim; "" for plain
// text.
func formatGrammar(raw json.RawMessage, lim *serving.Limits) (string, *serving.Error) {
	if serving.IsNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "":
			return "", nil
		case "json":
			return lim.JSONObjectGrammar(), nil
		}
		return "", serving.Invalid("format", "'format' must be \"json\" or a JSON schema, got %q", s)
	}
	if bytes.TrimSpace(raw)[0] != '{' {
		return "", serving.Invalid("format", "'format' must be \"json\" or a JSON schema object")
	}
	return serving.SchemaGrammar(raw, "format", lim)
}

// jsonString is s as a JSON string, for chat.Message.Content.
func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}

// thinkVars are the template variables "think" (true, false, "low",
// "medium" or "high") sets: whether to think, on where a level is given,
// and the level as reasoning_effort (see serving.TemplateKwargs).
func thinkVars(think json.RawMessage) (serving.TemplateVars, *serving.Error) {
	var v serving.TemplateVars
	if serving.IsNull(think) {
		return v, nil
	}
	var on bool
	if json.Unmarshal(think, &on) != nil {
		var level string
		if json.Unmarshal(think, &level) != nil || !slices.Contains([]string{"low", "medium", "high"}, level) {
			return v, serving.Invalid("think", "'think' must be true, false, \"low\", \"medium\" or \"high\"")
		}
		on, v.ReasoningEffort = true, level
	}
	v.Thinking = &on
	return v, nil
}
