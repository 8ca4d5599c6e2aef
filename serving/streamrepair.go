package serving

import (
	"strings"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/wire"
)

// Repairing a streamed answer's tool calls. A stream sends its text as it
// is decided, so what could still turn out to be a broken call is held
// back: a call goes out whole (its id, name and arguments in one piece)
// once it is complete, calls a function the request offered and its
// arguments follow that function's schema; content and reasoning go out
// as they come, as in a stream that reads no calls. Every dialect streams
// a call that way as well as in fragments (OpenAI's and Ollama's deltas,
// Anthropic's content_block_start and one input_json_delta, Responses'
// output_item.added and one arguments delta), so the choice is the same
// for all: a client never sees a fragment of a call that is then taken
// back, and no dialect can take back what it sent.
//
// Once a region of markup turns out not to be a call, or a complete call
// fails its checks, nothing more is sent until the answer ends (but the
// keep-alive pings of stream.alive, as tokens come and as the repair
// runs): then the
// answer is repaired as a whole one is (see repair.go: from where the
// failed call's markup began, under the grammar of one call, with what is
// left of max_tokens, the prefix cache serving the retry), and what the
// client has not been sent of the repaired answer (or, when the repair
// fails too, of the answer as the model wrote it) goes out, read afresh.
// A plain answer, with no call markup, streams exactly as before.

// streamRepair is the state of a stream whose calls may be repaired.
type streamRepair struct {
	req  engine.Request // what the stream asked, for the retry
	v    argValidator
	all  strings.Builder // the answer so far
	held bool            // a call failed: the rest waits for the end
	// What the client has been sent: bytes of reasoning and content,
	// and whole calls.
	reasoning, content, calls int
}

// repairs reports whether a stream of req, read by plan, holds its calls
// back for repair: when the request reads calls, the server repairs them,
// and no logprobs are asked (a repaired call's tokens would have none).
func (c *Core) repairs(req engine.Request, plan model.Plan) bool {
	return c.toolRepair > 0 && plan.Tools != nil && !req.Logprobs && req.Chunking == nil
}

// push passes the reader's pieces of text (from the tokens of ch) on to
// the encoder, with the calls held back as the comment above says.
func (st *stream) push(text string, ch engine.Chunk) error {
	fix := st.fix
	fix.all.WriteString(text)
	ds := st.reader.Push(text)
	if fix.held {
		return nil
	}
	out, done, ok := fix.decide(st, ds)
	if !ok {
		fix.held = true
		return nil
	}
	return fix.send(st, out, done, ch)
}

// decide reads ds, the pieces the reader decided: their reasoning and
// content, and each call the reader completed, whole; ok is false when a
// call failed (markup that was no call, a call of a function not
// offered, arguments that break its schema).
func (fix *streamRepair) decide(st *stream, ds []wire.Delta) (out []wire.Delta, done []wire.ToolCall, ok bool) {
	if st.reader.Failed() {
		return nil, nil, false
	}
	out = plainPieces(ds)
	done = st.reader.Calls()[fix.calls:]
	for i, call := range done {
		t := findTool(st.g.Plan.Defs, call.Function.Name)
		if t == nil || !fix.v.valid(t, call.Function.Arguments) {
			return nil, nil, false
		}
		out = append(out, wholeCall(fix.calls+i, call))
	}
	return out, done, true
}

// finish ends a stream whose calls may be repaired. An answer sound to
// its end ends as a stream that reads calls does. Else the answer,
// repaired, is read afresh and the client gets what it has not been sent
// of it; then the encoder's last events.
func (st *stream) finish(res engine.Result) error {
	fix := st.fix
	x := st.x
	if !fix.held {
		out, done, ok := fix.decide(st, st.reader.Finish(res.FinishReason == engine.FinishLength))
		if ok {
			if err := fix.send(st, out, done, engine.Chunk{}); err != nil {
				return err
			}
			return st.events(st.enc.End(res, st.g.finish(res, st.reader.Calls())))
		}
	}
	text, res := x.Core.repairCalls(x.Context(), x.Model, fix.req, st.g.Plan, fix.all.String(), res, st.alive)
	r := st.g.Plan.Reader()
	ds := append(r.Push(text), r.Finish(res.FinishReason == engine.FinishLength)...)
	var reasoning, content strings.Builder
	for _, d := range ds {
		if d.ReasoningContent != nil {
			reasoning.WriteString(*d.ReasoningContent)
		}
		content.WriteString(d.Text())
	}
	var out []wire.Delta
	if s := rest(reasoning.String(), fix.reasoning); s != "" {
		out = append(out, wire.Delta{ReasoningContent: &s})
	}
	if s := rest(content.String(), fix.content); s != "" {
		out = append(out, wire.Delta{Content: &s})
	}
	calls := r.Calls()
	var done []wire.ToolCall
	if fix.calls < len(calls) {
		done = calls[fix.calls:]
	}
	for i, call := range done {
		out = append(out, wholeCall(fix.calls+i, call))
	}
	if err := fix.send(st, out, done, engine.Chunk{}); err != nil {
		return err
	}
	return st.events(st.enc.End(res, st.g.finish(res, calls)))
}

// send gives the encoder out, the calls done complete among them, and
// counts what the client was sent.
func (fix *streamRepair) send(st *stream, out []wire.Delta, done []wire.ToolCall, ch engine.Chunk) error {
	if len(out) == 0 {
		return nil
	}
	for _, d := range out {
		if d.ReasoningContent != nil {
			fix.reasoning += len(*d.ReasoningContent)
		}
		fix.content += len(d.Text())
	}
	fix.calls += len(done)
	return st.events(st.enc.Deltas(out, done, ch))
}

// plainPieces are ds without their call fragments: the reasoning and
// content they carry.
func plainPieces(ds []wire.Delta) []wire.Delta {
	var out []wire.Delta
	for _, d := range ds {
		d.ToolCalls = nil
		if d.ReasoningContent != nil || d.Content != nil {
			out = append(out, d)
		}
	}
	return out
}

// wholeCall is call, the index-th of the answer, as one delta.
func wholeCall(index int, call wire.ToolCall) wire.Delta {
	return wire.Delta{ToolCalls: []wire.ToolCallDelta{{Index: index, ID: call.ID, Type: "function", Function: call.Function}}}
}

// rest is s past its first n bytes, which were sent; "" when s is not
// that long.
func rest(s string, n int) string {
	if n >= len(s) {
		return ""
	}
	return s[n:]
}
