package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
)

// Inputs that reach llama.cpp are bounded and validated first; these
// tests send the hostile ones straight to the engine.

func TestSeedZeroIsASeed(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 2})
	req := engine.Request{Prompt: "Once upon a time", AddSpecial: true, MaxTokens: 24, IgnoreEOS: true,
		Sampling: engine.Sampling{Temperature: 1.5, Seed: 0}}
	a, _ := collect(t, submit(t, e, req))
	b, _ := collect(t, submit(t, e, req))
	if a != b {
		t.Fatalf("seed 0 sampled differently:\n%q\n%q", a, b)
	}
}

func TestHugeRepeatLastNIsClamped(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1})
	for _, n := range []int{2_000_000_000, -1} {
		req := greedy("Once upon a time", 8)
		req.Sampling = engine.Sampling{RepeatPenalty: 1.1, RepeatLastN: n}
		if _, res := collect(t, submit(t, e, req)); res.FinishReason != engine.FinishLength {
			t.Fatalf("repeat_last_n %d: %+v", n, res)
		}
	}
}

// TestPenaltiesSeeThePrompt checks that the prompt is in the penalty
// history, as in llama-server: where the greedy continuation repeats a
// token the prompt holds, repeat_penalty steers the first token away.
func TestPenaltiesSeeThePrompt(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1})
	// The greedy token sequence, found one token at a time through the
	// engine: the first position whose token already occurred is the
	// prompt to test with.
	seq, err := e.Tokenize("Once upon a time", true, true)
	if err != nil {
		t.Fatal(err)
	}
	pieces := map[string]int32{} // piece → token id, for this 2048-token vocabulary
	for id := range int32(e.Info().VocabSize) {
		if _, dup := pieces[e.TokenPiece(id)]; !dup {
			pieces[e.TokenPiece(id)] = id
		}
	}
	next := func(toks []int32, s engine.Sampling) string {
		text, _ := collect(t, submit(t, e, engine.Request{Tokens: toks, MaxTokens: 1, IgnoreEOS: true, Sampling: s}))
		return text
	}
	for range 40 {
		text := next(seq, engine.Sampling{})
		tok := slices.IndexFunc(seq, func(tk int32) bool { return e.TokenPiece(tk) == text })
		if tok >= 0 {
			if got := next(seq, engine.Sampling{RepeatPenalty: 100, RepeatLastN: 64}); got == text {
				t.Fatalf("with repeat_penalty 100 the first token is still %q, which the prompt holds", got)
			}
			return
		}
		id, ok := pieces[text]
		if !ok {
			t.Fatalf("test setup: generated piece %q is not one token of the vocabulary", text)
		}
		seq = append(seq, id)
	}
	t.Fatal("test setup: the greedy continuation never repeats a token of its prompt")
}

func TestGrammarEndWithEOSBannedIsAStop(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1})
	req := greedy("Once upon a time", 50) // IgnoreEOS
	req.Grammar = `root ::= " there was a dog."`
	text, res := collect(t, submit(t, e, req))
	if res.FinishReason != engine.FinishStop || res.Err != nil || text != " there was a dog." {
		t.Fatalf("got %q, %+v; want the grammar's text and finish stop", text, res)
	}
}

func TestBadGrammars(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1})
	deep := "root ::= " + strings.Repeat("(", 60000) + `"a"` + strings.Repeat(")", 60000)
	for name, g := range map[string]string{
		"60000 nested groups":    deep,
		"syntax":                 `root ::= "a`,
		"no root":                `other ::= "a"`,
		"vocab cannot start it":  `root ::= "ééé"`,
		"huge repetition":        `root ::= "a"{0,100000000}`,
		"only an end token fits": `root ::= ""`,
	} {
		req := greedy("Once", 4)
		req.Grammar = g
		if _, err := e.Submit(context.Background(), req); !errors.Is(err, engine.ErrGrammar) {
			t.Errorf("%s: Submit error %v, want ErrGrammar", name, err)
		}
	}
	// The engine still serves.
	if got, _ := collect(t, submit(t, e, greedy("Hello", 16))); got != goldens[4].Want {
		t.Fatalf("after bad grammars: %q", got)
	}
}

