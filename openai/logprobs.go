package openai

import (
	"unicode/utf8"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// Token log-probabilities (engine.Request.Logprobs) in the shapes of the
// three completion endpoints. The values are those of the distribution
// the sampler drew from, after its filter chain (see engine.TokenLogprobs):
// with a temperature they reflect top-k, top-p, min-p and the temperature
// (llama-server's post_sampling_probs), and greedy decoding gives the
// log-softmax of the model's logits.

// Bounds of the logprobs fields, OpenAI's.
const (
	MaxChatTopLogprobs    = 20 // top_logprobs of /v1/chat/completions
	MaxCompletionLogprobs = 5  // logprobs of /v1/completions
)

// chatLogprobs validates a chat request's logprobs and top_logprobs:
// whether entries are wanted, and how many alternatives with each.
func chatLogprobs(logprobs *bool, top *int) (bool, int, *serving.Error) {
	on := logprobs != nil && *logprobs
	n := 0
	if top != nil {
		n = *top
		if n < 0 || n > MaxChatTopLogprobs {
			return false, 0, serving.Invalid("top_logprobs", "'top_logprobs' must be in [0, %d], got %d", MaxChatTopLogprobs, n)
		}
		if n > 0 && !on {
			return false, 0, serving.Invalid("top_logprobs", "'top_logprobs' needs \"logprobs\": true")
		}
	}
	return on, n, nil
}

// chatLogprobsOf are entries in the chat completion shape.
func chatLogprobsOf(lps []engine.TokenLogprobs) *wire.ChatLogprobs {
	c := &wire.ChatLogprobs{Content: make([]wire.ChatTokenLogprob, len(lps))}
	for i, e := range lps {
		top := make([]wire.ChatTopLogprob, len(e.Top))
		for j, a := range e.Top {
			top[j] = wire.ChatTopLogprob{Token: a.Text, Logprob: serving.FiniteLogprob(a.Logprob), Bytes: serving.ByteValues(a.Text)}
		}
		c.Content[i] = wire.ChatTokenLogprob{Token: e.Text, Logprob: serving.FiniteLogprob(e.Logprob), Bytes: serving.ByteValues(e.Text), TopLogprobs: top}
	}
	return c
}

// textOffsets counts the characters of a completion's text token by token,
// for the legacy shape's text_offset, across the events of a stream.
type textOffsets struct {
	runes   int    // characters completed so far
	partial []byte // the start of a character split between tokens
}

// next is the offset of a token of text t, which follows those before.
func (o *textOffsets) next(t string) int {
	at := o.runes // a token that begins inside a character has its offset
	o.partial = append(o.partial, t...)
	n := len(o.partial)
	// A UTF-8 character is at most 4 bytes: look back at most 3.
	for i := n - 1; i >= 0 && i >= n-3; i-- {
		if utf8.RuneStart(o.partial[i]) {
			if !utf8.FullRune(o.partial[i:]) {
				n = i
			}
			break
		}
	}
	o.runes += utf8.RuneCount(o.partial[:n])
	o.partial = append(o.partial[:0], o.partial[n:]...)
	return at
}

// completionLogprobsOf are entries in the legacy completions shape, the
// top alternatives with the sampled token when it is not among them (as
// OpenAI's: up to logprobs+1 of them).
func completionLogprobsOf(lps []engine.TokenLogprobs, o *textOffsets) *wire.CompletionLogprobs {
	c := &wire.CompletionLogprobs{
		Tokens: make([]string, len(lps)), TokenLogprobs: make([]float32, len(lps)),
		TopLogprobs: make([]wire.TopLogprobs, len(lps)), TextOffset: make([]int, len(lps)),
	}
	for i, e := range lps {
		c.Tokens[i], c.TokenLogprobs[i], c.TextOffset[i] = e.Text, serving.FiniteLogprob(e.Logprob), o.next(e.Text)
		top := make(wire.TopLogprobs, 0, len(e.Top)+1)
		sampled := false
		for _, a := range e.Top {
			top = append(top, wire.TopLogprob{Token: a.Text, Logprob: serving.FiniteLogprob(a.Logprob)})
			sampled = sampled || a.Token == e.Token
		}
		if !sampled {
			top = append(top, wire.TopLogprob{Token: e.Text, Logprob: serving.FiniteLogprob(e.Logprob)})
		}
		c.TopLogprobs[i] = top
	}
	return c
}
