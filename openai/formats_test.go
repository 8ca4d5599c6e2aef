package openai

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/internal/servetest"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/reasoning"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/toolcall"
)

// markupEngine is a fake whose vocabulary has harmony's markers as
// special tokens, 10 on; other text is two ordinary tokens.
type markupEngine struct{ *servetest.Engine }

var harmonyVocab = []string{"<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|call|>", "<|constrain|>", "<|return|>"}

func (e markupEngine) Tokenize(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	if i := slices.Index(harmonyVocab, text); i >= 0 && parseSpecial {
		return []int32{int32(10 + i)}, nil
	}
	return []int32{50, 51}, nil
}

func (e markupEngine) TokenPiece(tok int32) string {
	if i := int(tok) - 10; i >= 0 && i < len(harmonyVocab) {
		return harmonyVocab[i]
	}
	return e.Engine.TokenPiece(tok)
}

// harmonyTemplate writes harmony's markup: its channels, its analysis,
// calls to functions.
const harmonyTemplate = `{%- for m in messages %}<|start|>{{ m.role }}<|channel|>final<|message|>{{ m.content }}<|end|>{% endfor -%}
{# earlier turns: <|channel|>analysis<|message|>...<|end|> and <|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|> #}
{%- if add_generation_prompt %}<|start|>assistant{% endif %}`

// The served model reads its formats off the template: the markers that
// are one special token are output as text, the template's stops that
// are markup are not stops, and a budget comes with the reasoning's
// markers and closing tokens.
func TestModelFormats(t *testing.T) {
	tpl, err := chat.Parse(harmonyTemplate)
	if err != nil {
		t.Fatal(err)
	}
	budget := 32
	fake := servetest.NewEngine()
	m, err := model.New(markupEngine{fake}, model.Options{Template: tpl, ReasoningBudget: &budget})
	if err != nil {
		t.Fatal(err)
	}
	think, split := m.ReasoningFormat()
	if m.ToolFormat() != toolcall.Harmony || think != reasoning.Harmony || !split {
		t.Fatalf("formats %v %v %v", m.ToolFormat().Name(), think, split)
	}
	if !slices.Contains(tpl.Stops(), "<|end|>") || slices.Contains(m.Stops(), "<|end|>") {
		t.Errorf("stops %q, template's %q", m.Stops(), tpl.Stops())
	}
	a, err := serving.ForEngine(markupEngine{fake}, model.Options{Template: tpl, ReasoningBudget: &budget})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Registry().Close() })
	for _, body := range []string{
		`{"messages": [{"role": "user", "content": "Hi"}]}`,
		`{"messages": [{"role": "user", "content": "Hi"}], "thinking_budget": 5}`,
		`{"messages": [{"role": "user", "content": "Hi"}], "thinking_budget": -1}`,
	} {
		fake.Submitted = nil
		w := httptest.NewRecorder()
		ChatCompletions(a, w, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)))
		if len(fake.Submitted) != 1 {
			t.Fatalf("%s: nothing submitted: %d %s", body, w.Code, w.Body)
		}
		req := fake.Submitted[0]
		var show []int32
		for i := range harmonyVocab {
			show = append(show, int32(10+i))
		}
		if !slices.Equal(slices.Sorted(slices.Values(req.ShowTokens)), show) || slices.Contains(req.Stop, "<|end|>") {
			t.Errorf("%s: show %v stop %q", body, req.ShowTokens, req.Stop)
		}
		// The reasoning's markers reach the engine, which counts its
		// tokens, with or without a budget.
		r := req.Reasoning
		switch {
		case r == nil || r.Open || r.Start != "<|channel|>analysis<|message|>" || r.End != "<|end|>":
			t.Errorf("%s: reasoning %+v", body, r)
		case strings.Contains(body, "-1"):
			if r.Budget >= 0 || r.Close != nil {
				t.Errorf("%s: budget %+v", body, *r)
			}
		default:
			want := 32
			if strings.Contains(body, "5") {
				want = 5
			}
			if r.Budget != want || !slices.Equal(r.Close, []int32{50, 51}) { // the fake's tokens of Close's text
				t.Errorf("%s: budget %+v", body, *r)
			}
		}
	}
	for _, opt := range []model.Options{{Template: tpl, ToolFormat: "xml"}, {Template: tpl, ReasoningFormat: "cot"}} {
		if _, err := model.New(markupEngine{servetest.NewEngine()}, opt); err == nil {
			t.Errorf("%+v: no error", opt)
		}
	}
	none, err := model.New(markupEngine{servetest.NewEngine()}, model.Options{Template: tpl, ReasoningFormat: "none", ToolFormat: "json"})
	noneThink, noneSplit := none.ReasoningFormat()
	if err != nil || noneSplit || noneThink != reasoning.Harmony || none.ToolFormat() != toolcall.JSON {
		t.Errorf("none: %v %+v", err, none)
	}
}
