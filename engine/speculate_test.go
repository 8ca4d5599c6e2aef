package engine_test

import (
	"context"
	"fmt"
	"math"
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

// TestSpeculationOutputIsTheSame: with speculation on, by n-gram lookup
// or by a draft model (the model itself, whose guesses it mostly takes),
// every request gives byte for byte what it gives with it off, and the
// same log-probabilities bit for bit (on a hybrid model, within 5e-4:
// see its case): greedy, sampled with a seed, with
// penalties, with logprobs, cut by max tokens or a stop string, under a
// grammar (forced text drafted as such, guesses between), one at a time
// and four at once; and drafted tokens were taken, in fewer steps.
//
// Four at once, each slot has a KV buffer of its own (KVPerSlot): in the
// shared pool, two slots that drop drafted cells in one step leave holes
// that the next step's tokens fill in another order, and a sequence
// whose cells are out of position order has its attention summed in
// another order (the last bits differ, as with jump-forward's drafts).
func TestSpeculationOutputIsTheSame(t *testing.T) {
	dir := t.TempDir()
	for _, m := range []struct {
		name, path string
		draft      string // the draft model ("": the model itself)
		base       engine.Request
		stop       string
		// tol is how far log-probabilities may be (0: bit for bit);
		// all: every batched output is compared, not only greedy ones
		// without a grammar.
		tol float64
		all bool
		// refused: the draft model's drafts are all refused; they are
		// drafted, and the outputs the same, but no step is saved.
		refused bool
		// mtp: the model drafts with its MTP head alone.
		mtp bool
	}{
		// TinyStories repeats its names and phrases; the prompt, copied,
		// is what prompt lookup finds.
		{"tinystories", testmodel.Path(t, testmodel.TinyStories656K), "",
			engine.Request{Prompt: "Tom and his mom went to the park. Tom and his mom went to the", AddSpecial: true, MaxTokens: 96}, "mom", 0, true, false, false},
		// Random weights fall into loops, which the lookup finds in the
		// output itself.
		{"synthetic tiny", synthTiny(t), "", engine.Request{Prompt: "Once upon a time", AddSpecial: true, MaxTokens: 96}, "a", 0, true, false, false},
		// A hybrid of a recurrent state and attention (Qwen3.5): its
		// state goes back over refused drafts by llama.cpp's rollback.
		// Its draft model is a llama of the same vocabulary (a draft
		// model keeps no recurrent state, and its random weights are
		// not the model's: its drafts are refused). A drafted step
		// evaluates several tokens of a sequence's recurrent layers at
		// once, which llama.cpp computes in the chunked form of the gated
		// delta net: log-probabilities move by up to 1.5e-4. Batched, its
		// plain decoding does not give the outputs of one request at a
		// time either (llama.cpp splits a batch of recurrent sequences
		// into equal parts, which sum in another order): a sampled token
		// flips now and then, speculation or not, and so did, once in 40
		// runs, a greedy choice among the letters the grammar allows (the
		// random weights' near ties). Batched, only greedy outputs without
		// a grammar are compared.
		{"synthetic qwen35", testsynth.Arch(t, dir, "qwen35"), testsynth.Arch(t, dir, "llama"),
			engine.Request{Prompt: "Once upon a time", AddSpecial: true, MaxTokens: 96}, "a", 5e-4, false, true, false},
		// The same with an MTP head (random weights: its guesses are
		// refused), alone and batched, where the head drafts for 4 slots
		// at once. Batched, both drafting sources once gave, about once
		// in a hundred runs, a greedy case that left plain decoding's
		// text two tokens after a refused draft: llama.cpp had moved the
		// slot's recurrent state after writing its rollback copies
		// (llama's TestRollbackAfterCellsMove).
		{"synthetic qwen35 with an MTP head", testsynth.ArchMTP(t, dir, "qwen35"), "",
			engine.Request{Prompt: "Once upon a time", AddSpecial: true, MaxTokens: 96}, "a", 5e-4, false, true, true},
	} {
		if m.draft == "" {
			m.draft = m.path
		}
		cases := samplingCases(m.base, m.stop, 9)
		r := m.base
		r.Grammar = storyGrammar
		cases = append(cases, r)

		outputs := func(t *testing.T, spec engine.Speculation, parallel int, mode func(engine.Config) engine.Config) ([]output, engine.Stats) {
			cfg := mode(engine.Config{ModelPath: m.path, Parallel: parallel, Threads: testThreads, Speculate: spec, KVPerSlot: true})
			e, err := engine.New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			outs := make([]output, len(cases))
			if parallel == 1 {
				for i, req := range cases {
					outs[i] = run(t, e, req)
				}
				return outs, e.Stats()
			}
			for i := 0; i < len(cases); i += parallel {
				var wg sync.WaitGroup
				for j := i; j < min(i+parallel, len(cases)); j++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						outs[j] = run(t, e, cases[j])
					}()
				}
				wg.Wait()
			}
			return outs, e.Stats()
		}
		asMeasured := func(c engine.Config) engine.Config { return c } // drafts where the measured cost says
		off, offStats := outputs(t, engine.Speculation{}, 1, asMeasured)
		for i := range off {
			if off[i].res.FinishReason == engine.FinishError {
				t.Errorf("%s case %d: %v", m.name, i, off[i].res.Err)
			}
		}
		type source struct {
			name string
			spec engine.Speculation
		}
		sources := []source{
			{"ngram", engine.Speculation{Ngram: true, Recurrent: true}},
			{"draft model", engine.Speculation{Model: m.draft, Recurrent: true}},
		}
		if m.mtp {
			sources = []source{{"mtp", engine.Speculation{MTP: true}}}
		}
		for _, src := range sources {
			t.Run(m.name+"/"+src.name, func(t *testing.T) {
				on, onStats := outputs(t, src.spec, 1, engine.DraftAlways)
				batched, batchedStats := outputs(t, src.spec, 4, engine.DraftAlways)
				measured, _ := outputs(t, src.spec, 4, asMeasured)
				for i := range off {
					for name, b := range map[string]output{"alone": on[i], "batched": batched[i], "measured": measured[i]} {
						a := off[i]
						if name != "alone" && !m.all && (cases[i].Sampling.Temperature > 0 || cases[i].Grammar != "") {
							continue
						}
						if a.text != b.text || a.res.FinishReason != b.res.FinishReason || a.res.Usage.CompletionTokens != b.res.Usage.CompletionTokens {
							t.Errorf("case %d %s: off %q (%s, %d tokens), on %q (%s, %d tokens)", i, name, a.text, a.res.FinishReason, a.res.Usage.CompletionTokens,
								b.text, b.res.FinishReason, b.res.Usage.CompletionTokens)
						}
						if !logprobsClose(a.lps, b.lps, m.tol) {
							t.Errorf("case %d %s: logprobs differ:\noff %v\n on %v", i, name, a.lps, b.lps)
						}
					}
				}
				if m.refused && (src.spec.Model != "" || src.spec.MTP) {
					if offStats.Spec.Drafts != 0 || onStats.Spec.DraftTokens == 0 || batchedStats.Spec.DraftTokens == 0 {
						t.Errorf("drafted tokens: %d off, %d alone, %d batched", offStats.Spec.DraftTokens, onStats.Spec.DraftTokens, batchedStats.Spec.DraftTokens)
					}
					return
				}
				if offStats.Spec.Drafts != 0 || onStats.Spec.Accepted == 0 || batchedStats.Spec.Accepted == 0 || onStats.Steps >= offStats.Steps {
					t.Errorf("steps: %d off, %d on; %d of %d drafted tokens taken alone, %d batched", offStats.Steps, onStats.Steps,
						onStats.Spec.Accepted, onStats.Spec.DraftTokens, batchedStats.Spec.Accepted)
				}
				var at uint64
				for _, n := range onStats.Spec.AcceptedAt {
					at += n
				}
				if at != onStats.Spec.Accepted || onStats.Spec.AcceptedAt[0] < onStats.Spec.AcceptedAt[len(onStats.Spec.AcceptedAt)-1] {
					t.Errorf("taken by position %v; want them to sum to %d, fewer at later positions", onStats.Spec.AcceptedAt, onStats.Spec.Accepted)
				}
				t.Logf("%d cases: %d steps off, %d on; %d drafts, %d of %d tokens taken (by position %v)", len(off), offStats.Steps, onStats.Steps,
					onStats.Spec.Drafts, onStats.Spec.Accepted, onStats.Spec.DraftTokens, onStats.Spec.AcceptedAt)
			})
		}
	}
}

