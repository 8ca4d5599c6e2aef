//go:build gpu

package engine_test

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llama"
)

// The offload tests (make test-gpu): every layer of the model on the
// device $CORRAL_TEST_DEVICE names, through the backend libraries of
// $CORRAL_BACKENDS. They fail when the device is not there.

// gpuOffload returns the offload of every layer to the test device.
func gpuOffload(t *testing.T) llama.Offload {
	t.Helper()
	name := os.Getenv("CORRAL_TEST_DEVICE")
	if name == "" {
		t.Fatal("CORRAL_TEST_DEVICE is not set: name the device to test (make test-gpu sets it)")
	}
	devs := engine.Devices()
	if !slices.ContainsFunc(devs, func(d engine.Device) bool { return d.Name == name }) {
		t.Fatalf("device %s not found: devices %+v, backends %+v", name, devs, llama.Backends())
	}
	return llama.Offload{GPULayers: llama.GPULayersAll, Devices: []string{name}}
}

// newGPUEngine starts an engine with every layer on the test device.
func newGPUEngine(t *testing.T, model string, cfg engine.Config) *engine.Engine {
	t.Helper()
	cfg.Offload = gpuOffload(t)
	e := newEngine(t, model, cfg)
	info := e.Info()
	if info.GPULayers != info.Layers || !slices.Equal(info.Devices, cfg.Offload.Devices) {
		t.Fatalf("%s: %d of %d layers on %v, want all on %v", model, info.GPULayers, info.Layers, info.Devices, cfg.Offload.Devices)
	}
	return e
}

// gpuTies are the goldens whose greedy output on a device leaves the
// CPU's at a near tie (see llama's TestGPUGoldenAllLayers): the text
// before it, which the device's output must start with. With lavapipe
// the Q8_0 model's "The little dog" takes "climb" for "jump" (logits
// 0.026 apart on the CPU) at its 39th token.
var gpuTies = map[string]string{
	testmodel.TinyStories656K + "\x00The little dog": "was in a big forest. He liked to run and jump all day long. He liked to run and jump and play with his friends. One day, he saw a small bird flying in the sky. He wanted to be friends with it, but he was scared. He tried to ",
}

// checkGolden fails t unless got is g's golden text, or starts with the
// text before a known near tie (gpuTies).
func checkGolden(t *testing.T, model string, g testmodel.Golden, got, how string) {
	t.Helper()
	if got == g.Want {
		return
	}
	if prefix, ok := gpuTies[model+"\x00"+g.Prompt]; ok && strings.HasPrefix(got, prefix) && strings.HasPrefix(g.Want, prefix) {
		t.Logf("%s %q %s: the golden up to its near tie, then %q", model, g.Prompt, how, strings.TrimPrefix(got, prefix))
		return
	}
	t.Errorf("%s %q %s:\n got %q\nwant %q", model, g.Prompt, how, got, g.Want)
}

// TestGPUGoldens: with every layer offloaded the engine gives the goldens
// (the CPU's greedy outputs, up to a known near tie), one request at a
// time; batched, it gives what it gave alone.
func TestGPUGoldens(t *testing.T) {
	for _, model := range []string{testmodel.Stories260K, testmodel.TinyStories656K} {
		cases := testmodel.GoldensFor(model)
		alone := make([]string, len(cases))
		// A small cache: on lavapipe a pass over every cell is slow.
		cfg := engine.Config{Parallel: len(cases), BatchSize: 64, CtxSize: 128 * len(cases)}
		e := newGPUEngine(t, model, cfg)
		for i, g := range cases {
			got, res := collect(t, submit(t, e, greedy(g.Prompt, g.N)))
			checkGolden(t, model, g, got, "alone")
			alone[i] = got
			if res.FinishReason != engine.FinishLength || res.Usage.CompletionTokens != g.N {
				t.Errorf("%s %q: finish %s after %d tokens, want length after %d", model, g.Prompt, res.FinishReason, res.Usage.CompletionTokens, g.N)
			}
		}
		e.Close()
		e = newGPUEngine(t, model, cfg)
		var wg sync.WaitGroup
		for i, g := range cases {
			wg.Go(func() {
				s, err := e.Submit(context.Background(), greedy(g.Prompt, g.N))
				if err != nil {
					t.Error(err)
					return
				}
				if got, res := collect(t, s); got != alone[i] {
					t.Errorf("%s %q batched (finish %s after %d tokens, err %v):\n got %q\nalone %q",
						model, g.Prompt, res.FinishReason, res.Usage.CompletionTokens, res.Err, got, alone[i])
				}
			})
		}
		wg.Wait()
		e.Close()
	}
}

