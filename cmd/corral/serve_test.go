package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/internal/testmodel"
)

// TestServeSchedulingFlags: corral serve refuses a --cache-isolation it
// does not know and a --max-pause that is not positive, naming the flag,
// before it loads anything.
func TestServeSchedulingFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--cache-isolation=tenant"}, `--cache-isolation "tenant": want none or key`},
		{[]string{"--max-pause=0"}, "--max-pause 0s: want a positive duration"},
		{[]string{"--kv-events=localhost:5557"}, `--kv-events: kv events endpoint "localhost:5557": want bind:tcp://HOST:PORT`},
		{[]string{"--kv-events=tcp://:5557"}, "no host (bind:tcp://127.0.0.1:5557 binds loopback"},
		{[]string{"--kv-events-tokens=maybe"}, `--kv-events-tokens "maybe": want auto, on or off`},
	} {
		err := runServe(context.Background(), tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("corral serve %q: %v, want an error with %q", tt.args, err, tt.want)
		}
	}
}

// TestServeMediaFlags: corral serve refuses an --allowed-media-domains
// entry that is not a host (a wildcard, a scheme, a port) and a
// --media-fetch-timeout that is not positive, naming the flag, before it
// loads anything.
func TestServeMediaFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--allowed-media-domains=images.example,*.example.com"}, `--allowed-media-domains: "*.example.com": wildcards are not taken`},
		{[]string{"--allowed-media-domains=images.example", "--allowed-media-domains=https://cdn.example"}, `--allowed-media-domains: "https://cdn.example": want a host name or IP address`},
		{[]string{"--allowed-media-domains=cdn.example:443"}, `--allowed-media-domains: "cdn.example:443": want a host name or IP address`},
		{[]string{"--media-fetch-timeout=0"}, "--media-fetch-timeout 0s: want a positive duration"},
	} {
		err := runServe(context.Background(), tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("corral serve %q: %v, want an error with %q", tt.args, err, tt.want)
		}
	}
}

// TestServeResponsesFlags: corral serve refuses Responses store bounds
// that are not positive, naming the flag, before it loads anything.
func TestServeResponsesFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--responses-store-bytes=0"}, "--responses-store-bytes 0: want a positive size"},
		{[]string{"--responses-store-key-bytes=-1"}, "--responses-store-key-bytes -1: want 0 or more"},
		{[]string{"--responses-ttl=0"}, "--responses-ttl 0s: want a positive duration"},
	} {
		err := runServe(context.Background(), tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("corral serve %q: %v, want an error with %q", tt.args, err, tt.want)
		}
	}
}

