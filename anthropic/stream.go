package anthropic

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/corral-llm/corral/wire"
)

// Stream encodes one streamed answer as Anthropic's server-sent events:
// message_start; for each content block content_block_start, its
// content_block_delta events and content_block_stop; message_delta with
// the stop reason and the usage; message_stop. Blocks follow each other
// in the order the answer's pieces arrive ("thinking" for reasoning,
// "text" for content, "tool_use" for each call), one open at a time.
//
// Each event is one Write to the writer, so that a writer that flushes
// (or bounds each write with a deadline) does so per event. The first
// write error is returned by that call and every later one, which then
// write nothing. A Stream belongs to one goroutine.
type Stream struct {
	w       io.Writer
	m       Meta
	buf     []byte
	err     error
	started bool
	ended   bool   // End or Error was written
	open    string // the open block's type, "" when none
	index   int    // the open block's index
	blocks  int    // blocks started
	call    int    // the index of the last call started; -1 none
	called  bool
}

// NewStream returns a Stream writing onto w the answer m describes. It
// writes nothing yet.
func NewStream(w io.Writer, m Meta) *Stream {
	if m.ID == "" {
		m.ID = NewID()
	}
	return &Stream{w: w, m: m, call: -1}
}

// ID is the message's id.
func (s *Stream) ID() string { return s.m.ID }

// Start writes message_start, with the usage known so far (the prompt's
// tokens, those found in the cache). Delta and End start the message
// themselves (with no usage) when Start was not called; message_delta
// carries the final usage in any case.
func (s *Stream) Start(u Usage) error {
	if s.started || s.ended {
		return s.err
	}
	s.started = true
	return s.event("message_start", struct {
		Type    string  `json:"type"`
		Message Message `json:"message"`
	}{"message_start", Message{ID: s.m.ID, Type: "message", Role: "assistant", Model: s.m.Model, Content: []ContentBlock{}, Usage: u.usage()}})
}

// Ping writes a ping event, which clients skip: it shows them, and any
// proxy, that the request is alive while nothing else is written. It may
// come before message_start.
func (s *Stream) Ping() error {
	if s.ended {
		return s.err
	}
	return s.event("ping", struct {
		Type string `json:"type"`
	}{"ping"})
}

// Delta writes a piece of the answer: its reasoning (unless Meta.OmitThinking),
// its content, then its tool calls (each call's index, id and name
// first, then fragments of its arguments, one call after another). A
// fragment of a call whose block has been closed, which corral's parsers
// do not write, is dropped.
func (s *Stream) Delta(d wire.Delta) error {
	if s.ended {
		return s.err
	}
	if err := s.Start(Usage{}); err != nil {
		return err
	}
	if d.ReasoningContent != nil && *d.ReasoningContent != "" && !s.m.OmitThinking {
		s.block("thinking", ContentBlock{Type: "thinking"})
		s.delta(struct {
			Type     string `json:"type"`
			Thinking string `json:"thinking"`
		}{"thinking_delta", *d.ReasoningContent})
	}
	if t := d.Text(); t != "" {
		s.block("text", ContentBlock{Type: "text"})
		s.delta(struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}{"text_delta", t})
	}
	for _, tc := range d.ToolCalls {
		if s.open != "tool_use" || tc.Index != s.call {
			if tc.Index <= s.call {
				continue
			}
			s.call, s.called = tc.Index, true
			id := tc.ID
			if id == "" {
				id = fmt.Sprintf("%s_%d", s.m.ID, tc.Index)
			}
			s.block("tool_use", ContentBlock{Type: "tool_use", ID: ToolUseID(id), Name: tc.Function.Name})
		}
		if tc.Function.Arguments != "" {
			s.delta(struct {
				Type        string `json:"type"`
				PartialJSON string `json:"partial_json"`
			}{"input_json_delta", tc.Function.Arguments})
		}
	}
	return s.err
}

// End closes the open block and writes message_delta, with the stop
// reason (StopReason) and the final usage, then message_stop. An answer
// with no block gets an empty text block, so that clients that retry a
// message without content do not.
func (s *Stream) End(e End) error {
	if s.ended {
		return s.err
	}
	if err := s.Start(Usage{}); err != nil {
		return err
	}
	if s.blocks == 0 {
		s.block("text", ContentBlock{Type: "text"})
	}
	s.close()
	reason, seq := StopReason(s.m, e, s.called)
	s.ended = true
	s.event("message_delta", struct {
		Type  string `json:"type"`
		Delta struct {
			StopReason   string  `json:"stop_reason"`
			StopSequence *string `json:"stop_sequence"`
		} `json:"delta"`
		Usage MessageUsage `json:"usage"`
	}{Type: "message_delta", Delta: struct {
		StopReason   string  `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	}{reason, seq}, Usage: e.Usage.usage()})
	return s.event("message_stop", struct {
		Type string `json:"type"`
	}{"message_stop"})
}

// Error writes an error event, the envelope as its data (NewError), and
// ends the stream: nothing is written after it.
func (s *Stream) Error(env ErrorEnvelope) error {
	if s.ended {
		return s.err
	}
	s.ended = true
	return s.event("error", env)
}

// block makes a block of type typ the open one, closing another, and
// starting it as start.
func (s *Stream) block(typ string, start ContentBlock) {
	if s.open == typ && typ != "tool_use" {
		return
	}
	s.close()
	s.open, s.index = typ, s.blocks
	s.blocks++
	s.event("content_block_start", struct {
		Type         string       `json:"type"`
		Index        int          `json:"index"`
		ContentBlock ContentBlock `json:"content_block"`
	}{"content_block_start", s.index, start})
}

// close stops the open block, if any.
func (s *Stream) close() {
	if s.open == "" {
		return
	}
	s.open = ""
	s.event("content_block_stop", struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}{"content_block_stop", s.index})
}

// delta writes a content_block_delta of the open block.
func (s *Stream) delta(d any) {
	s.event("content_block_delta", struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
		Delta any    `json:"delta"`
	}{"content_block_delta", s.index, d})
}

// event writes one event named name with v as its data.
func (s *Stream) event(name string, v any) error {
	if s.err != nil {
		return s.err
	}
	b, err := json.Marshal(v)
	if err != nil {
		s.err = fmt.Errorf("encode %s event: %w", name, err)
		return s.err
	}
	s.buf = append(append(append(s.buf[:0], "event: "...), name...), '\n')
	s.buf = wire.AppendData(s.buf, b)
	if _, err := s.w.Write(s.buf); err != nil {
		s.err = err
	}
	return s.err
}