// TestSpeculationDraftsOnlyWhatTheGrammarAllows: a request whose grammar
// allows "ab" and then x and y, after a prompt where "ab" is always
// followed by a full stop (what the lookup drafts after the answer's
// "ab"), evaluates only drafts of x and y, and the same answer as
// without drafts.
func TestSpeculationDraftsOnlyWhatTheGrammarAllows(t *testing.T) {
	path := synthTiny(t)
	req := engine.Request{Prompt: strings.Repeat("ab.", 12), AddSpecial: true, MaxTokens: 48, IgnoreEOS: true,
		Grammar: `root ::= "ab" [xy]*`}
	answer := func(cfg engine.Config) string {
		e, err := engine.New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		text, _ := collect(t, submit(t, e, req))
		return text
	}
	cfg := engine.Config{ModelPath: path, Parallel: 1, Threads: testThreads}
	plain := answer(cfg)
	var mu sync.Mutex
	var drafts [][]int32
	on := cfg
	on.Speculate = engine.Speculation{Ngram: true}
	on = engine.Drafted(engine.DraftAlways(on), func(_ int, d []int32, _ bool, _ int) {
		mu.Lock()
		defer mu.Unlock()
		drafts = append(drafts, slices.Clone(d))
	})
	if got := answer(on); got != plain {
		t.Errorf("with speculation %q, without %q", got, plain)
	}
	e, err := engine.New(context.Background(), cfg) // to read the drafts
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(drafts) == 0 {
		t.Fatal("no draft was evaluated")
	}
	texts := make([]string, len(drafts))
	for i, d := range drafts {
		texts[i] = e.Detokenize(d)
		if strings.Trim(texts[i], "xy") != "" {
			t.Errorf("a draft the grammar refuses was evaluated: %q (of %d drafts)", texts[i], len(drafts))
		}
	}
	t.Logf("%d drafts: %q", len(drafts), texts)
}

