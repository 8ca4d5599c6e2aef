package openai

import (
	"context"
	"math"
	"net/http"
	"slices"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/serving"
)

// The HTTP face of paced chat completions (see package serving's pace.go):
// continue and cancel a paced stream by its response id.

// Pacer starts paced chat completions on a Core for another face of the
// API (package voice's Generator).
type Pacer struct{ Core *serving.Core }

// PacedChat starts a paced chat completion: body is a chat completion
// request, its "chunking" object optional (defaults); it is never
// streamed as HTTP. Its messages follow history, the conversation so far,
// which is not decoded or encoded again. With conv, its prompt continues
// conv's tokens when its text does (see serving.Conversation). See
// serving.Core.StartPaced for the stream's life and release.
func (p Pacer) PacedChat(ctx context.Context, body []byte, history []chat.Message, conv *serving.Conversation) (s *engine.Stream, release func(), e *serving.Error) {
	var req chatRequest
	if e := serving.DecodeJSON(body, &req); e != nil {
		return nil, nil, e
	}
	if len(history) > 0 {
		req.Messages = append(slices.Clip(history), req.Messages...)
	}
	if req.Chunking == nil {
		req.Chunking = &ChunkingParams{}
	}
	r, e := req.translate(p.Core.Limits())
	if e != nil {
		return nil, nil, e
	}
	return p.Core.StartPaced(ctx, serving.PacedRequest{Model: req.Model, KeepAlive: req.KeepAlive, Request: &r, Conv: conv})
}

// continueBody is the optional body of .../continue.
type continueBody struct {
	Index *int `json:"index"`
	noModel
}

// cancelBody is the optional body of .../cancel.
type cancelBody struct {
	SpokenChars *int `json:"spoken_chars"`
	noModel
}

// noModel is part of a request that leases no model.
type noModel struct{}

// Lease leases nothing: the paced stream has its model.
func (noModel) Lease() (string, *serving.KeepAlive, bool) { return "", nil, false }

// Check refuses a negative index.
func (b *continueBody) Check(*serving.Limits) *serving.Error {
	if b.Index != nil && *b.Index < 0 {
		return serving.Invalid("index", "'index' must be >= 0, got %d", *b.Index)
	}
	return nil
}

// Check refuses a negative count.
func (b *cancelBody) Check(*serving.Limits) *serving.Error {
	if b.SpokenChars != nil && *b.SpokenChars < 0 {
		return serving.Invalid("spoken_chars", "'spoken_chars' must be >= 0, got %d", *b.SpokenChars)
	}
	return nil
}

// pacedAck is the answer to continue and cancel.
type pacedAck struct {
	ID     string `json:"id"`
	Object string `json:"object"`          // "chat.completion.continue" or ".cancel"
	Index  *int   `json:"index,omitempty"` // continue: the chunk continued
}

// ContinueChat serves POST /v1/chat/completions/{id}/continue: the paced
// response goes on past the chunk given by index (default: the last one
// sent).
func ContinueChat(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	pacedAction(c, w, r, func(ps *serving.PacedStream, body *continueBody) pacedAck {
		index := ps.Last()
		if body.Index != nil {
			index = *body.Index
		}
		ps.Continue(index)
		return pacedAck{Object: "chat.completion.continue", Index: &index}
	})
}

// CancelChat serves POST /v1/chat/completions/{id}/cancel: the response
// ends, its stream with finish_reason "interrupted"; spoken_chars says how
// much of it the listener heard (default: all that was generated).
func CancelChat(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	pacedAction(c, w, r, func(ps *serving.PacedStream, body *cancelBody) pacedAck {
		spoken := math.MaxInt32 // all of it
		if body.SpokenChars != nil {
			spoken = *body.SpokenChars
		}
		ps.Interrupt(spoken)
		return pacedAck{Object: "chat.completion.cancel"}
	})
}

// pacedAction serves a request, its body optional, about the paced
// response the path's {id} names: act acts on it, and its acknowledgement
// is the answer.
func pacedAction[T any, P interface {
	*T
	serving.Body
}](c *serving.Core, w http.ResponseWriter, r *http.Request, act func(ps *serving.PacedStream, body P) pacedAck) {
	serving.Handle(c, w, r, WriteError, true, func(x *serving.Exchange, body P) *serving.Error {
		id := r.PathValue("id")
		ps, e := c.Paced(id)
		if e != nil {
			return e
		}
		ack := act(ps, body)
		ack.ID = id
		serving.WriteJSON(w, http.StatusOK, ack)
		return nil
	})
}
