package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/wire"
)

// The conformance test renders every template of testdata/templates (the
// chat templates of 68 public models) over every conversation of
// testdata/conversations.json and compares the prompts byte for byte with
// what transformers' apply_chat_template gives (testdata/expected, written
// by testdata/render.py, which documents how the inputs are set up).
// TestConformanceMutable renders them all again with Options.Mutable and
// compares them with what a mutable sandbox gives (the same, but where
// testdata/expected-mutable says otherwise).

// conformanceTarget is the share of renders that must be identical.
const conformanceTarget = 0.99

// knownDifferences are the renders ("template × conversation") allowed to
// differ from transformers', with why. Any other difference fails the
// test, so that a regression shows even above the target.
var knownDifferences = map[string]string{}

// conformanceNow is the time render.py gives strftime_now.
var conformanceNow = time.Date(2026, 11, 21, 9, 30, 0, 0, time.UTC)

// corpusConversation is one entry of testdata/conversations.json: a chat
// completion request, as a client sends it.
type corpusConversation struct {
	Name                string                     `json:"name"`
	AddGenerationPrompt bool                       `json:"add_generation_prompt"`
	Messages            []Message                  `json:"messages"`
	Tools               []wire.Tool                `json:"tools"`
	Kwargs              map[string]json.RawMessage `json:"chat_template_kwargs"`
}

// verdict is how corral's render of one pair compares with transformers'.
type verdict int

const (
	identical verdict = iota // same text; or both reject it, the same way
	different                // both rendered, differently; or only one rejected it
	failed                   // corral failed where transformers rendered
)

// expectation is transformers' result for one pair: text, or the message
// of the template's raise_exception, or the failure of a template bug.
type expectation struct {
	text, raised, failure string
	kind                  string // "txt", "raise" or "error"
}

func readExpectation(dir, conv string) (expectation, error) {
	for _, kind := range []string{"txt", "raise", "error"} {
		b, err := os.ReadFile(filepath.Join(dir, conv+"."+kind))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return expectation{}, err
		}
		e := expectation{kind: kind}
		switch kind {
		case "txt":
			e.text = string(b)
		case "raise":
			e.raised = string(b)
		default:
			e.failure = string(b)
		}
		return e, nil
	}
	return expectation{}, fmt.Errorf("%s: no expected output for %s (run testdata/render.py)", dir, conv)
}

// judge compares corral's result (out, err) with transformers'.
func judge(want expectation, out string, err error) verdict {
	var raised *RaiseError
	switch want.kind {
	case "txt":
		switch {
		case err != nil:
			return failed
		case out == want.text:
			return identical
		}
	case "raise":
		if errors.As(err, &raised) && raised.Message == want.raised {
			return identical
		}
	default:
		// The template fails for this input under transformers (a missing
		// variable, a sandboxed method, a type error): corral must refuse
		// it too, but not as if the template had rejected the messages.
		if err != nil && !errors.As(err, &raised) {
			return identical
		}
	}
	return different
}