// TestSpeculationLookup: the draft is what followed the latest earlier
// occurrence of the longest run of the last tokens (of 2 to 4, or of 3
// or 4 where least is 3), cut at a medium.
func TestSpeculationLookup(t *testing.T) {
	for _, tc := range []struct {
		toks  []int32
		n     int
		want  []int32
		least int
	}{
		{[]int32{1, 2, 3, 4, 9, 1, 2, 3, 5, 7, 2, 3}, 8, []int32{5, 7, 2, 3, 5, 7, 2, 3}, 2}, // "2 3" latest at 6 (no earlier 3-run "7 2 3"), and on
		{[]int32{1, 2, 3, 4, 9, 8, 1, 2, 3}, 2, []int32{4, 9}, 2},                            // "1 2 3": at most n
		{[]int32{5, 6, 7, 8}, 4, nil, 2},                                                     // no run repeats
		{[]int32{1, 2, 3, -5, -6, 4, 1, 2}, 4, []int32{3}, 2},                                // up to a placeholder
		{[]int32{4, 4, 4, 4}, 3, []int32{4, 4, 4}, 2},                                        // "4 4 4" at 0: what follows it, and on
		{[]int32{5, 1, 2, 1, 2}, 6, []int32{1, 2, 1, 2, 1, 2}, 2},                            // a loop of 2 goes on past the end
		{[]int32{5, 1, 2, 3, 1, 2}, 5, []int32{3, 1, 2, 3, 1}, 2},                            // of 3
		{[]int32{1, 2, 1, 2, 3, 1, 2}, 1, []int32{3}, 2},                                     // the latest occurrence
		{[]int32{7, 1, 2, 3, 7, 1, 2, 8, 1, 2, 3}, 3, []int32{7, 1, 2}, 2},                   // the longest run first ("1 2 3" at 1)
		{[]int32{7, 1, 2, 3, 9, 9, 9, 9, 9, 9, 9, 9, 9, 1, 2}, 2, []int32{3, 9}, 2},          // a 2-run
		{[]int32{1, 2, 3, 4, 9, 1, 2, 3, 5, 7, 2, 3}, 8, nil, 3},                             // no earlier 3-run
		{[]int32{7, 1, 2, 3, 7, 1, 2, 8, 1, 2, 3}, 3, []int32{7, 1, 2}, 3},                   // "1 2 3" is one
		{[]int32{7, 1, 2, 3, 7, 1, 2, 8, 1, 2, 3}, 3, nil, 4},                                // "8 1 2 3" is not
	} {
		if got := engine.Lookup(tc.toks, tc.least, 4, tc.n); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("lookup(%v, %d to 4, %d) = %v; want %v", tc.toks, tc.least, tc.n, got, tc.want)
		}
	}
}

// TestSpeculationBulkLookup: beside more decoding slots than
// MaxDecoding, a request whose drafts have not grown to 16 tokens drafts
// only where its last 16 tokens came before in its prompt (a quote), not
// where its output loops on itself; one whose drafts have, on a run of 2
// or more, as below the bound.
func TestSpeculationBulkLookup(t *testing.T) {
	var passage []int32
	for i := range int32(20) {
		passage = append(passage, 100+i)
	}
	quoted := append(append(append([]int32{1}, passage...), 7, 8), passage[:16]...) // the passage, then its first 16 again
	const quotePrompt = 1 + 20 + 2 + 6                                              // the quote's first 6 tokens are the prompt's last
	loop := []int32{1, 5, 6, 7, 9, 5, 6, 7, 9, 5, 6, 7}                             // a loop of 4 tokens
	long := []int32{1, 2}                                                           // a prompt of 2, then an output looping on itself
	for range 10 {
		long = append(long, 5, 6, 7, 9)
	}
	for _, tc := range []struct {
		toks   []int32
		prompt int
		grown  bool
		want   []int32
	}{
		{quoted, quotePrompt, false, passage[16:]},
		{quoted, quotePrompt, true, passage[16:]},
		{quoted, len(quoted), false, passage[16:]}, // a prompt that repeats itself
		{loop, len(loop), false, nil},
		{loop, len(loop), true, []int32{9, 5, 6, 7}},
		{long, 2, false, nil},
		{long, 2, true, []int32{5, 6, 7, 9}},
	} {
		if got := engine.BulkLookup(tc.toks, tc.prompt, tc.grown, 4); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("bulk lookup(%v, prompt %d, grown %v) = %v; want %v", tc.toks, tc.prompt, tc.grown, got, tc.want)
		}
	}
}

// TestSpeculationPreempted: a request that drafts, preempted while it
// decodes by one of a better class, resumes and gives what it gives
// without speculation; one cancelled while it drafts leaves the engine
// answering whole. On TinyStories, whose greedy tokens
// win by clear margins, with a KV buffer per slot (KVPerSlot): the
// history a resumed request evaluates again as a prompt sums its
// attention in another order than decoding did, and a random model's
// near-ties would flip on the last bits.
func TestSpeculationPreempted(t *testing.T) {
	path := testmodel.Path(t, testmodel.TinyStories656K)
	low := engine.Request{Prompt: "Tom and his mom went to the park. Tom and his mom went to the", AddSpecial: true, MaxTokens: 200, IgnoreEOS: true, Logprobs: true, Priority: 1}
	want := tokensOf(run(t, startEngine(t, engine.Config{ModelPath: path, Parallel: 1, Threads: testThreads, KVPerSlot: true}), low).lps)
	for name, spec := range map[string]engine.Speculation{"ngram": {Ngram: true}, "draft model": {Model: path}} {
		t.Run(name, func(t *testing.T) {
			cpu := engine.NewCPU(1)
			e := startEngine(t, engine.DraftAlways(engine.Config{ModelPath: path, Parallel: 1, Threads: testThreads, CPU: cpu, KVPerSlot: true, Speculate: spec}))
			l := submit(t, e, low)
			waitState(t, e, l, "decode")
			hold := engine.HoldCPU(cpu)
			h := submit(t, e, greedy("Hello", 4))
			hold()
			if _, res := collect(t, h); res.FinishReason != engine.FinishLength {
				t.Errorf("the preempting request: %s (%v)", res.FinishReason, res.Err)
			}
			_, lps, res := collectLogprobs(t, l)
			if got := tokensOf(lps); !reflect.DeepEqual(got, want) || res.Preemptions != 1 {
				t.Errorf("preempted %d times: %v; want once, %v", res.Preemptions, got, want)
			}
			if st := e.Stats(); st.Spec.Accepted == 0 {
				t.Errorf("no drafted token taken: %+v", st.Spec)
			}

			ctx, cancel := context.WithCancel(context.Background())
			s, err := e.Submit(ctx, low)
			if err != nil {
				t.Fatal(err)
			}
			waitState(t, e, s, "decode")
			cancel()
			collect(t, s)
			// Not compared with want: a request cancelled as it starts to decode
			// changed the next one's answer, speculation or not, in 2 runs of 30
			// under -race on a loaded machine (none of 90 on a quiet one; see the
			// closing note of the stop that added this test).
			if out := run(t, e, low); out.res.FinishReason != engine.FinishLength || out.res.Usage.CompletionTokens != low.MaxTokens {
				t.Errorf("after a cancel: %s with %d tokens (%v); want %d", out.res.FinishReason, out.res.Usage.CompletionTokens, out.res.Err, low.MaxTokens)
			}
		})
	}
}

