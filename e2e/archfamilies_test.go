package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
	servedmodel "github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/reasoning"
	"github.com/corral-llm/corral/toolcall"
)

// familyArchitectures pairs real chat templates of the tool-call and
// reasoning families with the architecture their models run on.
var familyArchitectures = []struct{ arch, template string }{
	{"qwen35", "Qwen3.5-4B.jinja"},
	{"qwen3moe", "Qwen3-Coder.jinja"},
	{"gemma4", "google-gemma-4-31B-it.jinja"},
	{"gpt-oss", "openai-gpt-oss-120b.jinja"},
	{"deepseek4", "deepseek-ai-DeepSeek-V4.jinja"},
	// Not DeepSeek V3.1 and V3.2 (deepseek2, deepseek32): their calls are
	// written as text in full-width characters, and an architecture's
	// synthetic vocabulary writes ASCII only (testsynth.Arch); the llama
	// architecture's, with every byte, writes them (TestFamiliesEndToEnd).
	{"kimi-k3", "Kimi-K3.jinja"},
	{"minimax-m3", "MiniMax-M3.jinja"},
	{"minimax-m2", "MiniMax-M2.jinja"},
	{"glm4moe", "GLM-4.6.jinja"},
	{"lfm2", "LFM2.5-Instruct.jinja"},
	{"lfm2moe", "LFM2-8B-A1B.jinja"},
	{"nemotron_h", "NVIDIA-Nemotron-Nano-v2.jinja"},
	{"nemotron_h_moe", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja"},
	{"granitehybrid", "ibm-granite-granite-4.0.jinja"},
	{"step35", "StepFun3.5-Flash.jinja"},
	{"seed_oss", "ByteDance-Seed-OSS.jinja"},
	{"smollm3", "HuggingFaceTB-SmolLM3-3B.jinja"},
	{"mistral3", "mistralai-Ministral-3-14B-Reasoning-2512.jinja"},
	{"cohere2moe", "Cohere2MoE.jinja"},
	{"apertus", "Apertus-8B-Instruct.jinja"},
	{"hy_v3", "tencent-Hy3.jinja"},
	{"laguna", "poolside-Laguna-XS.2.jinja"},
}

// TestFamiliesOnTheirArchitectures: each family's real template on a
// synthetic model of its own architecture (its memory kind: hybrid,
// sliding-window, MLA, mixture of experts) forces a call of get_weather,
// whole and streamed, through openai-go (as TestFamiliesEndToEnd does on
// the llama architecture) and through anthropic-sdk-go. An architecture
// llama.cpp b10573 cannot build a synthetic model of is skipped with
// gguf.ArchUnsupported's reason.
func TestFamiliesOnTheirArchitectures(t *testing.T) {
	dir := t.TempDir()
	for _, fa := range familyArchitectures {
		t.Run(fa.arch, func(t *testing.T) {
			if why, ok := gguf.ArchUnsupported[fa.arch]; ok {
				t.Skip(why)
			}
			b, err := os.ReadFile(filepath.Join(testmodel.TemplatesDir(), fa.template))
			if err != nil {
				t.Fatal(err)
			}
			m := &familyModel{file: fa.template, src: string(b), tools: toolcall.Detect(string(b))}
			if f := reasoning.Detect(m.src); f != nil {
				m.think = f
			}
			path := testsynth.ArchTemplate(t, dir, fa.arch, m.src, m.specialMarkers())
			var opt servedmodel.Options
			if o := templateOptions[m.file]; o != nil {
				if opt, err = o(m.src); err != nil {
					t.Fatal(err)
				}
			}
			ts := e2etest.Start(t, path, e2etest.Options{Engine: engine.Config{Parallel: 1, CtxSize: 16384}, Model: opt})
			t.Run("openai", func(t *testing.T) { familyCalls(t, ts, m) })
			t.Run("anthropic", func(t *testing.T) { familyCallsAnthropic(t, ts) })
		})
	}
}

// familyCallsAnthropic forces a call of get_weather through the Anthropic
// SDK, whole and streamed.
func familyCallsAnthropic(t *testing.T, ts *e2etest.Server) {
	client := anthropicClient(ts)
	p := sdk.MessageNewParams{
		Model:      claudeModel,
		MaxTokens:  300,
		Messages:   []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("What is the weather in Paris?"))},
		Tools:      []sdk.ToolUnionParam{anthropicWeather()},
		ToolChoice: sdk.ToolChoiceParamOfTool("get_weather"),
		// As familyBudget: a reasoning the prompt opens is closed.
		Thinking: sdk.ThinkingConfigParamOfEnabled(4),
	}
	whole, err := client.Messages.New(context.Background(), p, anthropicGreedy)
	if err != nil {
		t.Fatal(err)
	}
	checkAnthropicCall(t, "whole", whole)
	msg, _ := streamMessage(t, client, p, anthropicGreedy)
	checkAnthropicCall(t, "streamed", &msg)
}

// checkAnthropicCall checks that m ends in one call of get_weather whose
// input follows its schema, after at most a thinking block.
func checkAnthropicCall(t *testing.T, what string, m *sdk.Message) {
	t.Helper()
	var calls []sdk.ToolUseBlock
	for _, c := range m.Content {
		switch c.Type {
		case "tool_use":
			calls = append(calls, c.AsToolUse())
		case "thinking":
		default:
			t.Errorf("%s: a %s block: %s", what, c.Type, m.RawJSON())
		}
	}
	if m.StopReason != sdk.StopReasonToolUse || len(calls) != 1 || calls[0].Name != "get_weather" {
		t.Fatalf("%s: %s", what, m.RawJSON())
	}
	checkWeatherInput(t, calls[0].Input)
}
