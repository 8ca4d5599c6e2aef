package llama

// TokenizeFragments tokenizes text the way TokenizeText does when it cannot
// leave the work to llama_tokenize, whatever the text: for tests that
// compare the two.
func (m *Model) TokenizeFragments(text string, o TokenizeOptions) ([]Token, error) {
	return m.tokenizeFragments(text, o)
}

// GGMLTraits returns what the linked ggml says of t's storage block.
func (t CacheType) GGMLTraits() (elems, size int64, name string) { return t.ggmlTraits() }

// AbortNextEncode makes the next Encode find itself aborted from its
// start, as when its context ends just after Encode looked at it.
func (p *Projector) AbortNextEncode() { p.gen[1] = p.next + 1 }

// EncodedLayers is the number of encoder layers the last Encode computed.
func (p *Projector) EncodedLayers() int64 { return p.gen[2] }
