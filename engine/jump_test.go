package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
)

// storyGrammar frames a TinyStories story: long runs of text the grammar
// forces, between words the model chooses.
const storyGrammar = `root ::= " Tom and his mom went to the " word ". They saw a big " word " and a little " word "." rest
word ::= [a-z]+
rest ::= [a-zA-Z ,.]*`

// synthTiny writes the synthetic tiny model (random Q8_0 weights; its
// vocabulary has every printable character, and byte tokens).
func synthTiny(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := gguf.WriteSynthetic(path, gguf.Shapes["tiny"], 1); err != nil {
		t.Fatal(err)
	}
	return path
}

// output is what a request gave: its text, its logprobs entries and its
// result.
type output struct {
	text string
	lps  []engine.TokenLogprobs
	res  engine.Result
}

func run(t *testing.T, e *engine.Engine, req engine.Request) output {
	t.Helper()
	s := submit(t, e, req)
	var o output
	var b strings.Builder
	for {
		c, err := s.Recv(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(c.Text)
		o.lps = append(o.lps, c.Logprobs...)
	}
	o.text, o.res = b.String(), s.Result()
	return o
}

// samplingCases are variations of base whose output a change to how
// tokens are evaluated must leave alone: greedy, sampled with a seed,
// sampled with penalties, each also cut at each of short max tokens and
// by the stop string stop; and with logprobs (top 3), greedy and sampled.
func samplingCases(base engine.Request, stop string, short ...int) []engine.Request {
	sampled := engine.Sampling{Temperature: 0.9, TopK: 40, TopP: 0.95, Seed: 7}
	penalized := sampled
	penalized.RepeatPenalty, penalized.RepeatLastN = 1.3, 64
	var cases []engine.Request
	for _, sp := range []engine.Sampling{{}, sampled, penalized} {
		r := base
		r.Sampling = sp
		cases = append(cases, r)
		for _, n := range short {
			r.MaxTokens = n
			cases = append(cases, r)
		}
		r.MaxTokens, r.Stop = base.MaxTokens, []string{stop}
		cases = append(cases, r)
	}
	r := base
	r.Logprobs, r.TopLogprobs = true, 3
	cases = append(cases, r)
	r.Sampling = sampled
	cases = append(cases, r)
	return cases
}

// TestJumpForwardOutputIsTheSame: with jump-forward decoding on, every
// request gives byte for byte what it gives with it off (and the same
// log-probabilities, bit for bit), greedy or sampled with a seed, with
// penalties, cut by max tokens or the slot's context or a stop string in
// the middle of forced text; and the steps are fewer.
func TestJumpForwardOutputIsTheSame(t *testing.T) {
	tiny := synthTiny(t)
	call := forcedCall(t)
	for _, m := range []struct {
		name, path string
		base       engine.Request
		stop       string // text inside the forced text
		room       int    // cells left after a long prompt, fewer than an answer needs
	}{
		{"tinystories", testmodel.Path(t, testmodel.TinyStories656K),
			engine.Request{Prompt: "One day,", AddSpecial: true, MaxTokens: 64, Grammar: storyGrammar}, "his mom", 20},
		// Random weights: the model writes the markup in pieces of any
		// length, byte tokens as often as not, and confirms few drafts.
		{"synthetic tiny", tiny,
			engine.Request{Prompt: "Call it.", AddSpecial: true, MaxTokens: 160, Grammar: call.Grammar}, `"arguments"`, 40},
	} {
		t.Run(m.name, func(t *testing.T) {
			cases := samplingCases(m.base, m.stop, 7, 23)
			r := m.base
			r.IgnoreEOS = true
			cases = append(cases, r)

			outputs := func(cfg engine.Config) ([]output, engine.Stats) {
				cfg.ModelPath, cfg.Parallel, cfg.Threads = m.path, 1, testThreads
				e, err := engine.New(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				var outs []output
				for _, req := range cases {
					outs = append(outs, run(t, e, req))
				}
				return outs, e.Stats()
			}
			// The answer to a prompt that leaves m.room cells of the
			// slot's context ends inside the grammar's text.
			var long engine.Request
			short := func(cfg engine.Config) output {
				cfg.ModelPath, cfg.Parallel, cfg.Threads, cfg.CtxSize = m.path, 1, testThreads, 256
				e, err := engine.New(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				if long.Tokens == nil {
					long = m.base
					var toks []int32
					for text := m.base.Prompt; len(toks) < e.Info().CtxPerRequest-m.room; text += " " + m.base.Prompt {
						if toks, err = e.Tokenize(text, true, false); err != nil {
							t.Fatal(err)
						}
					}
					long.Tokens = toks[:e.Info().CtxPerRequest-m.room]
				}
				return run(t, e, long)
			}
			off, offStats := outputs(engine.Config{JumpForward: engine.JumpOff})
			on, onStats := outputs(engine.Config{JumpForward: engine.JumpConfirm})
			off, on = append(off, short(engine.Config{JumpForward: engine.JumpOff})), append(on, short(engine.Config{JumpForward: engine.JumpConfirm}))
			for i := range off {
				a, b := off[i], on[i]
				if a.text != b.text || a.res.FinishReason != b.res.FinishReason || a.res.Usage.CompletionTokens != b.res.Usage.CompletionTokens {
					t.Errorf("case %d: off %q (%s, %d tokens), on %q (%s, %d tokens)", i, a.text, a.res.FinishReason, a.res.Usage.CompletionTokens,
						b.text, b.res.FinishReason, b.res.Usage.CompletionTokens)
				}
				if !reflect.DeepEqual(a.lps, b.lps) {
					t.Errorf("case %d: logprobs differ:\noff %v\n on %v", i, a.lps, b.lps)
				}
				if a.res.FinishReason == engine.FinishError {
					t.Errorf("case %d: %v", i, a.res.Err)
				}
			}
			if last := off[len(off)-1]; last.res.FinishReason != engine.FinishLength || last.res.Usage.CompletionTokens != m.room+1 {
				t.Errorf("the context did not end the answer: %q %+v", last.text, last.res)
			}
			if offStats.DraftTokens != 0 || onStats.DraftAccepted == 0 || onStats.Steps >= offStats.Steps {
				t.Errorf("steps: %d off, %d on (%d of %d drafted tokens confirmed)", offStats.Steps, onStats.Steps, onStats.DraftAccepted, onStats.DraftTokens)
			}
			t.Logf("%d cases: %d steps off, %d on; %d of %d drafted tokens confirmed", len(off), offStats.Steps, onStats.Steps, onStats.DraftAccepted, onStats.DraftTokens)
		})
	}
}

// TestJumpForwardForce: with JumpForce (the default) the synthetic model,
// whose random weights write the markup of a forced call in tokens of
// their own (byte tokens as often as not), gets the markup written in the
// drafted tokens: a complete call in at most half the steps plain
// decoding takes, and fewer than with JumpConfirm, whole and under
// concurrency, with a sampled answer as with a greedy one.
func TestJumpForwardForce(t *testing.T) {
	tiny := synthTiny(t)
	call := forcedCall(t)
	base := engine.Request{Prompt: "Call it.", AddSpecial: true, MaxTokens: 160, Grammar: call.Grammar}
	sampled := base
	sampled.Sampling = engine.Sampling{Temperature: 0.9, TopK: 40, TopP: 0.95, Seed: 7}
	steps := map[engine.JumpMode]uint64{}
	var forced []string // the answers with JumpForce
	for _, mode := range []engine.JumpMode{engine.JumpOff, engine.JumpConfirm, engine.JumpForce} {
		e, err := engine.New(context.Background(), engine.Config{ModelPath: tiny, Parallel: 2, Threads: testThreads, JumpForward: mode})
		if err != nil {
			t.Fatal(err)
		}
		for _, req := range []engine.Request{base, sampled} {
			out := run(t, e, req)
			if out.res.FinishReason != engine.FinishStop {
				t.Fatalf("%s: finish %s (%v): %q", mode, out.res.FinishReason, out.res.Err, out.text)
			}
			checkForcedCall(t, string(mode), out.text)
			if mode == engine.JumpForce {
				forced = append(forced, out.text)
			}
		}
		// Two at once, drafting in the same steps.
		var wg sync.WaitGroup
		texts := make([]string, 2)
		for i, req := range []engine.Request{base, sampled} {
			s := submit(t, e, req)
			wg.Add(1)
			go func() {
				defer wg.Done()
				texts[i], _ = collect(t, s)
			}()
		}
		wg.Wait()
		for _, text := range texts {
			checkForcedCall(t, string(mode)+" together", text)
		}
		steps[mode] = e.Stats().Steps
		e.Close()
	}
	// Steps with little room cut the drafts short: the forced text is
	// still written in the same tokens, so the answers are the same.
	e, err := engine.New(context.Background(), engine.Config{ModelPath: tiny, Parallel: 1, Threads: testThreads, BatchSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for i, req := range []engine.Request{base, sampled} {
		if got := run(t, e, req).text; got != forced[i] {
			t.Errorf("with drafts cut short:\n got %q\nwant %q", got, forced[i])
		}
	}
	t.Logf("steps for 4 calls: %v", steps)
	if steps[engine.JumpForce]*2 > steps[engine.JumpOff] || steps[engine.JumpForce] >= steps[engine.JumpConfirm] {
		t.Errorf("steps: %v, want force at most half of off and fewer than confirm", steps)
	}
}

// checkForcedCall checks that text is the Hermes call forcedCall's grammar
// forces: its markup, the function's name, and arguments that are a JSON
// object with the three parameters.
func checkForcedCall(t *testing.T, what, text string) {
	t.Helper()
	body, ok := strings.CutPrefix(text, "<tool_call>\n")
	body, ok2 := strings.CutSuffix(body, "\n</tool_call>")
	var c struct {
		Name      string                     `json:"name"`
		Arguments map[string]json.RawMessage `json:"arguments"`
	}
	if !ok || !ok2 || json.Unmarshal([]byte(body), &c) != nil || c.Name != "get_weather" || len(c.Arguments) != 3 {
		t.Errorf("%s: not the forced call: %q", what, text)
	}
}

// TestJumpForwardConcurrent: requests with grammars drafting in the same
// steps, beside one without, each give what they give alone.
func TestJumpForwardConcurrent(t *testing.T) {
	reqs := []engine.Request{
		{Prompt: "One day,", Grammar: storyGrammar},
		{Prompt: "Once upon a time,", Grammar: storyGrammar},
		{Prompt: "Lily was happy.", Grammar: `root ::= " She said, \"I want to play with the " [a-z]+ "!\" Her mom said, \"" [a-zA-Z ,.!]+`},
		{Prompt: "The little dog"},
	}
	alone := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1})
	want := make([]string, len(reqs))
	for i := range reqs {
		reqs[i].AddSpecial, reqs[i].MaxTokens = true, 16
		want[i] = run(t, alone, reqs[i]).text
	}
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: len(reqs)})
	got := make([]string, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		s := submit(t, e, req)
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = collect(t, s)
		}()
	}
	wg.Wait()
	for i := range reqs {
		if got[i] != want[i] {
			t.Errorf("%q: %q together, %q alone", reqs[i].Prompt, got[i], want[i])
		}
	}
	if st := e.Stats(); st.DraftAccepted == 0 {
		t.Errorf("no drafted token confirmed: %+v", st)
	} else {
		t.Logf("%d steps, %d of %d drafted tokens confirmed", st.Steps, st.DraftAccepted, st.DraftTokens)
	}
}

