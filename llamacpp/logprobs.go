package llamacpp

import (
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/serving"
)

// MaxNProbs bounds n_probs of /completion.
const MaxNProbs = engine.MaxTopLogprobs

// llamaProb is an entry of llama-server's completion_probabilities.
type llamaProb struct {
	ID          int32          `json:"id"`
	Token       string         `json:"token"`
	Bytes       []int          `json:"bytes"`
	Logprob     float32        `json:"logprob"`
	TopLogprobs []llamaTopProb `json:"top_logprobs"`
}

// llamaTopProb is one of the most likely tokens of a step.
type llamaTopProb struct {
	ID      int32   `json:"id"`
	Token   string  `json:"token"`
	Bytes   []int   `json:"bytes"`
	Logprob float32 `json:"logprob"`
}

// llamaProbsOf are entries in llama-server's shape.
func llamaProbsOf(lps []engine.TokenLogprobs) []llamaProb {
	out := make([]llamaProb, len(lps))
	for i, e := range lps {
		top := make([]llamaTopProb, len(e.Top))
		for j, a := range e.Top {
			top[j] = llamaTopProb{ID: a.Token, Token: a.Text, Bytes: serving.ByteValues(a.Text), Logprob: serving.FiniteLogprob(a.Logprob)}
		}
		out[i] = llamaProb{ID: e.Token, Token: e.Text, Bytes: serving.ByteValues(e.Text), Logprob: serving.FiniteLogprob(e.Logprob), TopLogprobs: top}
	}
	return out
}