// TestServeTemplateFlags: corral serve refuses a chat template file that
// does not work (naming the file and the line), both template flags at
// once, and chat template kwargs that are not a JSON object of allowed
// variables, before it loads anything.
func TestServeTemplateFlags(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jinja")
	if err := os.WriteFile(bad, []byte("{% for m in messages %}\n{{ m.content | nosuchfilter }}\n{% endfor %}"), 0o644); err != nil {
		t.Fatal(err)
	}
	undefined := filepath.Join(dir, "undefined.jinja")
	if err := os.WriteFile(undefined, []byte("{{ messages[0].content }}\n{{ plugins.name }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	kimi := filepath.Join(testmodel.TemplatesDir(), "Kimi-K2-Instruct.jinja")
	// The templates that render only with tools offered (or read them
	// as functions) pass.
	for _, name := range []string{"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
		"CohereForAI-c4ai-command-r-plus-tool_use", "fireworks-ai-llama-3-firefunction-v2"} {
		file := filepath.Join(testmodel.TemplatesDir(), name+".jinja")
		if err := runServe(context.Background(), []string{"--chat-template-file", file, "--models-dir", dir}); err == nil || !strings.Contains(err.Error(), "no .gguf files") {
			t.Errorf("--chat-template-file %s: %v, want the template accepted", name, err)
		}
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--chat-template-file", bad}, bad + ": parse chat template: line 2: no filter named 'nosuchfilter'"},
		{[]string{"--chat-template-file", undefined}, undefined + ": render chat template: line 2: UndefinedError: 'plugins' is undefined"},
		{[]string{"--chat-template-file", filepath.Join(dir, "none.jinja")}, "no such file"},
		{[]string{"--chat-template", "chatml", "--chat-template-file", bad}, "--chat-template and --chat-template-file: give one"},
		{[]string{"--chat-template-kwargs", "[1]"}, "--chat-template-kwargs: want a JSON object"},
		{[]string{"--chat-template-kwargs", "{enable_thinking: false}"}, "--chat-template-kwargs: invalid character"},
		{[]string{"--chat-template-kwargs", `{"messages": []}`}, `--chat-template-kwargs: template argument is reserved: "messages"`},
		// With the variable it reads, the template passes, and serve goes
		// on to the models.
		{[]string{"--chat-template-file", undefined, "--chat-template-kwargs", `{"plugins": {"name": "f"}}`, "--models-dir", dir}, "--models-dir " + dir + ": no .gguf files"},
		// Kimi K2's template appends to a list: it needs the opt-in.
		{[]string{"--chat-template-file", kimi}, kimi + ": line 41: .append(): the template changes a list or dict in place, which transformers' sandbox refuses: allow it with --chat-template-mutable"},
		{[]string{"--chat-template-file", kimi, "--chat-template-mutable", "--models-dir", dir}, "--models-dir " + dir + ": no .gguf files"},
	} {
		err := runServe(context.Background(), tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("corral serve %q: %v, want an error with %q", tt.args, err, tt.want)
		}
	}
}

// TestServeTemplateFile serves the test model with Qwen 3's chat template
// (--chat-template-file) and thinking off (--chat-template-kwargs): the
// prompt /apply-template shows ends with the empty think block, unless a
// request turns thinking back on.
func TestServeTemplateFile(t *testing.T) {
	qwen, err := filepath.Abs("../../chat/testdata/templates/Qwen-Qwen3-0.6B.jinja")
	if err != nil {
		t.Fatal(err)
	}
	url := startServe(t, "--chat-template-file", qwen, "--chat-template-kwargs", `{"enable_thinking": false}`)
	prompt := func(body string) string {
		t.Helper()
		resp, err := http.Post(url+"/apply-template", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var got struct{ Prompt string }
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &got) != nil {
			t.Fatalf("/apply-template: %d %s", resp.StatusCode, b)
		}
		return got.Prompt
	}
	const msgs = `"messages": [{"role": "user", "content": "Is 91 prime?"}]`
	want := "<|im_start|>user\nIs 91 prime?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	if got := prompt(`{` + msgs + `}`); got != want {
		t.Errorf("server kwargs:\n got %q\nwant %q", got, want)
	}
	if got := prompt(`{"chat_template_kwargs": {"enable_thinking": true}, ` + msgs + `}`); got != strings.TrimSuffix(want, "<think>\n\n</think>\n\n") {
		t.Errorf("request kwargs over the server's: %q", got)
	}
}

// TestServeCacheTypes: -ctk and -ctv refuse an unknown type as a flag
// error listing the names, and a quantized V with flash attention off
// before any model loads. A real corral serve runs a model of --config
// with q8_0 keys and values (/v1/models shows them), and refuses a
// model whose heads (16 values) are not whole q4_0 blocks with an error
// naming the flag, where llama.cpp would fail with a generic error.
func TestServeCacheTypes(t *testing.T) {
	model := testmodel.Path(t, testmodel.TinyStories656K)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-ctk", "q8"}, `invalid value "q8" for flag -ctk: KV cache type "q8": want one of f16, f32, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1`},
		{[]string{"--cache-type-v=q4"}, `invalid value "q4" for flag -cache-type-v: KV cache type "q4": want one of f16`},
		{[]string{"-m", model, "--port=0", "-ctv", "q8_0", "-fa", "off"}, "--cache-type-v q8_0 needs flash attention"},
	} {
		err := runServe(context.Background(), tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("corral serve %q: %v, want an error with %q", tt.args, err, tt.want)
		}
	}

	dir := t.TempDir()
	if err := gguf.WriteSynthetic(filepath.Join(dir, "kv64.gguf"), gguf.Shape{Embd: 256, Layers: 2, Heads: 4, HeadsKV: 2, FF: 512, Vocab: 512, Ctx: 512, Type: "q8_0"}, 1); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "models.yaml")
	if err := os.WriteFile(config, []byte("models:\n"+
		"  - path: kv64.gguf\n    cache_type_k: q8_0\n    cache_type_v: q8_0\n"+
		"  - id: narrow\n    path: "+model+"\n    cache_type_v: q4_0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	url := startServe(t, "--config", config, "-c", "512")
	post := func(id string) (int, string) {
		resp, err := http.Post(url+"/v1/completions", "application/json",
			strings.NewReader(`{"model": "`+id+`", "prompt": "Hello", "max_tokens": 4, "temperature": 0}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("kv64"); code != http.StatusOK {
		t.Fatalf("kv64: %d %s", code, body)
	}
	if code, body := post("narrow"); code == http.StatusOK {
		t.Errorf("narrow (heads of 16 in q4_0): %d %s", code, body)
	}
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var models struct {
		Data []struct {
			ID    string
			Error string
			Meta  *struct {
				CacheTypeK string `json:"cache_type_k"`
				CacheTypeV string `json:"cache_type_v"`
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&models); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, m := range models.Data {
		switch m.ID {
		case "kv64":
			seen++
			if m.Meta == nil || m.Meta.CacheTypeK != "q8_0" || m.Meta.CacheTypeV != "q8_0" {
				t.Errorf("kv64's meta %+v, want q8_0 keys and values", m.Meta)
			}
		case "narrow":
			seen++
			if want := "--cache-type-v q4_0: the model's attention heads are 16 values wide"; !strings.Contains(m.Error, want) {
				t.Errorf("narrow's error %q, want one with %q", m.Error, want)
			}
		}
	}
	if seen != 2 {
		t.Errorf("/v1/models: %+v", models.Data)
	}
}

// TestGrammarWhitespaceFlag: --grammar-whitespace sets the whitespace the
// API's JSON grammars allow, compact by default, and refuses other names.
func TestGrammarWhitespaceFlag(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want grammar.Whitespace
		err  string
	}{
		{nil, grammar.WhitespaceCompact, ""},
		{[]string{"--grammar-whitespace=free"}, grammar.WhitespaceFree, ""},
		{[]string{"--grammar-whitespace", "compact"}, grammar.WhitespaceCompact, ""},
		{[]string{"--grammar-whitespace=spaced"}, grammar.WhitespaceSpaced, ""},
		{[]string{"--grammar-whitespace=indented"}, 0, `"indented": want compact, free or spaced`},
	} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		lim := addLimitFlags(fs)
		err := fs.Parse(tt.args)
		switch {
		case tt.err != "":
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: %v, want an error with %q", tt.args, err, tt.err)
			}
		case err != nil || lim.GrammarWhitespace != tt.want || lim.SchemaLimits().Whitespace != tt.want:
			t.Errorf("%q: %v, %v; want %v", tt.args, lim.GrammarWhitespace, err, tt.want)
		}
	}
}
