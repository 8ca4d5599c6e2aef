//go:build gpu

package llama_test

import (
	"context"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/llama"
)

// The offload tests (make test-gpu) run with the backend libraries of
// $CORRAL_BACKENDS loaded and offload to the device $CORRAL_TEST_DEVICE
// names. They fail when it is not there: a test-gpu run that computes on
// the CPU proves nothing.

// testDevice returns the device the tests offload to.
func testDevice(t *testing.T) llama.Device {
	t.Helper()
	name := os.Getenv("CORRAL_TEST_DEVICE")
	if name == "" {
		t.Fatal("CORRAL_TEST_DEVICE is not set: name the device to test (make test-gpu sets it)")
	}
	devs := llama.Devices()
	i := slices.IndexFunc(devs, func(d llama.Device) bool { return d.Name == name })
	if i < 0 {
		t.Fatalf("device %s not found: devices %+v, backends %+v ($%s=%q)", name, devs, llama.Backends(), llama.BackendsEnv, os.Getenv(llama.BackendsEnv))
	}
	return devs[i]
}

// generateOn generates n greedy tokens after prompt, and returns them
// with the number of graph nodes the context computed into device memory.
func generateOn(t *testing.T, m *llama.Model, prompt string, n int) ([]llama.Token, uint64) {
	t.Helper()
	ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 512, NBatch: 512, NSeqMax: 1, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	s, err := llama.NewSampler(m, llama.SamplerParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, np := promptBatch(t, m, prompt)
	var out []llama.Token
	for pos := np; pos < np+n; pos++ {
		if err := ctx.Decode(&b); err != nil {
			t.Fatal(err)
		}
		tok, err := s.Sample(ctx, b.Len()-1)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tok)
		b.Reset()
		b.Add(tok, pos, 0, true)
	}
	return out, ctx.DeviceNodes()
}

func TestGPUDeviceFound(t *testing.T) {
	d := testDevice(t)
	if d.Backend == "" || d.Description == "" || d.Total <= 0 {
		t.Errorf("device %+v: want a backend, a description and its memory", d)
	}
}

// Tolerances of the device's logits against the CPU's, greedy over the
// goldens' length with the CPU's tokens fed to both. Kernels round
// differently: with lavapipe the Q8_0 model's logits differ by up to
// 0.22 (its matrix-vector products do not quantize the activations as the
// CPU's do), the F32 model's by far less.
const (
	// gpuLogitTol bounds |device - CPU| over every logit of every step.
	gpuLogitTol = 0.5
	// gpuTieGap: a step may pick another token than the CPU only where
	// the CPU's logit of that token is within this of its top one (a
	// near tie: measured 0.026, "jump" or "climb" after "He tried to" in
	// the Q8_0 model's "The little dog" golden, 39th token).
	gpuTieGap = 0.1
)

