package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/corral-llm/corral/wire"
)

// Prompt is one request's input. Chat APIs send Messages as they are;
// completion APIs send Text, the contents joined by newlines.
type Prompt struct {
	Messages []wire.Message
	// Tokens is the prompt's length as the workload measured it (by the
	// server's tokenizer, or in words); used when the server sends no usage.
	Tokens int
}

// Text is the prompt for completion APIs: the message contents joined by
// newlines.
func (p Prompt) Text() string {
	parts := make([]string, len(p.Messages))
	for i, m := range p.Messages {
		parts[i] = m.Content
	}
	return strings.Join(parts, "\n")
}

// A Tokenizer counts the tokens of a text. Client counts with the server's
// /tokenize; Words approximates by counting words.
type Tokenizer interface {
	CountTokens(ctx context.Context, text string) (int, error)
}

// Words is the Tokenizer for servers that cannot tokenize: one word counts
// as one token.
type Words struct{}

// CountTokens returns the number of space-separated words in text.
func (Words) CountTokens(_ context.Context, text string) (int, error) {
	return len(strings.Fields(text)), nil
}

// RandomSpec describes a random workload.
type RandomSpec struct {
	// N is the number of prompts.
	N int
	// InputLen is each prompt's length in tokens, not counting the prefix.
	InputLen int
	// SharedPrefixLen is the length of a system prompt, identical in every
	// prompt, that precedes the random part (the prefix-cache workload).
	SharedPrefixLen int
	// Seed makes the prompts reproducible.
	Seed uint64
}

// RandomPrompts builds spec.N prompts of random common words, each fitted
// to spec.InputLen tokens as counted by tok (a few calls per prompt). With
// a shared prefix, every prompt is a system message holding the prefix
// followed by a user message holding its random part.
func RandomPrompts(ctx context.Context, tok Tokenizer, spec RandomSpec) ([]Prompt, error) {
	if spec.N <= 0 || spec.InputLen <= 0 {
		return nil, fmt.Errorf("random workload: need a positive number of prompts and input length, got %d and %d", spec.N, spec.InputLen)
	}
	if spec.SharedPrefixLen < 0 {
		return nil, fmt.Errorf("random workload: negative shared prefix length %d", spec.SharedPrefixLen)
	}
	f := &fitter{tok: tok, rng: rand.New(rand.NewPCG(spec.Seed, spec.Seed+1)), ratio: 1}
	prefix, prefixTokens, err := f.fit(ctx, spec.SharedPrefixLen)
	if err != nil {
		return nil, err
	}
	prompts := make([]Prompt, spec.N)
	for i := range prompts {
		body, n, err := f.fit(ctx, spec.InputLen)
		if err != nil {
			return nil, err
		}
		prompts[i] = withPrefix(prefix, prefixTokens, []wire.Message{{Role: "user", Content: body}}, n)
	}
	return prompts, nil
}

// SharedPrefix returns a random text of n tokens as counted by tok, for
// prefixing dataset prompts, and its measured length.
func SharedPrefix(ctx context.Context, tok Tokenizer, n int, seed uint64) (string, int, error) {
	f := &fitter{tok: tok, rng: rand.New(rand.NewPCG(seed, seed+1)), ratio: 1}
	return f.fit(ctx, n)
}

func withPrefix(prefix string, prefixTokens int, msgs []wire.Message, tokens int) Prompt {
	if prefix == "" {
		return Prompt{Messages: msgs, Tokens: tokens}
	}
	all := append([]wire.Message{{Role: "system", Content: prefix}}, msgs...)
	return Prompt{Messages: all, Tokens: prefixTokens + tokens}
}

// fitter builds random texts of a given token count. It remembers the
// tokens-per-word ratio it saw last, so most texts fit on the first count.
type fitter struct {
	tok   Tokenizer
	rng   *rand.Rand
	ratio float64 // tokens per word
}

