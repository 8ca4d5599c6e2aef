package serving

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/reasoning"
	"github.com/corral-llm/corral/toolcall"
	"github.com/corral-llm/corral/wire"
)

// Repairing a tool call. In tool_choice "auto" nothing forces the model's
// answer, and a model sometimes writes call markup that does not parse,
// calls a function it was not offered, or writes arguments that break the
// function's parameters schema. Rather than give that back (the markup
// as content, or the bad arguments as a call), a whole answer's first
// such call is written again from where its markup began: the prompt is
// the request's prompt and the answer up to there (which the engine's
// prefix cache holds, so only the new tokens cost anything), under the
// grammar of one call in the model's own tool-call format (of the named
// function when the call named one it was offered). The repaired call
// replaces the failed one and whatever followed it. A repair that fails
// too is tried again, up to Options.ToolRepair times; then the answer is
// given back as the model first wrote it.
//
// A streamed answer holds its calls back until they pass the same checks
// and is repaired the same way at its end (see streamrepair.go).

// DefaultToolRepair is how many times a failed tool call is written again
// when Options.ToolRepair is 0.
const DefaultToolRepair = 1

// ValidCall reports whether a call of name with arguments args calls one
// of tools with arguments that satisfy its parameters' schema: the check
// a repaired call passes.
func ValidCall(tools []wire.Tool, name, args string) bool {
	var v argValidator
	t := findTool(tools, name)
	return t != nil && v.valid(t, args)
}

// failedCall finds the first call of a whole answer that needs repair:
// markup that was not a call, a call of a function not among the plan's
// tools, or arguments that break the function's schema (markup after
// the last call kept, with parallel calls off, is dropped anyway and
// needs none). It returns where
// in text the call's markup began and the function it named (nil when
// none of the tools), ok false when every call is sound (or the format
// cannot tell where its calls lie).
func failedCall(p model.Plan, text string, v *argValidator) (at int, named *wire.Tool, ok bool) {
	if p.Tools == nil {
		return 0, nil, false
	}
	content := text
	if p.Think != nil {
		_, content = reasoning.Split(p.Think, p.Opened, text)
		if !strings.HasSuffix(text, content) {
			return 0, nil, false // the content is not where the offsets can find it
		}
	}
	base := len(text) - len(content)
	r, ok := toolcall.ParseRegions(p.Tools, p.Defs, content, p.Max, false)
	if !ok {
		return 0, nil, false
	}
	at = r.Failed
	if p.Max > 0 && len(r.Calls) >= p.Max && at > r.Starts[len(r.Starts)-1] {
		at = -1 // after the last call kept: dropped anyway
	}
	for i, c := range r.Calls {
		if at >= 0 && r.Starts[i] >= at {
			break
		}
		t := findTool(p.Defs, c.Function.Name)
		if t == nil || !v.valid(t, c.Function.Arguments) {
			at, named = r.Starts[i], t
			break
		}
	}
	if at < 0 {
		return 0, nil, false
	}
	return base + at, named, true
}

// findTool returns the tool named name, nil when none is.
func findTool(tools []wire.Tool, name string) *wire.Tool {
	for i := range tools {
		if tools[i].Function.Name == name {
			return &tools[i]
		}
	}
	return nil
}

// argValidator checks calls' arguments against their functions' schemas,
// compiling each schema once per request. A schema it cannot compile
// passes every object: the call is given back as it is.
type argValidator struct {
	schemas map[string]*jsonschema.Schema
}

// valid reports whether args is a JSON object that follows t's
// parameters schema.
func (v *argValidator) valid(t *wire.Tool, args string) bool {
	var obj map[string]any
	if json.Unmarshal([]byte(args), &obj) != nil {
		return false
	}
	name := t.Function.Name
	s, seen := v.schemas[name]
	if !seen {
		s = compileSchema(t.Function.Parameters)
		if v.schemas == nil {
			v.schemas = map[string]*jsonschema.Schema{}
		}
		v.schemas[name] = s
	}
	if s == nil {
		return true
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(args))
	return err == nil && s.Validate(inst) == nil
}