// TestUnencodableTextBecomesUnknown: tinystories-656k's SentencePiece
// vocabulary has no byte fallback and no "#", "(" or "{"; llama.cpp throws
// on them. They become the unknown token instead.
func TestUnencodableTextBecomesUnknown(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1})
	toks, err := e.Tokenize("Hi #({ there", true, false)
	if err != nil {
		t.Fatal(err)
	}
	unk := toks[slices.IndexFunc(toks, func(t int32) bool { return e.TokenPiece(t) == "<unk>" || e.TokenPiece(t) == " ⁇ " })]
	if n := countOf(toks, unk); n != 3 {
		t.Fatalf("tokens %v: %d unknown tokens, want 3 (one per unencodable character)", toks, n)
	}
	s := submit(t, e, engine.Request{Prompt: "#({", AddSpecial: true, MaxTokens: 4})
	if _, res := collect(t, s); res.FinishReason == engine.FinishError {
		t.Fatalf("generation from unencodable text: %+v", res)
	}
}

func countOf(toks []int32, tok int32) int {
	n := 0
	for _, t := range toks {
		if t == tok {
			n++
		}
	}
	return n
}

// TestPlainSpansKeepClientTextPlain: special-token text inside a Plain
// span is tokenized as text; outside, it is the special token.
func TestPlainSpansKeepClientTextPlain(t *testing.T) {
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 1})
	eos := e.Info().EOS
	const prompt = "Hello</s> a</s>"
	// The first "</s>" (bytes 5..9) is client text; the second is the
	// template's.
	req := engine.Request{Prompt: prompt, AddSpecial: true, ParseSpecial: true, MaxTokens: 1, IgnoreEOS: true,
		Plain: []engine.Span{{Start: 0, End: 9}}}
	s := submit(t, e, req)
	_, res := collect(t, s)
	whole, err := e.Tokenize(prompt, true, true)
	if err != nil {
		t.Fatal(err)
	}
	if n := countOf(whole, eos); n != 2 {
		t.Fatalf("test setup: %q has %d EOS tokens when parsed, want 2", prompt, n)
	}
	// With the span, one "</s>" is spelled out in plain tokens: more
	// prompt tokens than with two single EOS tokens.
	if res.Usage.PromptTokens <= len(whole) {
		t.Fatalf("with a plain span the prompt has %d tokens, without %d: the client's </s> became a control token",
			res.Usage.PromptTokens, len(whole))
	}
}

// longRunning submits a request that keeps the only slot of an engine on
// stories260K (2048 cells) busy for a long while, and waits until it runs.
func longRunning(t *testing.T, e *engine.Engine, ctx context.Context, maxTokens int) *engine.Stream {
	t.Helper()
	s := submit(t, e, engine.Request{Prompt: "Once upon a time", AddSpecial: true, IgnoreEOS: true, MaxTokens: maxTokens})
	poll(t, "waiting for the long request to start", func() (bool, string) {
		infos, err := e.Slots(ctx)
		return err == nil && infos[0].RequestID == s.ID(), fmt.Sprintf("slots %+v, err %v", infos, err)
	})
	return s
}

func TestQueueFullCostsNoWork(t *testing.T) {
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 1, MaxQueue: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := longRunning(t, e, ctx, 0)
	queued := submit(t, e, engine.Request{Prompt: "Once", AddSpecial: true, MaxTokens: 1})
	// Refused before any tokenizing or grammar compiling: a bad grammar
	// and an enormous prompt get ErrQueueFull, not their own errors.
	bad := engine.Request{Prompt: strings.Repeat("a ", 1<<20), Grammar: `root ::= "`}
	if _, err := e.Submit(ctx, bad); !errors.Is(err, engine.ErrQueueFull) {
		t.Fatalf("full queue: %v, want ErrQueueFull", err)
	}
	long.Cancel()
	collect(t, long)
	collect(t, queued)
}

func TestPromptTooLongIsFoundCheaply(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1})
	_, err := e.Submit(context.Background(), engine.Request{Prompt: strings.Repeat("Once upon a time. ", 60_000)})
	if !errors.Is(err, engine.ErrPromptTooLong) {
		t.Fatalf("1 MB prompt: %v, want ErrPromptTooLong", err)
	}
}

func TestDrain(t *testing.T) {
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 1})
	running := longRunning(t, e, context.Background(), 400)
	queued := submit(t, e, greedy("Hello", 16))
	e.Drain()
	if _, err := e.Submit(context.Background(), greedy("Hello", 4)); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Submit while draining: %v, want ErrClosed", err)
	}
	if _, res := collect(t, queued); res.FinishReason != engine.FinishError || !errors.Is(res.Err, engine.ErrClosed) {
		t.Fatalf("queued request after Drain: %+v, want ErrClosed", res)
	}
	// The running request goes on to the end.
	got, res := collect(t, running)
	if res.FinishReason != engine.FinishLength || res.Err != nil || !strings.HasPrefix(got, goldens[0].Want) {
		t.Fatalf("running request after Drain: %+v, text %q…", res, got[:min(len(got), 80)])
	}
}

