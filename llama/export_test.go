package llama

// TokenizeFragments tokenizes text the way TokenizeText does when it cannot
// leave the work to llama_tokenize, whatever the text: for tests that
// compare the two.
func (m *Model) TokenizeFragments(text string, o TokenizeOptions) ([]Token, error) {
	return m.tokenizeFragments(text, o)
}

// GGMLTraits returns what the linked ggml says of t's storage block.
func (t CacheType) GGMLTraits() (elems, size int64, name string) { return t.ggmlTraits() }