// TestSpeculationDraftMin: with drafts of 3 tokens at most (DraftMax and
// NgramDraftMax), DraftMin 1 makes shorter ones too (after a draft taken
// in part, and near max tokens), DraftMin 3 none; the output is still
// plain decoding's.
func TestSpeculationDraftMin(t *testing.T) {
	tiny := synthTiny(t)
	req := engine.Request{Prompt: "Once upon a time", AddSpecial: true, MaxTokens: 160, IgnoreEOS: true, Logprobs: true}
	want := tokensOf(run(t, startEngine(t, engine.Config{ModelPath: tiny, Parallel: 1, Threads: testThreads}), req).lps)
	for _, min := range []int{1, 3} {
		e := startEngine(t, engine.DraftAlways(engine.Config{ModelPath: tiny, Parallel: 1, Threads: testThreads, Speculate: engine.Speculation{Ngram: true, DraftMax: 3, NgramDraftMax: 3, DraftMin: min}}))
		got := tokensOf(run(t, e, req).lps)
		st := e.Stats().Spec
		if short := st.DraftTokens < 3*st.Drafts; !reflect.DeepEqual(got, want) || st.Drafts == 0 || short != (min == 1) {
			t.Errorf("DraftMin %d: %d drafts of %d tokens (the same output: %v); want shorter ones than 3: %v", min, st.Drafts, st.DraftTokens, reflect.DeepEqual(got, want), min == 1)
		}
	}
}

// TestDraftCost: speculation's cost model drafts only where a step
// without drafts has been measured (and not in one step of 64, which
// measures it again), and then where a slot's share of drafted tokens
// taken beats a drafted token's measured cost in units of a token's share
// of the step, each at the step's number of decoding slots; where no
// acceptance pays, one step in 256 measures again. Steps that evaluate
// prompt tokens are not measured.
func TestDraftCost(t *testing.T) {
	c := engine.NewDraftCost(8)
	if c.Step(0) || c.Step(9) || c.Step(1) {
		t.Fatal("a step drafts with no slot decoding, more than the slots, or no step measured")
	}
	c.Observe(1, 0, 0, 0.0075) // one token: 7.5 ms
	if !c.Step(1) || !c.Measures(1) {
		t.Fatal("no draft once a step is measured, before a draft's cost is")
	}
	c.Observe(1, 1, 0, 0.015) // a drafted token adds 7.5 ms
	if c.Worth(1, 0.9) || c.Worth(1, 1) || !c.Dear(1) {
		t.Error("a lone slot drafts where a drafted token costs what a step does")
	}
	if !c.Measures(1) {
		t.Error("dear on one measure: want a second before drafts stop")
	}
	c.Observe(1, 8, 0, 0.0075+8*0.00025) // now 8 drafted tokens add 2 ms
	if c.Dear(1) || !c.Worth(1, 0.9) {
		t.Error("a lone slot's long drafts, cheap, did not make drafts worth it again")
	}
	c.Observe(4, 0, 0, 0.022) // four slots: 5.5 ms a token
	c.Observe(4, 4, 0, 0.024) // four drafted tokens add 2 ms
	if !c.Worth(4, 0.1) || c.Worth(4, 0.05) || c.Measures(4) {
		t.Error("in a step of 4 slots: want a draft taken at 10% (0.55 ms saved a token for 0.5), not at 5%")
	}
	if !c.Measures(2) {
		t.Error("the cost at 2 slots is not measured: want a measuring draft")
	}
	c.Observe(4, 4, 16, 1) // with prompt tokens: not measured
	c.Observe(0, 4, 0, 1)
	if !c.Worth(4, 0.1) {
		t.Error("a step with prompt tokens changed the measure")
	}
	drafts := 0
	for range 128 {
		if c.Step(4) {
			drafts++
		}
	}
	if drafts != 126 {
		t.Errorf("%d steps of 128 may draft; want 126 (one in 64 measures a step without drafts)", drafts)
	}

	// Beside 7 other slots a drafted token costs what a decoded one
	// does: dear, whatever the acceptance, but measured again now and
	// then (one step in 256 times rel, 1.01 here: 259).
	c.Observe(8, 0, 0, 0.040)  // 5 ms a token
	c.Observe(8, 8, 0, 0.0805) // a drafted token adds 5.06 ms
	c.Observe(8, 8, 0, 0.0805) // twice: dear on two measures
	if !c.Dear(8) || c.Worth(8, 1) || c.Dear(4) {
		t.Error("8 slots, a drafted token dearer than a decoded one: want dear there, not worth at any acceptance, and not dear at 4")
	}
	probes := func(d, steps int) int {
		n := 0
		for range steps {
			c.Step(d)
			if c.Measures(d) {
				n++
				c.Probed(d)
			}
		}
		return n
	}
	if n := probes(8, 1024); n != 3 {
		t.Errorf("%d steps of 1024 at 8 slots measure drafts; want 3 (one in 259)", n)
	}
	// Ten times dearer (a draft model catching up): ten times rarer.
	c.Observe(2, 0, 0, 0.010)      // 5 ms a token
	c.Observe(2, 4, 0, 0.010+0.25) // a drafted token adds 62.5 ms: rel 12.5
	c.Observe(2, 4, 0, 0.010+0.25)
	if n := probes(2, 3200*2); n != 2 {
		t.Errorf("%d steps of 6,400 at 2 slots measure drafts; want 2 (one in 3,200)", n)
	}
	// Dear at 2 slots, so at 3, unmeasured (where a draft model is not
	// asked for a first measure); not below 2.
	if !c.DearBelow(3) || c.DearBelow(2) || c.Dear(3) {
		t.Error("3 slots, unmeasured, above 2 where drafts are dear: want dear below 3, not below 2, and 3 not dear by its own measure")
	}
}

