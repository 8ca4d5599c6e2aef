package serving

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/toolcall"
	"github.com/corral-llm/corral/wire"
)

// ToolMode is how a request lets the model call its tools.
type ToolMode string

// The tool modes.
const (
	// ToolsDefault is the mode of a request that names none: ToolsAuto
	// with tools, else ToolsNone.
	ToolsDefault ToolMode = ""
	// ToolsNone hides the tools: the model sees none and calls none.
	ToolsNone ToolMode = "none"
	// ToolsAuto shows the tools; the model calls them or answers.
	ToolsAuto ToolMode = "auto"
	// ToolsRequired forces the answer to be calls of the tools.
	ToolsRequired ToolMode = "required"
	// ToolsFunction forces the answer to be one call of the function
	// ToolChoice.Name.
	ToolsFunction ToolMode = "function"
)

// ToolChoice is how a request lets the model call its tools, in no
// dialect's words: each dialect reads its own field (OpenAI's
// tool_choice and parallel_tool_calls, Anthropic's tool_choice,
// Responses' tool_choice) into it once.
type ToolChoice struct {
	Mode ToolMode
	// Name is the function ToolsFunction forces.
	Name string
	// Allowed, when not nil, narrows the tools the model sees and may
	// call to these names, in this order (OpenAI's allowed_tools), in
	// ToolsAuto or ToolsRequired.
	Allowed []string
	// Single allows one call at most (OpenAI's parallel_tool_calls
	// false, Anthropic's disable_parallel_tool_use).
	Single bool
}

// describe is c as an error message quotes it.
func (c ToolChoice) describe() string {
	if c.Mode == ToolsFunction {
		return fmt.Sprintf("naming function %q", c.Name)
	}
	return fmt.Sprintf("%q", string(c.Mode))
}

// Tools are a chat request's tools and how the model may call them.
type Tools struct {
	Defined []wire.Tool
	Choice  ToolChoice
}

// ToolPlan is what a chat request's tools ask of its answer.
type ToolPlan struct {
	Render []wire.Tool // the tools the template shows the model
	// Parse: the answer is read for calls in Format (tool_choice other
	// than "none"), keeping at most Max of them (0: any).
	Parse  bool
	Format toolcall.Format
	Max    int
	// Grammar forces a call ("required" or a named function); "" for none.
	Grammar string
}

// ToolPlan checks the tool fields and decides how to answer them.
//
// tool_choice "none" hides the tools from the template and reads no
// calls; "auto" (the default with tools) shows them and reads the calls
// the model writes in the model's format; "required" and a named
// function also force the answer to be calls, with a grammar built from
// the tools' parameters schemas. OpenAI's allowed_tools narrows the tools
// to those it names, which the model then sees and calls in its mode
// ("auto" or "required"). parallel_tool_calls false allows one call: the
// grammar writes one, and in "auto" only the first call the model writes
// is kept.
//
// What a function's name may be is each dialect's rule (OpenAI's 64
// characters, Anthropic's 128), checked as it translates its body: the
// plan checks only what every dialect shares. A tool that is not a
// function, or whose parameters are not an object, is refused, and so is
// a function defined twice in tools; one named twice in allowed_tools is
// shown once. Counts are bounded by lim, and every
// lookup is by name in a map: the plan takes time linear in the request.
func PlanTools(m *model.Model, f *Tools, lim *Limits) (ToolPlan, *Error) {
	plan := ToolPlan{Format: m.ToolFormat()}
	if e := lim.CheckTools(f.Defined); e != nil {
		return plan, e
	}
	names := make(map[string]int, len(f.Defined)) // index in f.Defined by name
	for i, t := range f.Defined {
		param := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" {
			return plan, Invalid(param+".type", "'%s.type' must be \"function\", got %q", param, t.Type)
		}
		if _, ok := names[t.Function.Name]; ok {
			return plan, Invalid(param+".function.name", "tool %q is defined twice", t.Function.Name)
		}
		names[t.Function.Name] = i
		if p := bytes.TrimSpace(t.Function.Parameters); len(p) > 0 && p[0] != '{' && !bytes.Equal(p, []byte("null")) {
			return plan, Invalid(param+".function.parameters", "'%s.function.parameters' must be a JSON schema object", param)
		}
	}
	choice, named, allowed := f.Choice.Mode, f.Choice.Name, f.Choice.Allowed
	tools := f.Defined
	if allowed != nil {
		// allowed_tools: the model sees and may call only these, each
		// once, in the order they are named.
		tools = nil
		shown := make(map[string]bool, len(allowed))
		for _, name := range allowed {
			i, ok := names[name]
			if !ok {
				return plan, Invalid("tool_choice", "'tool_choice.allowed_tools' names function %q, which is not among 'tools'", name)
			}
			if !shown[name] {
				shown[name] = true
				tools = append(tools, f.Defined[i])
			}
		}
	}
	if choice == ToolsDefault {
		choice = ToolsNone
		if len(f.Defined) > 0 {
			choice = ToolsAuto
		}
	}
	switch {
	case len(tools) > 0:
	case choice == ToolsRequired || choice == ToolsFunction:
		return plan, Invalid("tool_choice", "'tool_choice' %s needs 'tools'", f.Choice.describe())
	default:
		choice = ToolsNone // "auto" with no tools: clients send it as a default
	}
	if choice == ToolsNone {
		return plan, nil
	}
	plan.Render, plan.Parse = tools, true
	parallel := !f.Choice.Single
	if !parallel {
		plan.Max = 1
	}
	forced := tools
	switch choice {
	case ToolsAuto:
		return plan, nil
	case ToolsFunction:
		forced = nil
		for _, t := range tools {
			if t.Function.Name == named {
				forced = []wire.Tool{t}
			}
		}
		if forced == nil {
			return plan, Invalid("tool_choice", "'tool_choice' names function %q, which is not among 'tools'", named)
		}
		parallel = false // OpenAI calls the named function once
		plan.Max = 1
	}
	g, err := plan.Format.Grammar(forced, parallel, lim.SchemaLimits())
	if err != nil {
		if e := SchemaLimitError(err, "tools"); e != nil {
			return plan, e
		}
		if errors.Is(err, grammar.ErrInvalidSchema) {
			return plan, Invalid("tools", "cannot force a call: %v", err)
		}
		return plan, &Error{Status: 500, Message: "tool-call grammar: " + err.Error()}
	}
	plan.Grammar = g
	return plan, nil
}
