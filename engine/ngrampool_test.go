package engine_test

import (
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
)

// TestNgramPoolSharesBySalt: a request that writes what an earlier one
// of its cache salt wrote drafts it from the shared n-gram pool and
// takes it, in far fewer steps; the same request under another salt
// drafts exactly as the first did (nothing from the others), and all
// three answer the same.
func TestNgramPoolSharesBySalt(t *testing.T) {
	path := testmodel.Path(t, testmodel.TinyStories656K)
	e := startEngine(t, engine.DraftAlways(engine.Config{ModelPath: path, Parallel: 1, Speculate: engine.Speculation{Ngram: true}}))
	type result struct {
		text            string
		steps, accepted uint64
	}
	asked := uint64(0)
	ask := func(salt string) result {
		req := greedy("Once upon a time", 96)
		req.CacheSalt = salt
		before := settled(t, e, asked) // the last request's last step counted
		out := run(t, e, req)
		asked++
		after := settled(t, e, asked)
		return result{out.text, after.Steps - before.Steps, after.Spec.Accepted - before.Spec.Accepted}
	}
	first, again, other := ask(""), ask(""), ask("other")
	if again.text != first.text || other.text != first.text {
		t.Fatalf("answers differ:\n%q\n%q\n%q", first.text, again.text, other.text)
	}
	if again.accepted < first.accepted+48 || again.steps >= first.steps/2 {
		t.Errorf("again under the same salt: %d drafted tokens taken in %d steps; the first time %d in %d", again.accepted, again.steps, first.accepted, first.steps)
	}
	if other != first {
		t.Errorf("under another salt: %d drafted tokens taken in %d steps; want the first's %d in %d", other.accepted, other.steps, first.accepted, first.steps)
	}
	t.Logf("taken/steps: first %d/%d, again %d/%d, other salt %d/%d", first.accepted, first.steps, again.accepted, again.steps, other.accepted, other.steps)
}
