package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/corral-llm/corral/wire"
)

// completion is what the tests read of a /completion answer.
type completion struct {
	Content      string `json:"content"`
	TokensCached int    `json:"tokens_cached"`
	Timings      struct {
		PromptN int `json:"prompt_n"`
	} `json:"timings"`
}

// complete posts a greedy /completion request of prompt to url.
func complete(t *testing.T, url, prompt string) completion {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "n_predict": 12, "temperature": 0, "ignore_eos": true})
	resp, err := http.Post(url+"/completion", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /completion: %d %s", resp.StatusCode, b)
	}
	var c completion
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("POST /completion: %v: %s", err, b)
	}
	return c
}

// metric returns the line of /metrics that starts with name, "" if none.
func metric(t *testing.T, url, name string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, name) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// TestServeDiskCacheSurvivesRestart: with --cache-disk, a conversation's
// prompt cached by one corral serve process is found by the next one on
// the same directory after a restart: only its last token is evaluated
// (timings.prompt_n), the rest is reported cached, and the answer is the
// first run's.
func TestServeDiskCacheSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	prompt := strings.Repeat("Tom had a big red ball and a small blue car. ", 10) + "Lily and Tom went to the park."
	url, stop := serveProcess(t, "--cache-disk", dir)
	first := complete(t, url, prompt)
	if first.TokensCached != 0 {
		t.Fatalf("first run: %d cached tokens on an empty cache", first.TokensCached)
	}
	n := first.Timings.PromptN
	if n < 64 {
		t.Fatalf("the prompt has %d tokens; want a long one", n)
	}
	stop()

	url, _ = serveProcess(t, "--cache-disk", dir)
	second := complete(t, url, prompt)
	if second.TokensCached != n-1 || second.Timings.PromptN != 1 {
		t.Errorf("after the restart: %d tokens cached, %d evaluated; want %d and 1", second.TokensCached, second.Timings.PromptN, n-1)
	}
	if second.Content != first.Content {
		t.Errorf("after the restart: %q, want the first run's %q", second.Content, first.Content)
	}
	if got, want := metric(t, url, `corral_disk_cache_hits_total{`), "} 1"; !strings.HasSuffix(got, want) {
		t.Errorf("metrics: %q, want a count of 1", got)
	}
}

// chatTurn posts a greedy, non-streamed chat completion of messages to url
// and returns the answer and its usage.
func chatTurn(t *testing.T, url string, messages []wire.Message) (wire.Message, wire.Usage) {
	t.Helper()
	zero := 0.0
	req := wire.ChatRequest{Messages: messages, RequestParams: wire.RequestParams{MaxTokens: 12, Temperature: &zero}}
	body, _ := json.Marshal(req)
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/chat/completions: %d %s", resp.StatusCode, b)
	}
	var c wire.ChatCompletion
	if err := json.Unmarshal(b, &c); err != nil || len(c.Choices) != 1 || c.Usage == nil {
		t.Fatalf("POST /v1/chat/completions: %v: %s", err, b)
	}
	return c.Choices[0].Message, *c.Usage
}

// TestServeDiskCacheKeepsSlotsAtSIGTERM: a conversation whose cache only
// its slot holds (no --cache-ram, and a turn too short for a slot ever to
// push out) is written to --cache-disk when corral serve gets SIGTERM;
// the server started again on the directory answers the conversation's
// next turn with the whole first turn's prompt restored from the file.
func TestServeDiskCacheKeepsSlotsAtSIGTERM(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--cache-disk", dir, "--cache-ram", "0"}
	url, stop := serveProcess(t, args...)
	conv := []wire.Message{{Role: "user", Content: "Tom had a big red ball."}}
	answer, first := chatTurn(t, url, conv)
	if first.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("first turn: %d cached tokens on an empty cache", first.PromptTokensDetails.CachedTokens)
	}
	if got := metric(t, url, `corral_disk_cache_saved_total{`); !strings.HasSuffix(got, "} 0") {
		t.Fatalf("before SIGTERM: %q; want nothing written yet (the cache is the slot's alone)", got)
	}
	stop() // SIGTERM; fails t unless the process exits 0

	url, _ = serveProcess(t, args...)
	conv = append(conv, answer, wire.Message{Role: "user", Content: "What did Tom do next?"})
	_, next := chatTurn(t, url, conv)
	if cached := next.PromptTokensDetails.CachedTokens; cached < first.PromptTokens || cached >= next.PromptTokens {
		t.Errorf("next turn after the restart: %d of %d prompt tokens cached; want at least the first turn's %d (its prompt, restored from disk)",
			cached, next.PromptTokens, first.PromptTokens)
	}
	if got := metric(t, url, `corral_disk_cache_hits_total{`); !strings.HasSuffix(got, "} 1") {
		t.Errorf("metrics: %q, want one disk hit", got)
	}
}

// TestServeDiskCacheSurvivesUnload: with --keep-alive 0 the model unloads
// after each request, writing what it cached to --cache-disk; the next
// request, which loads it again, finds its prompt there.
func TestServeDiskCacheSurvivesUnload(t *testing.T) {
	dir := t.TempDir()
	prompt := strings.Repeat("The little dog ran after the cat in the garden. ", 8) + "Then it slept."
	url, _ := serveProcess(t, "--cache-disk", dir, "--keep-alive", "0")
	first := complete(t, url, prompt)
	n := first.Timings.PromptN
	if first.TokensCached != 0 || n < 64 {
		t.Fatalf("first request: %d cached of %d; want 0 of a long prompt", first.TokensCached, n)
	}
	poll(t, "the model unloaded", nil, func() bool { return modelState(t, url) == "unloaded" })
	second := complete(t, url, prompt)
	if second.TokensCached != n-1 || second.Content != first.Content {
		t.Errorf("after the unload: %d tokens cached, %q; want %d, %q", second.TokensCached, second.Content, n-1, first.Content)
	}
}

// modelState is the state GET /v1/models gives the one model served.
func modelState(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			State string `json:"state"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Data) != 1 {
		t.Fatalf("GET /v1/models: %v, %+v", err, list)
	}
	return list.Data[0].State
}