// TestSlotPollersDoNotStarveDecoding polls Slots from many goroutines
// while a generation runs; it finishes with the golden text.
func TestSlotPollersDoNotStarveDecoding(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 2})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				infos, err := e.Slots(ctx)
				if err == nil && len(infos) != 2 {
					t.Errorf("Slots: %d slots, want 2", len(infos))
					return
				}
			}
		}()
	}
	got, _ := collect(t, submit(t, e, greedy("Once upon a time", 32)))
	cancel()
	wg.Wait()
	if got != goldens[3].Want {
		t.Fatalf("got %q", got)
	}
}

// slotDecoded is the number of tokens slot i's request has decoded.
func slotDecoded(t *testing.T, e *engine.Engine, i int) int {
	t.Helper()
	infos, err := e.Slots(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return infos[i].Decoded
}

// TestPrefillBudgetKeepsStreamsDecoding: while a stream decodes, a long
// prompt is evaluated PrefillBudget tokens a step, and the stream gets a
// token in each of those steps instead of waiting for the whole prompt.
func TestPrefillBudgetKeepsStreamsDecoding(t *testing.T) {
	const budget, promptLen = 8, 400
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 2, PrefillBudget: budget})
	ctx := context.Background()
	running := longRunning(t, e, ctx, 0) // slot 0
	story := storyTokens(t, e, promptLen)
	before := slotDecoded(t, e, 0)
	long := submit(t, e, engine.Request{Tokens: story[:promptLen], MaxTokens: 1})
	if _, err := long.Recv(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := slotDecoded(t, e, 0)-before, promptLen/budget-1; got < want {
		t.Fatalf("the running stream got %d tokens while a %d-token prompt was evaluated, want at least %d (one a step)", got, promptLen, want)
	}
	running.Cancel()
	collect(t, running)
	collect(t, long)
}

// TestPrefillBudgetGrowsWithWaitingPrompts: two long prompts arriving
// together while a stream decodes share a budget of PrefillBudget tokens
// a step for each: the stream gets fewer tokens while they are evaluated
// than the 2 x promptLen / budget steps one budget for both would take.
func TestPrefillBudgetGrowsWithWaitingPrompts(t *testing.T) {
	const budget, promptLen = 8, 400
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 3, PrefillBudget: budget})
	ctx := context.Background()
	running := longRunning(t, e, ctx, 0) // slot 0
	story := storyTokens(t, e, promptLen+1)
	before := slotDecoded(t, e, 0)
	a := submit(t, e, engine.Request{Tokens: story[:promptLen], MaxTokens: 1})
	b := submit(t, e, engine.Request{Tokens: story[1 : promptLen+1], MaxTokens: 1})
	for _, s := range []*engine.Stream{a, b} {
		if _, err := s.Recv(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// With both waiting, the first gets 16 tokens a step (25 steps), then
	// the second its 8 (25 more): about 75 steps, not 100.
	if got, most := slotDecoded(t, e, 0)-before, 2*promptLen/budget-10; got > most {
		t.Fatalf("the running stream got %d tokens while two %d-token prompts were evaluated, want at most %d (the budget grows with the prompts waiting)", got, promptLen, most)
	}
	running.Cancel()
	for _, s := range []*engine.Stream{running, a, b} {
		collect(t, s)
	}
}

// TestPrefillSharesTheBudgetInArrivalOrder: the older prompt gets the
// prefill budget first even when it sits in a higher slot than a newer one.
func TestPrefillSharesTheBudgetInArrivalOrder(t *testing.T) {
	const budget, promptLen = 8, 400
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 3, PrefillBudget: budget})
	ctx := context.Background()
	running := longRunning(t, e, ctx, 0) // slot 0 decodes throughout
	blocker := submit(t, e, greedy("Hello", 2000))
	poll(t, "waiting for slot 1 to decode", func() (bool, string) {
		infos, _ := e.Slots(ctx)
		return infos[1].RequestID == blocker.ID() && infos[1].State == "decode", fmt.Sprintf("%+v", infos)
	})
	story := storyTokens(t, e, promptLen+1)
	older := submit(t, e, engine.Request{Tokens: story[:promptLen], MaxTokens: 1})
	poll(t, "waiting for the older prompt to take slot 2", func() (bool, string) {
		infos, _ := e.Slots(ctx)
		return infos[2].RequestID == older.ID(), fmt.Sprintf("%+v", infos)
	})
	blocker.Cancel()
	collect(t, blocker)
	newer := submit(t, e, engine.Request{Tokens: story[1 : promptLen+1], MaxTokens: 1})
	poll(t, "waiting for the newer prompt to take slot 1", func() (bool, string) {
		infos, _ := e.Slots(ctx)
		return infos[1].RequestID == newer.ID(), fmt.Sprintf("%+v", infos)
	})
	if _, err := older.Recv(ctx); err != nil {
		t.Fatal(err)
	}
	infos, _ := e.Slots(ctx)
	if newer.Done() || infos[1].State != "prefill" {
		t.Fatalf("the newer prompt (slot 1) finished its prefill no later than the older one (slot 2): %+v", infos)
	}
	running.Cancel()
	for _, s := range []*engine.Stream{running, older, newer} {
		collect(t, s)
	}
}

