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

// SynthGolden is a greedy continuation of a synthetic model: random
// weights (gguf.WriteSynthetic, seed 1) and a real tokenizer, as
// token ids, since such a model's pieces need not be text.
type SynthGolden struct {
	Shape  string // a name of gguf.Shapes
	Prompt string
	N      int
	Want   []int32
}

// SynthGoldens are what llama-server b10573, built from the same source
// as the engine, generates for gguf.Shapes["tiny"] with GPT-2's tokenizer
// (testsynth.Golden) at temperature 0, alone and with the three prompts batched
// (-np 4), the same:
//
//	scripts/goldens.sh "$(../shared/peers/build-llama-server.sh)"
var SynthGoldens = []SynthGolden{
	{"tiny", "Once upon a time", 32, []int32{4693, 9458, 23144, 912, 36208, 25613, 40696, 39491, 29925, 36865, 4845, 42813, 40852, 23144, 17384, 45122, 42538, 46026, 21002, 43265, 10866, 27639, 4269, 7506, 10400, 21774, 48146, 4526, 41957, 50053, 25272, 27720}},
	{"tiny", "Hello", 16, []int32{35777, 49628, 13721, 37617, 35699, 1832, 29413, 10726, 26875, 9109, 24676, 39953, 17440, 35063, 40185, 41615}},
	{"tiny", "The little dog", 48, []int32{44833, 23433, 18450, 26490, 12907, 2046, 50146, 36609, 46271, 34954, 48921, 2035, 30529, 49498, 12664, 21156, 25373, 25886, 37896, 17591, 16884, 18147, 852, 5188, 47561, 15628, 48140, 38887, 6150, 40605, 13886, 27215, 44379, 43898, 7027, 49022, 18426, 43337, 23815, 11224, 20698, 11020, 42384, 23346, 4540, 24328, 36275, 49040}},
}

// ArchPrompt is one prompt of the architecture goldens and the number of
// tokens generated for it.
type ArchPrompt struct {
	Prompt string
	N      int
}

// ArchPrompts are the prompts of ArchGoldens, in order.
var ArchPrompts = []ArchPrompt{{"Once upon a time", 16}, {"Hello", 8}, {"The little dog", 12}}

// ArchGoldensVariant is ggml's CPU variant whose kernels ArchGoldens were
// made with: llama-server built natively (GGML_NATIVE) on a machine with
// AVX2 and no AVX-512, which compiles what the variant of that name does.
// Kernels of another width sum in another order, and random weights give
// near-ties that then flip: on an AVX-512 machine (zen4, icelake,
// skylakex) llama-server and corral alike give other tokens for jais2 and
// nemotron (a 0.0003-nat tie) and gemma3n (from its second token).
// testsynth.PinGoldenCPU has tests load this variant where it runs.
const ArchGoldensVariant = "haswell"

// ArchGolden is what llama-server generates for ArchPrompts on the
// synthetic model of one architecture: one request at a time, and all
// of them in the same steps.
type ArchGolden struct {
	Alone, Batched [][]int32
}

// ArchNotGenerative are architectures llama.cpp builds that do not
// generate text token by token: tests load them and stop there.
var ArchNotGenerative = map[string]string{
	"llama-embed":     "an embedding model (pooled, non-causal)",
	"gemma-embedding": "an embedding model (pooled, non-causal)",
	"modern-bert":     "an embedding encoder",
	"neo-bert":        "an embedding encoder",
	"eurobert":        "an embedding encoder",
	"t5encoder":       "an embedding encoder",
	"dream":           "a diffusion model: it denoises a whole answer at once",
	"llada":           "a diffusion model: it denoises a whole answer at once",
	"llada-moe":       "a diffusion model: it denoises a whole answer at once",
	"rnd1":            "a diffusion model: it denoises a whole answer at once",
}

// MediaMarker is where a prompt of MediaGoldens puts each of its media:
// llama-server's LLAMA_MEDIA_MARKER when they were made (libmtmd's default
// marker, which llama-server otherwise draws at random).
const MediaMarker = "<__media__>"

// MediaGolden is what llama-server b10573, with the CPU kernels of
// ArchGoldensVariant, generates for a prompt with media on a synthetic
// multimodal model: the text model and projector of a kind
// (testsynth.Projector, corral synth --mmproj KIND), the prompt as plain
// text (no chat template) sent to /completion with its media, at
// temperature 0, end of generation ignored (scripts/mtmd-goldens.sh).
type MediaGolden struct {
	Kind         string   // the projector kind (gguf.ProjectorKinds), or KIND@ARCH with the text model's architecture (testsynth.Projector)
	Prompt       string   // MediaMarker where each medium goes
	Media        []string // files under testdata/media, in the markers' order
	N            int      // tokens generated
	PromptTokens int      // the prompt tokens llama-server counted: BOS, text, media tokens and their delimiters
	// Alone is what it generates one request at a time (-np 1), Batched
	// at the same time as ArchPrompts (-np 4, 2,048 tokens a slot).
	Alone, Batched []int32
	// TextAlone and TextBatched are what the same model generates for
	// ArchPrompts (no media), one at a time and batched with Prompt.
	TextAlone, TextBatched [][]int32
}