// TestGPUGoldenAllLayers runs the golden prompts with every layer (and
// the output layer) on the device and compares with the CPU: step by
// step on the CPU's tokens, every logit within gpuLogitTol and the same
// greedy token except at near ties; and generating freely on the device,
// the golden text, or the golden up to a near tie where it takes the
// other token.
func TestGPUGoldenAllLayers(t *testing.T) {
	d := testDevice(t)
	for _, c := range testmodel.Goldens {
		path := testmodel.Path(t, c.Model)
		m, err := llama.LoadModelOffload(context.Background(), path,
			llama.Offload{GPULayers: llama.GPULayersAll, Devices: []string{d.Name}}, llama.ContextParams{})
		if err != nil {
			t.Fatal(err)
		}
		off := m.Offloaded()
		if off.GPULayers != off.Layers || !slices.Equal(off.Devices, []string{d.Name}) {
			t.Errorf("%s: offloaded %+v, want every layer on %s", c.Model, off, d.Name)
		}
		cpu, err := llama.LoadModel(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		cpuToks, ties, maxDiff := lockstep(t, cpu, m, c.Prompt, c.N)
		if got := detok(cpu, cpuToks); got != c.Want {
			t.Errorf("%s %q on the CPU: %q, want the golden %q", c.Model, c.Prompt, got, c.Want)
		}
		if maxDiff > gpuLogitTol {
			t.Errorf("%s %q: logits differ by up to %g between CPU and %s, want at most %g", c.Model, c.Prompt, maxDiff, d.Name, gpuLogitTol)
		}
		toks, nodes := generateOn(t, m, c.Prompt, c.N)
		if nodes == 0 {
			t.Errorf("%s %q: no graph node computed in device memory", c.Model, c.Prompt)
		}
		i := 0
		for i < len(toks) && toks[i] == cpuToks[i] {
			i++
		}
		switch {
		case i == len(toks):
		case ties[i]:
			t.Logf("%s %q on %s: the golden's first %d tokens, then a near tie taken the other way: %q",
				c.Model, c.Prompt, d.Name, i, detok(m, toks))
		default:
			t.Errorf("%s %q on %s: differs from the golden at token %d, not a near tie:\n got %q\nwant %q",
				c.Model, c.Prompt, d.Name, i, detok(m, toks), c.Want)
		}
		t.Logf("%s %q: logits within %.3g of the CPU's; %d near ties", c.Model, c.Prompt, maxDiff, len(ties))
		cpu.Close()
		m.Close()
	}
}

// lockstep decodes prompt and n greedy tokens of the CPU model on both
// models, feeding both the CPU's tokens. It returns those tokens, the
// steps where the device's greedy token differs from the CPU's within
// gpuTieGap (failing t where it differs by more), and the largest logit
// difference.
func lockstep(t *testing.T, cpu, dev *llama.Model, prompt string, n int) ([]llama.Token, map[int]bool, float64) {
	t.Helper()
	cp := llama.ContextParams{NCtx: 512, NBatch: 512, NSeqMax: 1, Threads: 1}
	cc, err := llama.NewContext(cpu, cp)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	dc, err := llama.NewContext(dev, cp)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	b, np := promptBatch(t, cpu, prompt)
	var out []llama.Token
	ties := map[int]bool{}
	maxDiff := 0.0
	for step := range n {
		if err := cc.Decode(&b); err != nil {
			t.Fatal(err)
		}
		if err := dc.Decode(&b); err != nil {
			t.Fatal(err)
		}
		lc, ld := cc.Logits(b.Len()-1), dc.Logits(b.Len()-1)
		for i := range lc {
			maxDiff = max(maxDiff, math.Abs(float64(lc[i]-ld[i])))
		}
		ac, ad := argmax(lc), argmax(ld)
		if ac != ad {
			if gap := lc[ac] - lc[ad]; gap < gpuTieGap {
				ties[step] = true
			} else {
				t.Errorf("step %d: the device picks token %d, the CPU %d with a lead of %g over it", step, ad, ac, gap)
			}
		}
		out = append(out, llama.Token(ac))
		b.Reset()
		b.Add(llama.Token(ac), np+step, 0, true)
	}
	return out, ties, maxDiff
}

// argmax is the index of the largest value.
func argmax(l []float32) int {
	best := 0
	for i, v := range l {
		if v > l[best] {
			best = i
		}
	}
	return best
}

// detok is the text of generated tokens.
func detok(m *llama.Model, toks []llama.Token) string {
	var out []byte
	for _, tok := range toks {
		out = m.AppendPiece(out, tok, false)
	}
	return string(out)
}

// TestGPUPartialOffload puts some layers on the device and the rest on
// the CPU: the output is the CPU's too.
func TestGPUPartialOffload(t *testing.T) {
	d := testDevice(t)
	c := testmodel.Goldens[0]
	m, err := llama.LoadModelOffload(context.Background(), testmodel.Path(t, c.Model),
		llama.Offload{GPULayers: 2, Devices: []string{d.Name}}, llama.ContextParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if off := m.Offloaded(); off.GPULayers != 2 || off.Layers <= 2 {
		t.Errorf("offloaded %+v, want 2 layers of more", off)
	}
	toks, nodes := generateOn(t, m, c.Prompt, c.N)
	if got := detok(m, toks); got != c.Want {
		t.Errorf("%s %q with 2 layers on %s: got %q, want %q", c.Model, c.Prompt, d.Name, got, c.Want)
	}
	if nodes == 0 {
		t.Error("no graph node computed in device memory")
	}
	// The CPU run computes nothing there.
	cpu, err := llama.LoadModel(context.Background(), testmodel.Path(t, c.Model))
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	if _, nodes := generateOn(t, cpu, c.Prompt, 4); nodes != 0 {
		t.Errorf("the CPU run computed %d nodes in device memory", nodes)
	}
}

// TestGPUAutoFits offloads as many layers as fit: the test models are
// small, so all of them.
func TestGPUAutoFits(t *testing.T) {
	d := testDevice(t)
	c := testmodel.Goldens[0]
	m, err := llama.LoadModelOffload(context.Background(), testmodel.Path(t, c.Model),
		llama.Offload{GPULayers: llama.GPULayersAuto, Devices: []string{d.Name}},
		llama.ContextParams{NCtx: 512, NBatch: 512, NSeqMax: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if off := m.Offloaded(); off.GPULayers != off.Layers {
		t.Errorf("offloaded %+v, want every layer (the model is small)", off)
	}
}

// TestGPUUnknownDevice refuses a device that is not there, naming the
// ones that are.
func TestGPUUnknownDevice(t *testing.T) {
	d := testDevice(t)
	_, err := llama.LoadModelOffload(context.Background(), testmodel.Path(t, testmodel.Goldens[0].Model),
		llama.Offload{GPULayers: llama.GPULayersAll, Devices: []string{"NoSuchGPU9"}}, llama.ContextParams{})
	if err == nil {
		t.Fatal("loaded on a device that does not exist")
	}
	if msg := err.Error(); !strings.Contains(msg, "NoSuchGPU9") || !strings.Contains(msg, d.Name) {
		t.Errorf("error %q: want the device asked for and those found", msg)
	}
}