// compileSchema compiles a function's parameters schema, nil when it has
// none or cannot be compiled. Nothing is loaded from outside the schema.
// Its size is bounded by Limits (checkTools) before it gets here.
func compileSchema(params json.RawMessage) *jsonschema.Schema {
	p := bytes.TrimSpace(params)
	if len(p) == 0 || bytes.Equal(p, []byte("null")) {
		return nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(p))
	if err != nil {
		return nil
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	const url = "urn:corral:parameters"
	if c.AddResource(url, doc) != nil {
		return nil
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil
	}
	return s
}

// repairCalls repairs the first failed call of a whole answer (text, res:
// the answer to req, which plan reads) when the API repairs calls, and
// returns the answer to give: the repaired one, or text and res as they
// were. res's usage then counts every token generated, repairs included.
// It gives up early when ctx ends.
func (c *Core) repairCalls(ctx context.Context, m *model.Model, req engine.Request, plan model.Plan, text string, res engine.Result, alive func() error) (string, engine.Result) {
	if c.toolRepair <= 0 || plan.Tools == nil || req.Logprobs || res.FinishReason != engine.FinishStop {
		return text, res
	}
	var v argValidator
	at, named, failed := failedCall(plan, text, &v)
	if !failed {
		return text, res
	}
	tools := plan.Defs
	if named != nil {
		tools = []wire.Tool{*named}
	}
	g, err := plan.Tools.Grammar(tools, false, c.limits.SchemaLimits())
	if err != nil {
		// A schema the grammar cannot express: the call stays as it is.
		c.log.Debug("tool call not repaired", "model", m.Info().Name, "err", err)
		return text, res
	}
	lost := false // alive failed
	check := alive
	if alive != nil {
		check = func() error {
			err := alive()
			lost = lost || err != nil
			return err
		}
	}
	total := res.Usage
	prefix := text[:at]
	repaired := false
	for try := 0; try < c.toolRepair && ctx.Err() == nil; try++ {
		next := req
		next.Prompt, next.Grammar, next.Reasoning = req.Prompt+prefix, g, nil
		if req.MaxTokens > 0 {
			if next.MaxTokens = req.MaxTokens - total.CompletionTokens; next.MaxTokens <= 0 {
				break
			}
		}
		out, r, ok := c.generateOnce(ctx, m, next, check)
		if lost {
			break // the client is gone, or does not read
		}
		total.CompletionTokens += r.Usage.CompletionTokens
		total.EvaluatedTokens += r.Usage.EvaluatedTokens
		total.ReevaluatedTokens += r.Usage.ReevaluatedTokens
		if !ok || r.FinishReason != engine.FinishStop {
			continue
		}
		if _, _, bad := failedCall(plan, prefix+out, &v); !bad {
			text, res.FinishReason, res.StopWord, repaired = prefix+out, r.FinishReason, r.StopWord, true
			break
		}
	}
	res.Usage = total
	outcome := "failed"
	if repaired {
		outcome = "repaired"
	}
	c.metrics.toolRepairs.WithLabelValues(m.Info().Name, outcome).Inc()
	return text, res
}

// generateOnce submits req and waits for its whole answer: its text and
// final result, ok false when it was not submitted, ctx ended first or
// alive failed. alive, when not nil, is called as each piece of the answer
// comes and whenever the stream's KeepAlive passes without one: a stream
// waiting for this answer pings its client (stream.alive). The engine
// request is recorded in the metrics like any other, but not in the
// request log (which is the client's request's).
func (c *Core) generateOnce(ctx context.Context, m *model.Model, req engine.Request, alive func() error) (string, engine.Result, bool) {
	s, err := m.Engine().Submit(ctx, req)
	if err != nil {
		return "", engine.Result{}, false
	}
	out := &outcome{core: c, ctx: ctx, m: m, s: s, unlogged: true}
	defer out.end()
	var text strings.Builder
	keepAlive := StreamConfigOf(ctx).KeepAlive
	for {
		ch, err := recvWithin(ctx, s, keepAlive)
		if err == io.EOF {
			break
		}
		if err != nil && err != errIdle {
			out.gone = true
			return "", engine.Result{}, false
		}
		text.WriteString(ch.Text)
		if alive != nil && alive() != nil {
			out.gone = true
			return "", engine.Result{}, false
		}
	}
	res := s.Result()
	out.final(res)
	return text.String(), res, true
}