// TestDraftCostConfirmsDear: one measure that says drafts are dear (a
// step slowed by something else, as a busy machine gives) does not stop
// them: the first two measures count alike, and drafts stop only when
// both together say so.
func TestDraftCostConfirmsDear(t *testing.T) {
	c := engine.NewDraftCost(4)
	c.Observe(3, 0, 0, 0.024)       // 8 ms a token
	c.Observe(3, 8, 0, 0.024+0.080) // one slow step: a drafted token adds 10 ms (rel 1.25)
	if !c.Dear(3) || !c.Measures(3) {
		t.Fatal("want dear after one slow measure, and measured again")
	}
	c.Observe(3, 8, 0, 0.024+0.016) // 2 ms a drafted token (rel 0.25)
	if c.Dear(3) || !c.Worth(3, 0.8) || c.Measures(3) {
		t.Error("a second measure of 0.25 after 1.25: want rel 0.75, worth at 80 %, and no more measures")
	}
	c.Observe(4, 0, 0, 0.024)
	c.Observe(4, 4, 0, 0.024+0.024) // rel 1
	c.Observe(4, 4, 0, 0.024+0.030) // rel 1.25
	if !c.Dear(4) || c.Measures(4) {
		t.Error("dear on two measures: want dear, not measured again at once")
	}
}

// TestDraftCostWithPrompts: a step that also evaluates a prompt measures
// nothing, so it may draft where no plain step has been measured yet, and
// where drafts are not measured its drafts are judged by what a prompt
// token costs over a decoded token's share of a plain step: of the count
// itself, or of the most of fewer slots, or else of the least of more.
func TestDraftCostWithPrompts(t *testing.T) {
	c := engine.NewDraftCost(8)
	if c.Step(2) || !c.StepWithPrompt(2) {
		t.Error("2 slots, no plain step measured: want no draft in a plain step, drafts beside a prompt")
	}
	if r := c.PromptRel(2, 0.002); r != 0 {
		t.Errorf("no plain step measured: rel %v beside a prompt, want 0 (unknown)", r)
	}
	c.Observe(4, 0, 0, 0.024) // 6 ms a token
	if r := c.PromptRel(2, 0.002); math.Abs(r-0.002/0.012) > 1e-9 {
		t.Errorf("2 slots, only 4 measured: rel %v, want a prompt token over 4 slots' step shared by 2 (%v)", r, 0.002/0.012)
	}
	c.Observe(1, 0, 0, 0.010)
	c.Observe(3, 0, 0, 0.020)
	if r := c.PromptRel(2, 0.002); math.Abs(r-0.002/(0.010/2)) > 1e-9 {
		t.Errorf("2 slots, 1 and 3 measured: rel %v, want a prompt token over 1 slot's step shared by 2 (%v)", r, 0.002/(0.010/2))
	}
	if r := c.PromptRel(3, 0.002); math.Abs(r-0.002/(0.020/3)) > 1e-9 {
		t.Errorf("3 slots measured: rel %v, want %v", r, 0.002/(0.020/3))
	}
	if r := c.PromptRel(3, 0); r != 0 {
		t.Errorf("no prompt token measured: rel %v, want 0", r)
	}
}