// TestJumpForwardPreempted: a request drafting ahead that is preempted
// for a better class, and resumes, gives what it gives alone.
func TestJumpForwardPreempted(t *testing.T) {
	model := testmodel.TinyStories656K
	low := engine.Request{Prompt: "One day,", AddSpecial: true, MaxTokens: 100, IgnoreEOS: true, Priority: 1, Grammar: storyGrammar}
	want := alone(t, model, low)
	e := newEngine(t, model, engine.Config{Parallel: 1})
	l := submit(t, e, low)
	waitDecoding(t, e, l, 5)
	if _, res := collect(t, submit(t, e, engine.Request{Prompt: "Hello", AddSpecial: true, MaxTokens: 8})); res.FinishReason != engine.FinishLength {
		t.Fatalf("the better-class request: %+v", res)
	}
	got, res := collect(t, l)
	if res.Preemptions != 1 || got != want {
		t.Errorf("%d preemptions:\n got %q\nwant %q", res.Preemptions, got, want)
	}
	if st := settled(t, e, 2); st.DraftAccepted == 0 {
		t.Errorf("no drafted token confirmed: %+v", st)
	}
}

// TestJumpForwardRecurrent: on recurrent and hybrid models, whose state
// cannot drop drafted tokens, a forced call drafts its markup (JumpForce,
// the default) in fewer steps than without, and writes the same answer
// whether its drafts are taken whole, cut short by a small batch, or
// ended after their first token as a rejection would end them (the slot
// goes back to its checkpoint and the request resumes from there); the
// next request in that slot gives what a fresh engine gives.
func TestJumpForwardRecurrent(t *testing.T) {
	call := forcedCall(t)
	call.Prompt, call.ParseSpecial = "Call it.", false
	next := greedy(strings.Repeat("Once upon a time there was a dog. ", 4), 8)
	for _, arch := range []string{"qwen35", "mamba"} {
		t.Run(arch, func(t *testing.T) {
			cfg := engine.Config{ModelPath: testsynth.Arch(t, t.TempDir(), arch), Parallel: 1, CtxSize: 1024, Threads: testThreads, HostCacheBytes: 16 << 20}
			fresh := func(cfg engine.Config) *engine.Engine {
				e, err := engine.New(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { e.Close() })
				return e
			}
			off := cfg
			off.JumpForward = engine.JumpOff
			eOff := fresh(off)
			if out := run(t, eOff, call); out.res.FinishReason != engine.FinishStop {
				t.Fatalf("without drafts: finish %s (%v): %q", out.res.FinishReason, out.res.Err, out.text)
			}
			wantNext := archTokens(t, fresh(cfg), next.Prompt, 8)

			e := fresh(cfg)
			want := run(t, e, call)
			checkForcedCall(t, "drafts taken whole", want.text)
			t.Logf("%d steps with drafts, %d without", e.Stats().Steps, eOff.Stats().Steps)
			if st, stOff := e.Stats(), eOff.Stats(); st.DraftAccepted == 0 || st.Steps >= stOff.Steps {
				t.Errorf("drafts: %d steps (%d drafted tokens taken), %d without drafts; want fewer, some taken", st.Steps, st.DraftAccepted, stOff.Steps)
			}
			small := cfg
			small.BatchSize = 3
			if got := run(t, fresh(small), call); got.text != want.text {
				t.Errorf("drafts cut short by the batch:\n got %q\nwant %q", got.text, want.text)
			}
			cut := fresh(engine.CutDrafts(cfg, 0))
			got := run(t, cut, call)
			if got.text != want.text || got.res.Preemptions == 0 {
				t.Errorf("drafts ended after their first token: %d resumes\n got %q\nwant %q", got.res.Preemptions, got.text, want.text)
			}
			if got := archTokens(t, cut, next.Prompt, 8); !slices.Equal(got, wantNext) {
				t.Errorf("the next request: got %v, want %v (a fresh engine's)", got, wantNext)
			}
		})
	}
}
