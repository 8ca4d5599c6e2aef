// Package agent is the agent side of a supervised request that needs no
// worker: the BIOS system prompt and the message stack, tool definitions
// and runners (CommandTools), the parsing of tool calls (native, and the
// JSON convention of ToolFormatJSON), tool result text, and the
// repeated-line loop detector.
package agent

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/corral-llm/corral/wire"
)

// BiosVersion identifies the text produced by BIOS.
const BiosVersion = "bios-v1"

// ToolFormat selects how the model calls tools.
type ToolFormat string

// Tool formats.
const (
	// ToolFormatNative sends the tools in the request ("tools") and reads
	// OpenAI tool_calls deltas from the stream.
	ToolFormatNative ToolFormat = "native"
	// ToolFormatJSON announces a strict JSON convention in the BIOS, for
	// servers without native tool calls: a reply that is a JSON object
	// whose "tool_calls" name a configured tool must be exactly
	//	{"tool_calls":[{"name":"...","arguments":{...}}],"content":"..."}
	// ("content" optional) and tool results come back as a user message
	//	{"tool_results":[{"name":"...","result":...}]}
	// Any other reply, JSON answers included, is the model's answer.
	ToolFormatJSON ToolFormat = "json"
)

// BiosContext is everything the BIOS system prompt depends on.
type BiosContext struct {
	// Now is the current time, already in the worker's time zone.
	Now          time.Time
	TimezoneName string
	WorkerName   string
	// ToolItersRemaining is how many tool rounds the request has left.
	ToolItersRemaining int
	NormalTools        []ToolDef
	ExitTools          []ToolDef
	// ToolFormat says whether to announce the JSON tool-call convention.
	ToolFormat ToolFormat
	// Version defaults to BiosVersion.
	Version string
}

// BiosProvider produces the BIOS system prompt. It must be a pure function
// of its argument.
type BiosProvider func(BiosContext) string

// BIOS is the default BiosProvider: platform guidance for a cooperating
// agent, the date and time, the tool budget, the normal and exit tools and,
// for ToolFormatJSON, the tool-call convention.
func BIOS(c BiosContext) string {
	v := c.Version
	if v == "" {
		v = BiosVersion
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[platform %s]\n", v)
	fmt.Fprintf(&b, "You are %s, one worker in a group of cooperating AI agents run by an orchestrator. "+
		"Do the task you are given carefully and say plainly when you cannot; "+
		"your reply is read by other agents and programs.\n", c.WorkerName)
	fmt.Fprintf(&b, "Current date and time: %s (%s), time zone %s.\n",
		c.Now.Format("2006-01-02 15:04:05 -0700"), c.Now.Weekday(), c.TimezoneName)
	if len(c.NormalTools) > 0 {
		if c.ToolItersRemaining > 0 {
			fmt.Fprintf(&b, "\nTools (you may use at most %d more tool rounds for this task):\n", c.ToolItersRemaining)
		} else {
			b.WriteString("\nTools (no tool rounds are left: answer now without calling them):\n")
		}
		writeTools(&b, c.NormalTools)
	}
	if len(c.ExitTools) > 0 {
		b.WriteString("\nSignals: call these to report to the orchestrator, ideally near the end of your answer. " +
			"Calling one does not end your turn and returns nothing.\n")
		writeTools(&b, c.ExitTools)
	}
	if c.ToolFormat == ToolFormatJSON && len(c.NormalTools)+len(c.ExitTools) > 0 {
		b.WriteString("\nTo call tools or signals, reply with only this JSON object and nothing else:\n" +
			`{"tool_calls":[{"name":"<name>","arguments":{...}}],"content":"<optional text>"}` + "\n" +
			"Any other reply, JSON or not, is your answer. " +
			"Tool results come back as a user message " + `{"tool_results":[{"name":"<name>","result":...}]}.` + "\n")
	}
	return b.String()
}

func writeTools(b *strings.Builder, tools []ToolDef) {
	for _, t := range tools {
		fmt.Fprintf(b, "- %s: %s", t.Function.Name, t.Function.Description)
		if len(t.Function.Parameters) > 0 {
			params, err := json.Marshal(t.Function.Parameters)
			if err == nil {
				fmt.Fprintf(b, " Parameters (JSON Schema): %s", params)
			}
		}
		b.WriteByte('\n')
	}
}

// BuildMessageStack returns the messages of a request in the required
// order: the BIOS, the caller's system prompt, the conversation. The BIOS
// and the caller's prompt share one system message (separated by a
// delimiter) because many chat templates accept only one.
func BuildMessageStack(biosText, callerSystemPrompt string, conversation []wire.Message) []wire.Message {
	system := biosText
	if callerSystemPrompt != "" {
		system = strings.TrimRight(biosText, "\n") + "\n\n---\n\n" + callerSystemPrompt
	}
	msgs := make([]wire.Message, 0, len(conversation)+1)
	msgs = append(msgs, wire.Message{Role: "system", Content: system})
	return append(msgs, conversation...)
}
