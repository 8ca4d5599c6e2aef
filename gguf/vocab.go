package gguf

import "fmt"

// Token types of tokenizer.ggml.token_type (llama_token_type).
const (
	tokenNormal  int32 = 1
	tokenUnknown int32 = 2
	tokenControl int32 = 3
	tokenByte    int32 = 6
)

// The fixed head of a synthetic vocabulary: <unk>, <s>, </s> and the 256
// byte-fallback tokens.
const (
	unkID      = 0
	bosID      = 1
	eosID      = 2
	firstPiece = 3 + 256
)

// chatMLTokens end the vocabulary of a Shape with ChatML set.
var chatMLTokens = []string{"<|im_start|>", "<|im_end|>"}

// spmSpace is SentencePiece's stand-in for a space.
const spmSpace = "▁"

// vocab is a SentencePiece ("llama") vocabulary.
type vocab struct {
	tokens []string
	scores []float32
	types  []int32
}

// synthVocab returns a vocabulary of n tokens (n > firstPiece): the special
// and byte tokens, then spmSpace and the printable ASCII characters, then
// lower-case letter strings of growing length, each with and without a
// leading spmSpace. Every piece is the concatenation of two shorter pieces,
// so the SentencePiece merge loop can reach it. Earlier pieces score higher.
// With chatml, the last tokens are chatMLTokens, as control tokens.
func synthVocab(n int, chatml bool) vocab {
	v := vocab{
		tokens: make([]string, 0, n),
		scores: make([]float32, 0, n),
		types:  make([]int32, 0, n),
	}
	pieces := n
	if chatml {
		pieces -= len(chatMLTokens)
	}
	add := func(tok string, typ int32) {
		if len(v.tokens) == pieces {
			return
		}
		score := float32(0)
		if len(v.tokens) >= firstPiece {
			score = -float32(len(v.tokens) - firstPiece)
		}
		v.tokens = append(v.tokens, tok)
		v.scores = append(v.scores, score)
		v.types = append(v.types, typ)
	}
	add("<unk>", tokenUnknown)
	add("<s>", tokenControl)
	add("</s>", tokenControl)
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), tokenByte)
	}
	add(spmSpace, tokenNormal)
	for c := byte('!'); c <= '~'; c++ {
		add(string(c), tokenNormal)
	}
	for length, count := 1, 26; len(v.tokens) < pieces; length, count = length+1, count*26 {
		for i := 0; i < count && len(v.tokens) < pieces; i++ {
			w := letters(i, length)
			add(spmSpace+w, tokenNormal)
			if length > 1 {
				add(w, tokenNormal)
			}
		}
	}
	if chatml {
		for _, tok := range chatMLTokens {
			v.tokens = append(v.tokens, tok)
			v.scores = append(v.scores, 0)
			v.types = append(v.types, tokenControl)
		}
	}
	return v
}

// letters returns the i-th lower-case string of the given length, counting
// in base 26 with 'a' as zero.
func letters(i, length int) string {
	b := make([]byte, length)
	for j := length - 1; j >= 0; j-- {
		b[j] = byte('a' + i%26)
		i /= 26
	}
	return string(b)
}
