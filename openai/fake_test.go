package openai

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeEngine stands in for the engine in tests of request decoding and
// validation, which is pure logic: Submit records the request it got and
// fails with submitErr, so no generation ever happens.
type fakeEngine struct {
	info      engine.ModelInfo
	submitErr error
	submitted []engine.Request
}

func newFake() *fakeEngine {
	return &fakeEngine{
		info:      engine.ModelInfo{Name: "tiny", VocabSize: 100, SlotCtx: 64, BOS: 1, EOS: 2, AddBOS: true},
		submitErr: engine.ErrQueueFull,
	}
}

func (f *fakeEngine) Info() engine.ModelInfo { return f.info }

func (f *fakeEngine) Submit(ctx context.Context, req engine.Request) (*engine.Stream, error) {
	f.submitted = append(f.submitted, req)
	return nil, f.submitErr
}

func (f *fakeEngine) Embed(ctx context.Context, inputs []engine.EmbedInput) (*engine.Embeddings, error) {
	return nil, f.submitErr
}

func (f *fakeEngine) Tokenize(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	return nil, nil
}

func (f *fakeEngine) Detokenize(tokens []int32) string { return "" }

func (f *fakeEngine) TokenPiece(tok int32) string {
	switch tok {
	case 1:
		return "<s>"
	case 2:
		return "</s>"
	}
	return ""
}

func (f *fakeEngine) Slots(ctx context.Context) ([]engine.SlotInfo, error) { return nil, nil }

func (f *fakeEngine) Stats() engine.Stats { return engine.Stats{} }

func (f *fakeEngine) Drain() {}

func (f *fakeEngine) Close() error { return nil }

// strictAPI serves fake as the one model "tiny" with strict model names,
// so that a request naming another model gets 404.
func strictAPI(t *testing.T, fake *fakeEngine) *API {
	t.Helper()
	m, err := model.New(fake, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	spec := registry.Spec{ID: fake.info.Name}
	reg, err := registry.New(registry.Config{StrictNames: true, KeepAlive: -1}, []registry.Spec{spec},
		func(context.Context, registry.Spec) (*model.Model, error) { return m, nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return New(reg, Options{})
}