// TestGPUEmbeddingsMatchCPU: mean-pooled embeddings computed on the
// device are the CPU's within gpuEmbedTol. The Q8_0 model's unit vectors
// differ by up to 0.0042 a component on lavapipe (its logits by up to
// 0.32: see llama's TestGPUGoldenAllLayers).
func TestGPUEmbeddingsMatchCPU(t *testing.T) {
	const gpuEmbedTol = 0.01
	cfg := engine.Config{Parallel: 1, Pooling: "mean", CtxSize: 128, BatchSize: 64}
	cpu := newEngine(t, testmodel.TinyStories656K, cfg)
	gpu := newGPUEngine(t, testmodel.TinyStories656K, cfg)
	for _, text := range embedTexts {
		a := embedOne(t, cpu, engine.EmbedInput{Text: text})
		b := embedOne(t, gpu, engine.EmbedInput{Text: text})
		if len(a) != len(b) || len(a) == 0 {
			t.Fatalf("%q: %d components on the CPU, %d on the device", text, len(a), len(b))
		}
		if d := maxDiff(a, b); d > gpuEmbedTol {
			t.Errorf("%q: components differ by up to %g between CPU and device, want at most %g", text, d, gpuEmbedTol)
		}
	}
}

// TestGPUCancelWhileDecoding: a request decoding on the device stops at
// Cancel (finish reason cancelled, every token counted), the slot frees,
// and the engine serves the next request with the golden output.
func TestGPUCancelWhileDecoding(t *testing.T) {
	e := newGPUEngine(t, testmodel.Stories260K, engine.Config{Parallel: 1, CtxSize: 512})
	s := submit(t, e, greedy("Once upon a time", 1500))
	received := 0
	for received < 3 {
		c, err := s.Recv(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		received += c.Tokens
	}
	s.Cancel()
	for {
		c, err := s.Recv(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		received += c.Tokens
	}
	res := s.Result()
	if res.FinishReason != engine.FinishCancelled || res.Usage.CompletionTokens != received || received >= 1500 {
		t.Fatalf("after Cancel: finish %s, %d tokens counted, %d delivered; want cancelled, all counted, fewer than asked",
			res.FinishReason, res.Usage.CompletionTokens, received)
	}
	waitIdle(t, e)
	g := testmodel.GoldensFor(testmodel.Stories260K)[0]
	got, _ := collect(t, submit(t, e, greedy(g.Prompt, g.N)))
	checkGolden(t, testmodel.Stories260K, g, got, "after a cancelled request")
}

// TestGPUPreemptsTheWorseClass: with every layer offloaded, a request of
// the worse priority class gives up its cells (on the device) to a
// better-class one when the pool runs out (past its 200th token), resumes,
// and gives all its tokens, the first 200 those it gives alone,
// uninterrupted, on the device (as the CPU's pool tests check). Past
// them both requests are in the repetitive text the model writes after
// its stories end, where a near tie may fall either way once the resumed
// request's cells were evaluated again in one batch instead of a token at
// a time: on lavapipe the two runs part after about 300 tokens.
func TestGPUPreemptsTheWorseClass(t *testing.T) {
	model := testmodel.TinyStories656K
	low := engine.Request{Prompt: "Once upon a time", AddSpecial: true, MaxTokens: 350, IgnoreEOS: true, Priority: 1}
	high := engine.Request{Prompt: "Hello", AddSpecial: true, MaxTokens: 350, IgnoreEOS: true}
	cfg := engine.Config{Parallel: 2, CtxSize: 512}

	ref := newGPUEngine(t, model, cfg)
	head := func(r engine.Request) string {
		r.MaxTokens = inOrder
		got, res := collect(t, submit(t, ref, r))
		if res.Err != nil || res.Preemptions != 0 {
			t.Fatalf("alone: %+v", res)
		}
		return got
	}
	wantL, wantH := head(low), head(high)

	e := newGPUEngine(t, model, cfg)
	l := submit(t, e, low)
	waitDecoding(t, e, l, 1)
	h := submit(t, e, high)
	gotH, resH := collect(t, h)
	gotL, resL := collect(t, l)
	if resH.Preemptions != 0 || resL.Preemptions != 1 {
		t.Errorf("preemptions: better class %d, worse class %d; want 0 and 1", resH.Preemptions, resL.Preemptions)
	}
	if resL.Err != nil || resL.Usage.CompletionTokens != low.MaxTokens {
		t.Errorf("worse class: %d tokens (%v), want %d", resL.Usage.CompletionTokens, resL.Err, low.MaxTokens)
	}
	if !strings.HasPrefix(gotL, wantL) {
		t.Errorf("the preempted request's first %d tokens differ from its uninterrupted run on the device:\n got %q\nwant %q...", inOrder, gotL, wantL)
	}
	if !strings.HasPrefix(gotH, wantH) {
		t.Errorf("the better-class request's first %d tokens differ from its run alone on the device:\n got %q\nwant %q...", inOrder, gotH, wantH)
	}
}
