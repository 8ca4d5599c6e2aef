package engine

import "time"

// minPrefillBudget is the fewest prompt tokens a step evaluates while
// streams decode, so that a prompt always advances.
const minPrefillBudget = 8

// prefillBudget decides how many prompt tokens a step may evaluate while
// other slots decode: enough that such a step costs about twice a step
// that only decodes, never more than max (Config.PrefillBudget).
//
// A prompt token's cost is not a constant: on a CPU, attention over a
// long cached prefix can cost more than the weights (a 128-token chunk
// takes 229 ms after no prefix and 420 ms after 512 cached tokens on the
// synthetic 135M model, see BenchmarkPrefillAfterPrefix), so the budget
// follows measured step times instead of a fixed token count.
type prefillBudget struct {
	max    int
	decode float64 // moving average of a decode-only step, in seconds
	perTok float64 // moving average of one prompt token's extra cost in a mixed step
}

// ewma is the weight of a new measurement in the moving averages.
const ewma = 0.2

// tokens is the budget for the next step, when prompts of waiting
// requests have tokens to evaluate: the measured budget, and max more for
// every prompt after the first. The measured budget alone falls to a few
// tokens a step while only one or two streams decode (their steps are
// short), and a burst of arrivals then waited seconds behind them, its
// slots idle; a lone arrival is still evaluated as gently as before
// (measured on versus.sh's arrive row, docs/benchmarks.md).
func (b *prefillBudget) tokens(prompts int) int {
	extra := max(0, prompts-1) * b.max
	if b.decode <= 0 || b.perTok <= 0 {
		return b.max + extra
	}
	return max(minPrefillBudget, min(b.max, int(b.decode/b.perTok))) + extra
}

// observe records a step that evaluated decode and prefill tokens in d.
func (b *prefillBudget) observe(decode, prefill int, d time.Duration) {
	secs := d.Seconds()
	switch {
	case decode == 0:
		// A prompt-only step: no stream waits on it.
	case prefill == 0:
		b.decode = avg(b.decode, secs)
	case b.decode > 0 && secs > b.decode:
		b.perTok = avg(b.perTok, (secs-b.decode)/float64(prefill))
	}
}

func avg(old, v float64) float64 {
	if old == 0 {
		return v
	}
	return old + ewma*(v-old)
}