// TestDraftModelCost: what a draft model's measure costs beyond its step
// (its catch-up with what a slot wrote while it did not draft) is left
// out of what drafts cost, a step where it only caught up measures
// nothing, dear drafts are measured again only once the steps since
// take resumeShare (50) times that catch-up, and a count of decoding
// slots is first measured only once the batch has stayed there (settle).
func TestDraftModelCost(t *testing.T) {
	c := engine.NewDraftCost(4)
	c.Settle(32)
	for i := range 32 {
		if c.Step(4) {
			t.Fatalf("step %d of 4 slots drafts before the count has settled (32 steps) or a plain step is measured", i+1)
		}
		c.Observe(4, 0, 0, 0.040) // 10 ms a token
	}
	if !c.Step(4) || !c.Measures(4) {
		t.Fatal("no measuring draft at 4 slots once settled")
	}
	// The catch-up took 600 ms, without drafting: not a plain step.
	c.ObserveModel(4, 0, 0, 0.640, 0.600, 0.600)
	if !c.Step(4) || !c.Measures(4) {
		t.Fatal("a step that only caught up changed the measures: want the next step to measure")
	}
	// Now 4 drafted tokens; the draft model caught up 300 ms more and
	// drafted for 12: a drafted token adds 5 ms, half a decoded token's
	// share.
	c.ObserveModel(4, 4, 0, 0.040+0.300+0.020, 0.312, 0.300)
	if c.Dear(4) || !c.Worth(4, 0.6) || c.Worth(4, 0.4) {
		t.Error("the catch-up counted as what drafts cost: want rel 0.5 (worth at 60 %, not 40 %)")
	}
	// At 2 slots, dear: 12 ms a drafted token against 10, on two
	// measures; the second caught up 1 s in all, so the next is 50 s of
	// steps of 20 ms away (2,500 steps), not 256 times rel (307).
	for range 33 {
		c.Step(2)
		c.Observe(2, 0, 0, 0.020)
	}
	c.Step(2)
	c.ObserveModel(2, 2, 0, 0.020+0.024, 0.010, 0) // dear on a first measure, without a catch-up
	c.Step(2)
	c.ObserveModel(2, 0, 0, 0.520, 0.500, 0.500)
	c.Step(2)
	c.ObserveModel(2, 2, 0, 0.020+0.500+0.024, 0.510, 0.500) // and on a second
	if !c.Dear(2) {
		t.Fatal("2 slots: want dear")
	}
	measured := 0
	for range 2600 {
		c.Step(2)
		if c.Measures(2) {
			measured++
			c.Probed(2)
		}
	}
	if measured != 1 {
		t.Errorf("%d of 2,600 steps of 2 slots measure again; want 1 (one in 2,500)", measured)
	}
}

