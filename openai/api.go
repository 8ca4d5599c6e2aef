// Package openai serves an engine over HTTP with OpenAI's API
// (/v1/chat/completions, /v1/completions, /v1/models) and llama-server's
// (/completion, /tokenize, /detokenize, /slots, /metrics).
//
// It decodes and validates requests, renders chat templates, submits to the
// engine and encodes responses, streamed as server-sent events or whole.
// Handlers wait for tokens with Stream.Recv on the request's context: the
// goroutine parks without holding an OS thread, and a client that goes away
// cancels its request wherever it is (queued, prefilling or decoding).
// Routing, middleware and process lifecycle belong to package server.
package openai

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
)

// Engine is what the API needs from an engine; *engine.Engine satisfies it
// and documents the methods.
type Engine interface {
	Info() engine.ModelInfo
	Submit(ctx context.Context, req engine.Request) (*engine.Stream, error)
	Tokenize(text string, addSpecial, parseSpecial bool) ([]int32, error)
	Detokenize(tokens []int32) string
	TokenPiece(tok int32) string
	Slots(ctx context.Context) ([]engine.SlotInfo, error)
	Stats() engine.Stats
	Drain()
}

// Options configure an API.
type Options struct {
	// ChatTemplate names a built-in chat template (see chat.Lookup) used
	// instead of the model's own.
	ChatTemplate string
	// Logger receives warnings; nil means slog.Default().
	Logger *slog.Logger
}

// API serves one engine. Its handler methods are safe for concurrent use.
type API struct {
	eng  Engine
	info engine.ModelInfo
	tmpl *chat.Template
	bos  string // text of the BOS token
	eos  string // text of the EOS token

	paced pacedStreams // paced chat streams being served, by response id
	log   *slog.Logger
}

// Logger is the API's logger (Options.Logger).
func (a *API) Logger() *slog.Logger { return a.log }

// New prepares the API for eng, resolving the chat template: the one named
// by opt.ChatTemplate, else the model's, else ChatML. A model template that
// does not parse falls back to ChatML with a warning.
func New(eng Engine, opt Options) (*API, error) {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	info := eng.Info()
	a := &API{eng: eng, info: info, bos: eng.TokenPiece(info.BOS), eos: eng.TokenPiece(info.EOS), log: log}
	var err error
	switch {
	case opt.ChatTemplate != "":
		if a.tmpl, err = chat.Lookup(opt.ChatTemplate); err != nil {
			return nil, err // it names the template and the known ones
		}
	case info.ChatTemplate != "":
		if a.tmpl, err = chat.Parse(info.ChatTemplate); err != nil {
			log.Warn("model chat template does not parse; using chatml", "model", info.Name, "err", err)
		}
	}
	if a.tmpl == nil {
		if a.tmpl, err = chat.Lookup("chatml"); err != nil {
			return nil, fmt.Errorf("chat template chatml: %w", err)
		}
	}
	return a, nil
}

// checkModel accepts the served model id or no model at all.
func (a *API) checkModel(model string) *Error {
	if model == "" || model == a.info.Name {
		return nil
	}
	return &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("the model %q does not exist; this server serves %q", model, a.info.Name)}
}

// newID returns a fresh response id such as "chatcmpl-…".
func newID(prefix string) string {
	return prefix + strings.ToLower(rand.Text())
}
