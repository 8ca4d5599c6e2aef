package testmodel

// Golden is a greedy continuation from ../shared/models/GOLDEN.md: the
// prompt tokenized with BOS (add_special, parse_special), N tokens
// generated at temperature 0, no end-of-generation token reached.
type Golden struct {
	Model  string
	Prompt string
	N      int
	Want   string
}

// Goldens are the outputs llama.cpp at the binding's revision produces
// for both test models: ec98e2002 (December 2025) gave them, and
// llama-server b10573, built from the same source as the engine, gives
// them alone and batched (-np 4), byte for byte:
//
//	scripts/goldens.sh "$(../shared/peers/build-llama-server.sh)"
//
// A test that compares batched outputs with these keeps its
// passes under 64 tokens: b10573's CPU flash attention takes a tiled path
// for a pass of 64 query rows or more, whose rounding can flip the near
// ties some of these continuations have (top-2 logits 0.011-0.016 apart).
var Goldens = []Golden{
	{Stories260K, "Once upon a time", 60, ", there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.\nLily"},
	{Stories260K, "Hello", 16, " was a big, red ball. He was very excit"},
	{Stories260K, "The little dog", 48, " was a little girl named Lily. She loved to play with her toys and her toys. One day, she saw a big box with a big box. It was a big,"},
	{TinyStories656K, "Once upon a time", 32, ", a little girl named Lily lived in a small house. She loved to eat yummy food. One day, she saw a small bird on the ground. The bird was sad because it could not eat it.\nLily wanted to help the bird. She tried to eat the food and "},
	{TinyStories656K, "Hello", 16, " and a girl were walking in the park. One day she saw a small bird flying in the sk"},
	{TinyStories656K, "The little dog", 48, "was in a big forest. He liked to run and jump all day long. He liked to run and jump and play with his friends. One day, he saw a small bird flying in the sky. He wanted to be friends with it, but he was scared. He tried to jump and reach the bird, but he could not reach the bird"},
}

// GoldensFor returns the goldens of one model, in GOLDEN.md's order.
func GoldensFor(model string) []Golden {
	var out []Golden
	for _, g := range Goldens {
		if g.Model == model {
			out = append(out, g)
		}
	}
	return out
}