// TestSpeculationRecurrent: a model with a recurrent state speculates
// only when asked (Speculation.Recurrent), and where llama.cpp keeps the
// state after each of a step's last tokens (Qwen3.5's hybrid): that
// costs a draft's worth of states more (DraftMax, 8, copies of each
// sequence's), and ModelInfo says it speculates. Not asked, or where
// llama.cpp keeps no such states (Mamba), ModelInfo says it speculates
// with nothing, a draft model for it is refused, saying why, and n-gram
// speculation drafts nothing and gives the answer of plain decoding.
func TestSpeculationRecurrent(t *testing.T) {
	dir := t.TempDir()
	draft := testsynth.Arch(t, dir, "llama") // the same vocabulary, no recurrent state
	req := engine.Request{Prompt: "Once upon a time", AddSpecial: true, MaxTokens: 64, IgnoreEOS: true, Logprobs: true}
	refused := func(t *testing.T, cfg engine.Config) {
		t.Helper()
		e, err := engine.New(context.Background(), cfg)
		if err == nil {
			e.Close()
			t.Fatal("a draft model for a recurrent state loaded")
		}
		if !strings.Contains(err.Error(), "recurrent state") {
			t.Errorf("error %q does not say why", err)
		}
	}
	t.Run("qwen35", func(t *testing.T) {
		path := testsynth.Arch(t, dir, "qwen35")
		md, err := gguf.ReadMetadata(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg := engine.Config{ModelPath: path, Parallel: 2, CtxSize: 1024, Speculate: engine.Speculation{Ngram: true}}
		plain, err := engine.EstimateMemory(md, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if info := startEngine(t, cfg).Info(); info.Speculation != nil {
			t.Errorf("not asked: ModelInfo.Speculation %q", info.Speculation)
		}
		cfg.Speculate.Model = draft
		refused(t, cfg)
		cfg.Speculate = engine.Speculation{Model: draft, Recurrent: true}
		with, err := engine.EstimateMemory(md, cfg)
		if err != nil {
			t.Fatal(err)
		}
		e := startEngine(t, engine.DraftAlways(cfg))
		run(t, e, req)
		// The states grow ninefold; the attention cells do not. The
		// draft model's random weights are not the model's: its drafts
		// are refused, and the state goes back over each.
		if info, st := e.Info(), e.Stats(); with.KV <= plain.KV || !reflect.DeepEqual(info.Speculation, []string{"draft:llama"}) || st.Spec.DraftTokens == 0 {
			t.Errorf("KV %d bytes without, %d with; ModelInfo.Speculation %q; %d drafted tokens", plain.KV, with.KV, info.Speculation, st.Spec.DraftTokens)
		}
		// The copies need a buffer per slot (llama's TestRollbackAfterCellsMove).
		withCopies, without := e.Info().KVPerSlot, startEngine(t, engine.Config{ModelPath: path, Parallel: 2, CtxSize: 1024}).Info().KVPerSlot
		if !withCopies || without {
			t.Errorf("a buffer per slot: %v with the copies, %v without", withCopies, without)
		}
	})
	t.Run("mamba", func(t *testing.T) {
		path := testsynth.Arch(t, dir, "mamba")
		want := tokensOf(run(t, startEngine(t, engine.Config{ModelPath: path, Parallel: 1}), req).lps)
		spec := engine.Speculation{Ngram: true, Recurrent: true}
		e := startEngine(t, engine.DraftAlways(engine.Config{ModelPath: path, Parallel: 1, Speculate: spec}))
		got := tokensOf(run(t, e, req).lps)
		if st := e.Stats(); !reflect.DeepEqual(got, want) || st.Spec.DraftTokens != 0 || e.Info().Speculation != nil {
			t.Errorf("the same output: %v; %d drafted tokens; ModelInfo.Speculation %q", reflect.DeepEqual(got, want), st.Spec.DraftTokens, e.Info().Speculation)
		}
		spec.Model = draft
		refused(t, engine.Config{ModelPath: path, Parallel: 1, Speculate: spec})
	})
}

// logprobsClose reports whether two requests' logprobs name the same
// tokens with log-probabilities at most tol apart (0: the same bits).
func logprobsClose(a, b []engine.TokenLogprobs, tol float64) bool {
	if tol == 0 || len(a) != len(b) {
		return reflect.DeepEqual(a, b)
	}
	close := func(x, y engine.TokenLogprob) bool {
		return x.Token == y.Token && x.Text == y.Text && math.Abs(float64(x.Logprob-y.Logprob)) <= tol
	}
	for i := range a {
		if !close(a[i].TokenLogprob, b[i].TokenLogprob) || len(a[i].Top) != len(b[i].Top) {
			return false
		}
		for j := range a[i].Top {
			if !close(a[i].Top[j], b[i].Top[j]) {
				return false
			}
		}
	}
	return true
}

// copyModel writes a model whose weights copy (gguf's Shape.Copy), small
// enough for a test, of training context ctx.
func copyModel(t *testing.T, ctx int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "copy.gguf")
	shape, err := gguf.ParseShape(fmt.Sprintf("embd=160,layers=2,heads=2,kv=1,ff=32,vocab=2048,ctx=%d,type=f32,copy=true", ctx))
	if err != nil {
		t.Fatal(err)
	}
	if err := gguf.WriteSynthetic(path, shape, 1); err != nil {
		t.Fatal(err)
	}
	return path
}

// twoLetterWords returns n two-letter words, each a token of the
// synthetic vocabulary ("▁ab"), the same word again only after 676.
func twoLetterWords(n int) []string {
	var words []string
	for i := range n {
		j := i * 7 % 676 // 7 and 676 are coprime
		words = append(words, string(rune('a'+j/26))+string(rune('a'+j%26)))
	}
	return words
}

// TestSpeculationQuotes: on a model whose weights copy (gguf's
// Shape.Copy), a prompt that quotes the start of a passage of its
// document is answered with the rest of the passage, and n-gram
// speculation drafts it from the prompt: every drafted token is taken,
// the drafts grow past DraftMax (8) while they are taken whole, and the
// answer is the one plain decoding gives.
func TestSpeculationQuotes(t *testing.T) {
	path := copyModel(t, 1024)
	doc := twoLetterWords(150)
	req := engine.Request{Prompt: strings.Join(doc, " ") + "\n\nQuote: " + strings.Join(doc[20:24], " "), AddSpecial: true, MaxTokens: 60}
	want := strings.Join(doc[24:84], " ")

	plain := run(t, startEngine(t, engine.Config{ModelPath: path, Parallel: 1}), req)
	if got := strings.TrimSpace(plain.text); got != want {
		t.Fatalf("the model does not copy:\n got %q\nwant %q", got, want)
	}
	longest := 0
	cfg := engine.Drafted(engine.DraftAlways(engine.Config{ModelPath: path, Parallel: 1, Speculate: engine.Speculation{Ngram: true}}),
		func(_ int, draft []int32, _ bool, _ int) { longest = max(longest, len(draft)) })
	e := startEngine(t, cfg)
	spec := run(t, e, req)
	if spec.text != plain.text {
		t.Errorf("with speculation: %q, want plain decoding's %q", spec.text, plain.text)
	}
	st := e.Stats().Spec
	if st.DraftTokens == 0 || st.Accepted != st.DraftTokens {
		t.Errorf("%d of %d drafted tokens taken; want all, and some", st.Accepted, st.DraftTokens)
	}
	if longest <= 8 {
		t.Errorf("the longest draft had %d tokens; want more than DraftMax (8): drafts taken whole grow to NgramDraftMax (64)", longest)
	}
}

// TestSpeculationBesidePrompts: while a prompt waits, a step's drafts
// take no more tokens than the prompts' share (Config.PrefillBudget, 16
// here), though they had grown to more before it came: long drafts would
// take the step's time from the prompt.
func TestSpeculationBesidePrompts(t *testing.T) {
	path := copyModel(t, 8192)
	doc := twoLetterWords(150)
	quote := engine.Request{Prompt: strings.Join(doc, " ") + "\n\nQuote: " + strings.Join(doc[20:24], " "), AddSpecial: true, MaxTokens: 900, IgnoreEOS: true}
	long := engine.Request{Prompt: strings.Join(twoLetterWords(3000), " "), AddSpecial: true, MaxTokens: 1}
	type drafted struct{ pos, n int }
	var mu sync.Mutex
	var drafts []drafted // the quote's: the long prompt ends after it
	cfg := engine.Drafted(engine.DraftAlways(engine.Config{ModelPath: path, Parallel: 2, CtxSize: 8192, PrefillBudget: 16,
		Speculate: engine.Speculation{Ngram: true}}), func(pos int, draft []int32, _ bool, _ int) {
		mu.Lock()
		defer mu.Unlock()
		if pos < 3000 {
			drafts = append(drafts, drafted{pos, len(draft)})
		}
	})
	e := startEngine(t, cfg)
	s := submit(t, e, quote)
	got := 0
	for got < 80 {
		c, err := s.Recv(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got += c.Tokens
	}
	l := submit(t, e, long)
	collect(t, s)
	if _, res := collect(t, l); res.FinishReason == engine.FinishError {
		t.Fatal(res.Err)
	}
	// The long prompt came once the quote had given got tokens; allow
	// 400 more for the steps the scheduler was ahead, and its admission.
	from := s.Result().Usage.PromptTokens + got + 400
	mu.Lock()
	defer mu.Unlock()
	grown, after := 0, 0
	for _, d := range drafts {
		if d.pos < from {
			grown = max(grown, d.n)
			continue
		}
		after++
		if d.n > 16 {
			t.Errorf("a draft of %d tokens at position %d, while the long prompt waited: want 16 at most", d.n, d.pos)
		}
	}
	if grown <= 16 || after < 5 {
		t.Errorf("drafts grew to %d tokens before the long prompt, and %d came while it waited; want more than 16, and 5 or more", grown, after)
	}
}

// TestSpeculationInBulk: where more slots decode than MaxDecoding, a
// step drafts only in bulk, lookups of 16 tokens or more; two quotes
// decoding beside another request still draft there, and each answer is
// the one plain decoding gives.
func TestSpeculationInBulk(t *testing.T) {
	path := copyModel(t, 2048)
	words := twoLetterWords(300)
	quote := func(from int) engine.Request {
		return engine.Request{Prompt: strings.Join(words, " ") + "\n\nQuote: " + strings.Join(words[from:from+4], " "), AddSpecial: true, MaxTokens: 150}
	}
	reqs := []engine.Request{quote(20), quote(120)}
	plain := startEngine(t, engine.Config{ModelPath: path, Parallel: 1})
	var want []string
	for _, r := range reqs {
		want = append(want, run(t, plain, r).text)
	}
	var mu sync.Mutex
	var short, bulk int // drafts beside another decoding slot: under 16 tokens, and not
	cfg := engine.Drafted(engine.DraftAlways(engine.Config{ModelPath: path, Parallel: 3, CtxSize: 3 * 2048,
		Speculate: engine.Speculation{Ngram: true, MaxDecoding: 1}}), func(_ int, d []int32, _ bool, decoding int) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case decoding <= 1:
		case len(d) < 16:
			short++
		default:
			bulk++
		}
	})
	e := startEngine(t, cfg)
	bg := decodingBeside(t, e)
	var streams []*engine.Stream
	for _, r := range reqs {
		streams = append(streams, submit(t, e, r))
	}
	for i, s := range streams {
		if got, _ := collect(t, s); got != want[i] {
			t.Errorf("quote %d: %q, want plain decoding's %q", i, got, want[i])
		}
	}
	bg.Cancel()
	collect(t, bg)
	mu.Lock()
	defer mu.Unlock()
	if short > 0 || bulk == 0 {
		t.Errorf("beside another decoding slot: %d drafts under 16 tokens, %d of 16 or more; want none, and some", short, bulk)
	}
}

