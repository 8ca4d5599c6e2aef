package llama

// TokenizeFragments tokenizes text the way TokenizeText does when it cannot
// leave the work to llama_tokenize, whatever the text: for tests that
// compare the two.
func (m *Model) TokenizeFragments(text string, o TokenizeOptions) ([]Token, error) {
	return m.tokenizeFragments(text, o)
}