func loadCorpus(t *testing.T) ([]corpusConversation, map[string]map[string]string, []string) {
	t.Helper()
	var convs []corpusConversation
	var tokens map[string]map[string]string
	for file, v := range map[string]any{"conversations.json": &convs, "special_tokens.json": &tokens} {
		b, err := os.ReadFile(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	files, err := filepath.Glob(filepath.Join("testdata", "templates", "*.jinja"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no templates in testdata/templates (%v)", err)
	}
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = strings.TrimSuffix(filepath.Base(f), ".jinja")
	}
	slices.Sort(names)
	return convs, tokens, names
}

func TestConformance(t *testing.T) { conformance(t, false) }

func TestConformanceMutable(t *testing.T) { conformance(t, true) }

func conformance(t *testing.T, mutable bool) {
	convs, tokens, names := loadCorpus(t)
	// CHAT_CONFORMANCE_OUT=dir writes corral's renders there, laid out as
	// testdata/expected, to diff them.
	outDir := os.Getenv("CHAT_CONFORMANCE_OUT")
	if mutable {
		outDir = ""
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-52s %9s %9s %6s\n", "template", "identical", "different", "error")
	var total [3]int
	var unparsed []string
	for _, name := range names {
		src, err := os.ReadFile(filepath.Join("testdata", "templates", name+".jinja"))
		if err != nil {
			t.Fatal(err)
		}
		var counts [3]int
		tpl, parseErr := Parse(string(src))
		if parseErr != nil {
			unparsed = append(unparsed, name)
			t.Errorf("%s: %v", name, parseErr)
		}
		for _, conv := range convs {
			want, err := readExpectation(filepath.Join("testdata", "expected", name), conv.Name)
			if err != nil {
				t.Fatal(err)
			}
			if mutable {
				if w, err := readExpectation(filepath.Join("testdata", "expected-mutable", name), conv.Name); err == nil {
					want = w
				}
			}
			if parseErr != nil {
				counts[failed]++
				continue
			}
			kwargs := make(map[string]any, len(conv.Kwargs))
			for k, v := range conv.Kwargs {
				kwargs[k] = v
			}
			out, err := tpl.Render(conv.Messages, Options{
				AddGenerationPrompt: conv.AddGenerationPrompt,
				Tools:               conv.Tools,
				BOSToken:            tokens[name]["bos_token"],
				EOSToken:            tokens[name]["eos_token"],
				Now:                 conformanceNow,
				Kwargs:              kwargs,
				Mutable:             mutable,
			})
			v := judge(want, out, err)
			counts[v]++
			if v != identical {
				pair := name + " × " + conv.Name
				if _, known := knownDifferences[pair]; known {
					t.Logf("%s (known): %s", pair, describe(want, out, err))
				} else {
					t.Errorf("%s: %s", pair, describe(want, out, err))
				}
			}
			if outDir != "" {
				writeRender(t, filepath.Join(outDir, name), conv.Name, out, err)
			}
		}
		for i := range counts {
			total[i] += counts[i]
		}
		fmt.Fprintf(&table, "%-52s %9d %9d %6d\n", name, counts[identical], counts[different], counts[failed])
	}
	renders := total[identical] + total[different] + total[failed]
	share := float64(total[identical]) / float64(renders)
	fmt.Fprintf(&table, "%-52s %9d %9d %6d\n", fmt.Sprintf("all (%d templates, %d renders)", len(names), renders),
		total[identical], total[different], total[failed])
	fmt.Fprintf(&table, "identical: %.1f%%; templates that do not parse: %d", 100*share, len(unparsed))
	t.Log("\n" + table.String())
	if share < conformanceTarget {
		t.Errorf("%.1f%% of renders identical to transformers', want at least %.0f%%", 100*share, 100*conformanceTarget)
	}
}

// describe says how a render missed: where the text first differs, or
// what failed.
func describe(want expectation, out string, err error) string {
	if err != nil {
		switch want.kind {
		case "txt":
			return "corral failed: " + err.Error()
		case "raise":
			return fmt.Sprintf("transformers raised %q; corral: %v", want.raised, err)
		}
		return fmt.Sprintf("transformers failed (%s); corral raised: %v", want.failure, err)
	}
	switch want.kind {
	case "raise":
		return fmt.Sprintf("transformers raised %q; corral rendered", want.raised)
	case "error":
		return fmt.Sprintf("transformers failed (%s); corral rendered", want.failure)
	}
	i := 0
	for i < len(out) && i < len(want.text) && out[i] == want.text[i] {
		i++
	}
	lo := max(i-40, 0)
	return fmt.Sprintf("differs at byte %d:\n  corral:       %q\n  transformers: %q", i,
		out[lo:min(i+60, len(out))], want.text[lo:min(i+60, len(want.text))])
}

func writeRender(t *testing.T, dir, conv, out string, err error) {
	t.Helper()
	if mkErr := os.MkdirAll(dir, 0o755); mkErr != nil {
		t.Fatal(mkErr)
	}
	name, body := conv+".txt", out
	var raised *RaiseError
	switch {
	case errors.As(err, &raised):
		name, body = conv+".raise", raised.Message
	case err != nil:
		name, body = conv+".error", err.Error()
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