// TestShortPromptGoesBeforeALongOne: a short prompt arriving while a
// long one of its class is evaluated a few tokens a step (other slots
// decode) is evaluated first, in one step, and the long one goes on.
func TestShortPromptGoesBeforeALongOne(t *testing.T) {
	const budget, promptLen = 8, 400
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 3, PrefillBudget: budget})
	ctx := context.Background()
	running := longRunning(t, e, ctx, 0) // slot 0 decodes throughout
	story := storyTokens(t, e, promptLen)
	long := submit(t, e, engine.Request{Tokens: story[:promptLen], MaxTokens: 1})
	poll(t, "waiting for the long prompt to prefill", func() (bool, string) {
		infos, _ := e.Slots(ctx)
		for _, in := range infos {
			if in.RequestID == long.ID() && in.State == "prefill" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", infos)
	})
	short := submit(t, e, engine.Request{Tokens: []int32{1, 403, 407, 261, 378}, MaxTokens: 1})
	if _, err := short.Recv(ctx); err != nil {
		t.Fatal(err)
	}
	if long.Done() {
		t.Fatal("the long prompt, ahead by arrival, finished first: the short one waited behind it")
	}
	running.Cancel()
	for _, s := range []*engine.Stream{running, long, short} {
		collect(t, s)
	}
}

// TestSlotChoiceKeepsCachesUseful: an unrelated prompt, or one that does
// not want its prompt cached, takes the slot whose cache is worth least
// instead of wiping a cached conversation that merely shares BOS with it.
func TestSlotChoiceKeepsCachesUseful(t *testing.T) {
	e := newEngine(t, testmodel.Stories260K, engine.Config{Parallel: 2})
	story := greedy("Once upon a time, there was a little girl named Lily. She loved to play outside in the park.", 4)
	_, first := collect(t, submit(t, e, story))
	for _, other := range []engine.Request{
		greedy("Hello", 4),
		{Prompt: "The little dog", AddSpecial: true, MaxTokens: 4, NoCachePrompt: true},
	} {
		if _, res := collect(t, submit(t, e, other)); res.Slot == first.Slot {
			t.Fatalf("%q took slot %d, which holds the story's cache", other.Prompt, res.Slot)
		}
		_, again := collect(t, submit(t, e, story))
		if again.Usage.CachedTokens != again.Usage.PromptTokens-1 {
			t.Fatalf("after %q the story reused %d of %d prompt tokens, want all but the last",
				other.Prompt, again.Usage.CachedTokens, again.Usage.PromptTokens)
		}
	}
}

// TestSmallContextCapsTheBatch: with a context smaller than the batch size
// llama.cpp takes smaller batches (it pads the cache past what it takes
// per decode); a prompt longer than that batch but within the slot is
// evaluated in several steps, not handed to llama.cpp whole (which aborts
// the process).
func TestSmallContextCapsTheBatch(t *testing.T) {
	e := newEngine(t, testmodel.TinyStories656K, engine.Config{Parallel: 1, CtxSize: 192, BatchSize: 512})
	prompt := strings.Repeat("Tom had a big red ball. ", 70)
	toks := tokens(t, e, prompt)
	if n := e.Info().CtxPerRequest; len(toks) <= 192 || len(toks) >= n {
		t.Fatalf("want a prompt longer than 192 tokens within the %d-token slot, got %d", n, len(toks))
	}
	_, res := collect(t, submit(t, e, engine.Request{Tokens: toks, MaxTokens: 4}))
	if res.FinishReason != engine.FinishLength || res.Usage.CompletionTokens != 4 {
		t.Fatalf("result %+v", res)
	}
}