// decodingBeside starts a request on e that decodes until cancelled, at
// positions from 1,200 on, and returns once it decodes: requests
// submitted then decode beside it.
func decodingBeside(t *testing.T, e *engine.Engine) *engine.Stream {
	t.Helper()
	bg := submit(t, e, engine.Request{Prompt: strings.Join(twoLetterWords(1200), " "), AddSpecial: true, MaxTokens: 800, IgnoreEOS: true})
	waitDecoding(t, e, bg, 1)
	return bg
}

// TestSpeculationInBulkWaits: where more slots decode than MaxDecoding,
// a slot whose bulk draft is not taken whole drafts again only after a
// wait (16 steps at first, then longer): here every draft is cut after
// its fourth token.
func TestSpeculationInBulkWaits(t *testing.T) {
	path := copyModel(t, 2048)
	words := twoLetterWords(150)
	var mu sync.Mutex
	var at []int // positions of drafts beside another decoding slot: the quote's under 300, the other's from 1,200
	cfg := engine.Drafted(engine.CutDrafts(engine.DraftAlways(engine.Config{ModelPath: path, Parallel: 2, CtxSize: 2 * 2048,
		Speculate: engine.Speculation{Ngram: true, MaxDecoding: 1}}), 3), func(pos int, _ []int32, _ bool, decoding int) {
		mu.Lock()
		defer mu.Unlock()
		if decoding > 1 {
			at = append(at, pos)
		}
	})
	e := startEngine(t, cfg)
	bg := decodingBeside(t, e)
	collect(t, submit(t, e, engine.Request{Prompt: strings.Join(words, " ") + "\n\nQuote: " + strings.Join(words[20:24], " "),
		AddSpecial: true, MaxTokens: 130}))
	bg.Cancel()
	collect(t, bg)
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(at)
	// A cut draft adds 4 tokens; the slot then decodes one a step.
	quoted := 0
	for i, pos := range at {
		if pos < 1200 {
			quoted++
		}
		if i > 0 && pos-at[i-1] < 4+16 && (pos < 1200) == (at[i-1] < 1200) {
			t.Errorf("drafts at positions %d and %d of one request: want a wait of 16 steps after a draft not taken whole", at[i-1], pos)
		}
	}
	t.Logf("drafts at %v", at)
	if quoted < 2 {
		t.Errorf("%d drafts of the quote beside another decoding slot; want 2 or more", quoted)
	}
}
