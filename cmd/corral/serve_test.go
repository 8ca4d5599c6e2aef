package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	if err := os.WriteFile(undefined, []byte("{{ messages[0].content }}\n{{ functions.name }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--chat-template-file", bad}, bad + ": parse chat template: line 2: no filter named 'nosuchfilter'"},
		{[]string{"--chat-template-file", undefined}, undefined + ": render chat template: line 2: UndefinedError: 'functions' is undefined"},
		{[]string{"--chat-template-file", filepath.Join(dir, "none.jinja")}, "no such file"},
		{[]string{"--chat-template", "chatml", "--chat-template-file", bad}, "--chat-template and --chat-template-file: give one"},
		{[]string{"--chat-template-kwargs", "[1]"}, "--chat-template-kwargs: want a JSON object"},
		{[]string{"--chat-template-kwargs", "{enable_thinking: false}"}, "--chat-template-kwargs: invalid character"},
		{[]string{"--chat-template-kwargs", `{"messages": []}`}, `--chat-template-kwargs: template argument is reserved: "messages"`},
		// With the variable it reads, the template passes, and serve goes
		// on to the models.
		{[]string{"--chat-template-file", undefined, "--chat-template-kwargs", `{"functions": {"name": "f"}}`, "--models-dir", dir}, "--models-dir " + dir + ": no .gguf files"},
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
