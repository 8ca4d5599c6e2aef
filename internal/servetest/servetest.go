// Package servetest has what the tests of the dialect packages share: a
// fake engine for tests of request decoding and validation, and helpers
// that serve a request to a handler.
package servetest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/registry"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// Engine stands in for the engine in tests of request decoding and
// validation, which is pure logic: Submit records the request it got and
// fails with SubmitErr, so no generation ever happens.
type Engine struct {
	Model     engine.ModelInfo
	SubmitErr error
	Submitted []engine.Request
}

// NewEngine returns a fake of a tiny model, "tiny", whose Submit fails
// with engine.ErrQueueFull.
func NewEngine() *Engine {
	return &Engine{
		Model:     engine.ModelInfo{Name: "tiny", VocabSize: 100, CtxPerRequest: 64, BOS: 1, EOS: 2, AddBOS: true},
		SubmitErr: engine.ErrQueueFull,
	}
}

// Info describes the fake model.
func (f *Engine) Info() engine.ModelInfo { return f.Model }

// Submit records req and fails with SubmitErr.
func (f *Engine) Submit(ctx context.Context, req engine.Request) (*engine.Stream, error) {
	f.Submitted = append(f.Submitted, req)
	return nil, f.SubmitErr
}

// Embed fails with SubmitErr.
func (f *Engine) Embed(ctx context.Context, inputs []engine.EmbedInput) (*engine.Embeddings, error) {
	return nil, f.SubmitErr
}

// Render records req as Submit does and fails with SubmitErr.
func (f *Engine) Render(ctx context.Context, req engine.Request) ([]int32, error) {
	f.Submitted = append(f.Submitted, req)
	return nil, f.SubmitErr
}

// Tokenize gives no tokens.
func (f *Engine) Tokenize(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	return nil, nil
}

// Detokenize gives no text.
func (f *Engine) Detokenize(tokens []int32) string { return "" }

// TokenPiece is "<s>" for BOS (1), "</s>" for EOS (2), "" for the rest.
func (f *Engine) TokenPiece(tok int32) string {
	switch tok {
	case 1:
		return "<s>"
	case 2:
		return "</s>"
	}
	return ""
}

// Slots are none.
func (f *Engine) Slots(ctx context.Context) ([]engine.SlotInfo, error) { return nil, nil }

// Stats are zero.
func (f *Engine) Stats() engine.Stats { return engine.Stats{} }

// Drain does nothing.
func (f *Engine) Drain() {}

// Close does nothing.
func (f *Engine) Close() error { return nil }

// Strict serves fake as the one model named fake's name with strict
// model names, so that a request naming another model gets 404; the
// registry closes when t ends.
func Strict(t testing.TB, fake *Engine) *serving.Core {
	t.Helper()
	m, err := model.New(fake, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	spec := registry.Spec{ID: fake.Model.Name}
	reg, err := registry.New(registry.Config{StrictNames: true, KeepAlive: -1}, []registry.Spec{spec},
		func(context.Context, registry.Spec) (*model.Model, error) { return m, nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return serving.New(reg, serving.Options{})
}

// Serve runs one request through handler h of a Core over fake, with
// strict model names (see Strict).
func Serve(t testing.TB, fake *Engine, h func(*serving.Core, http.ResponseWriter, *http.Request), body string) *httptest.ResponseRecorder {
	t.Helper()
	a := Strict(t, fake)
	w := httptest.NewRecorder()
	h(a, w, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)))
	return w
}

// JSONString is s as a JSON string.
func JSONString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// Bind is h serving a's models.
func Bind(c *serving.Core, h func(*serving.Core, http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { h(c, w, r) }
}

// Content is the one delta of text a plan that reads nothing gives.
func Content(text string) []wire.Delta { return []wire.Delta{{Content: &text}} }

// Whole is the whole answer text, read by a plan that reads nothing.
func Whole(text, finish string) serving.Answer {
	return serving.Answer{Text: text, Content: text, Finish: finish}
}

// ManyProperties is a JSON schema of n properties, all required: the
// 300,000-property schema (4.5 MB) that once took minutes of CPU to
// decode, for the tests of schema bounds.
func ManyProperties(n int) string {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"p%d":{}`, i)
	}
	b.WriteString(`},"required":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"p%d"`, i)
	}
	b.WriteString(`]}`)
	return b.String()
}