// fit returns a random text of about target tokens and its exact count.
func (f *fitter) fit(ctx context.Context, target int) (string, int, error) {
	if target <= 0 {
		return "", 0, nil
	}
	var words []string
	k := max(1, int(math.Round(float64(target)/f.ratio)))
	best, bestN := "", 0
	for range 8 {
		for len(words) < k {
			words = append(words, vocabulary[f.rng.IntN(len(vocabulary))])
		}
		text := strings.Join(words[:k], " ")
		n, err := f.tok.CountTokens(ctx, text)
		if err != nil {
			return "", 0, fmt.Errorf("count prompt tokens: %w", err)
		}
		if best == "" || abs(n-target) < abs(bestN-target) {
			best, bestN = text, n
		}
		if n == target || n == 0 {
			break
		}
		f.ratio = float64(n) / float64(k)
		next := max(1, int(math.Round(float64(target)/f.ratio)))
		if next == k { // rounding stalls: step one word toward the target
			if n < target {
				next++
			} else if k > 1 {
				next--
			}
		}
		k = next
	}
	return best, bestN, nil
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// ErrEmptyDataset means a dataset file held no prompts.
var ErrEmptyDataset = errors.New("dataset has no prompts")

// datasetLine is one JSONL line: a prompt or a list of messages.
type datasetLine struct {
	Prompt   *string        `json:"prompt"`
	Messages []wire.Message `json:"messages"`
}

// ReadDataset parses JSONL: one object per line with either "prompt" (a
// string) or "messages" (a list of {"role","content"}). Blank lines are
// skipped. A non-empty prefix becomes a system message before each prompt.
// Tokens is set to the word count; callers with a tokenizer may recount.
func ReadDataset(r io.Reader, prefix string) ([]Prompt, error) {
	var prompts []Prompt
	prefixWords := len(strings.Fields(prefix))
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var dl datasetLine
		dec := json.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&dl); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("line %d: more than one JSON value", line)
		}
		var msgs []wire.Message
		switch {
		case dl.Prompt != nil && dl.Messages != nil:
			return nil, fmt.Errorf("line %d: has both \"prompt\" and \"messages\"", line)
		case dl.Prompt != nil:
			if *dl.Prompt == "" {
				return nil, fmt.Errorf("line %d: empty \"prompt\"", line)
			}
			msgs = []wire.Message{{Role: "user", Content: *dl.Prompt}}
		case len(dl.Messages) > 0:
			for i, m := range dl.Messages {
				if m.Role == "" {
					return nil, fmt.Errorf("line %d: message %d has no \"role\"", line, i)
				}
			}
			msgs = dl.Messages
		default:
			return nil, fmt.Errorf("line %d: want \"prompt\" or a non-empty \"messages\"", line)
		}
		p := Prompt{Messages: msgs}
		p.Tokens = len(strings.Fields(p.Text()))
		prompts = append(prompts, withPrefix(prefix, prefixWords, msgs, p.Tokens))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read dataset: %w", err)
	}
	if len(prompts) == 0 {
		return nil, ErrEmptyDataset
	}
	return prompts, nil
}

// LoadDataset reads the JSONL file at path; see ReadDataset.
func LoadDataset(path, prefix string) ([]Prompt, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open dataset: %w", err)
	}
	defer f.Close()
	ps, err := ReadDataset(f, prefix)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", path, err)
	}
	return ps, nil
}

// vocabulary is the word list random prompts are drawn from: short common
// English words, which most tokenizers hold as single tokens.
var vocabulary = strings.Fields(`
the a an and but or so if then when while because after before
cat dog bird fish tree house garden river sun moon star sky rain snow
boy girl mom dad friend teacher king queen baby bear lion mouse frog
ball box cup hat book toy car boat kite cake apple bread milk door
big small happy sad red blue green yellow little old new good bad
run jump play see look find make give take walk swim sing read eat
went saw found made gave took said was were had is are has can will
day night time home park school forest hill road window bed table
very too also not all some many every one two three four five
`)
