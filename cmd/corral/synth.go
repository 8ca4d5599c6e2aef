package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/llama"
)

// runSynth writes a model with random weights of a given shape, for
// benchmarks that need a realistic size but no trained weights, and for
// tests that need a real tokenizer (--vocab) or chat template
// (--chat-template) on a model small enough to load anywhere. The model is
// a llama of --shape, or of the architecture --arch names, whose tensors
// llama.cpp then lays out (llama.Layout). --mmproj KIND writes a
// multimodal projector with random weights beside it (see
// projectorPath), and makes the model the architecture that projector
// goes with.
func runSynth(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("synth", flag.ContinueOnError)
	shapeFlag := fs.String("shape", "135m", "model `shape`: one of "+strings.Join(slices.Sorted(maps.Keys(gguf.Shapes)), ", ")+
		",\nor embd=576,layers=30,heads=9,kv=3,ff=1536,vocab=49152,ctx=2048,type=q8_0 (type: q8_0 or f32),\nor a name followed by overrides such as tiny,type=f32;\nwith --arch, the architecture's small default shape and these overrides\n(experts=N,used=K: a mixture of experts; mtp=1: a multi-token prediction head\nafter the layers, for architectures that have one, such as qwen35;\ncopy=true, llama only: weights that copy, so that the greedy answer repeats\nwhat followed the last token's earlier occurrence in the prompt)")
	arch := fs.String("arch", "", "`architecture` as GGUF's general.architecture names it: any text model\nllama.cpp "+llama.Release()+" can build, such as llama, qwen35, gemma3, gpt-oss,\nlfm2, laid out by llama.cpp; list prints them all (default: a llama of --shape)")
	var out string
	fs.StringVar(&out, "o", "", "output `file` (required)")
	fs.StringVar(&out, "output", "", "output `file` (same as -o)")
	seed := fs.Int64("seed", 1, "random seed; the same shape and seed give the same file")
	vocab := fs.String("vocab", "", "GGUF `file` whose tokenizer the model takes (every tokenizer.* key, such as\nllama.cpp's ggml-vocab-*.gguf); its vocabulary size replaces the shape's")
	template := fs.String("chat-template", "", "Jinja `file` to write as tokenizer.chat_template")
	mmproj := fs.String("mmproj", "", "also write a multimodal projector of this `kind` beside the model, as\nNAME.mmproj.gguf for -o NAME.gguf: "+strings.Join(gguf.ProjectorKinds, " or ")+
		";\nthe model is then the architecture it goes with (gemma3, qwen2, qwen2vl; or\n--arch qwen35 with qwen2vl_merger), with its media tokens and a chat template")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *arch == "list" {
		for _, a := range llama.Architectures() {
			fmt.Println(a)
		}
		return nil
	}
	if out == "" {
		return errors.New("-o FILE is required")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	shapeSet := false
	fs.Visit(func(f *flag.Flag) { shapeSet = shapeSet || f.Name == "shape" })
	var opts gguf.SynthOptions
	var projShape gguf.Shape
	if *mmproj != "" {
		if !slices.Contains(gguf.ProjectorKinds, *mmproj) {
			return fmt.Errorf("unknown --mmproj kind %q; known: %s", *mmproj, strings.Join(gguf.ProjectorKinds, ", "))
		}
		projArch, pshape, popts, ok := gguf.ProjectorText(*mmproj, *arch)
		if !ok {
			return fmt.Errorf("--mmproj %s goes with a %s model, not --arch %s", *mmproj, strings.Join(gguf.ProjectorArchs(*mmproj), " or "), *arch)
		}
		if *vocab != "" {
			return errors.New("--mmproj adds its media tokens to the synthetic vocabulary and cannot go with --vocab")
		}
		*arch, projShape, opts = projArch, pshape, popts
	}
	var shape gguf.Shape
	var err error
	if *arch == "" {
		shape, err = gguf.ParseShape(*shapeFlag)
	} else {
		if !slices.Contains(llama.Architectures(), *arch) {
			return fmt.Errorf("unknown architecture %q; llama.cpp %s knows %s", *arch, llama.Release(), strings.Join(llama.Architectures(), " "))
		}
		shape = gguf.ArchShape(*arch)
		if *mmproj != "" {
			shape = projShape
		}
		if shapeSet {
			shape, err = gguf.ParseShapeFrom(shape, *shapeFlag)
		}
	}
	if err != nil {
		return err
	}
	if *vocab != "" {
		if opts.Tokenizer, err = gguf.ReadMetadata(*vocab); err != nil {
			return err
		}
	}
	if *template != "" {
		b, err := readChatTemplate(*template)
		if err != nil {
			return err
		}
		opts.ChatTemplate = b
	}
	if *arch == "" {
		err = gguf.WriteSyntheticOptions(out, shape, *seed, opts)
	} else {
		err = gguf.WriteSyntheticArch(out, *arch, shape, *seed, opts, llama.Layout)
	}
	if err != nil {
		return err
	}
	// The write is not interruptible; an interrupt during it discards the file.
	if err := ctx.Err(); err != nil {
		os.Remove(out)
		return err
	}
	st, err := os.Stat(out)
	if err != nil {
		return err
	}
	if opts.Tokenizer != nil {
		shape.Vocab = opts.Tokenizer.VocabSize
	}
	params := shape.Params()
	if *arch != "" {
		m, err := gguf.ReadMetadata(out)
		if err != nil {
			return err
		}
		params = int64(m.Parameters())
	}
	fmt.Printf("wrote %s\nshape %v\n%d parameters (%.1fM), %d bytes (%.1f MiB)\n",
		out, shape, params, float64(params)/1e6, st.Size(), float64(st.Size())/(1<<20))
	if *mmproj == "" {
		return nil
	}
	pp := projectorPath(out)
	if err := gguf.WriteSyntheticProjector(pp, *mmproj, shape.Embd, *seed); err != nil {
		return err
	}
	if st, err = os.Stat(pp); err != nil {
		return err
	}
	fmt.Printf("wrote %s\n%s projector for a %d-wide model, %d bytes (%.1f MiB)\n",
		pp, *mmproj, shape.Embd, st.Size(), float64(st.Size())/(1<<20))
	return nil
}

// projectorPath is where synth --mmproj writes the projector of the model
// at path: NAME.mmproj.gguf beside NAME.gguf, the first name the plan's
// discovery beside a model tries (then mmproj-NAME.gguf, the name
// llama.cpp's and Ollama's Hugging Face repositories use, which pull
// already leaves out of the model files).
func projectorPath(path string) string {
	return strings.TrimSuffix(path, ".gguf") + ".mmproj.gguf"
}

// maxChatTemplate bounds a chat template file; real ones are a few KiB.
const maxChatTemplate = 1 << 20

// readChatTemplate reads a chat template file of at most maxChatTemplate
// bytes.
func readChatTemplate(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxChatTemplate+1))
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	if len(b) > maxChatTemplate {
		return "", fmt.Errorf("chat template %s: more than %d bytes", path, maxChatTemplate)
	}
	if len(b) == 0 {
		return "", fmt.Errorf("chat template %s is empty", path)
	}
	return string(b), nil
}
