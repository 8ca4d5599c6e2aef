package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// response is what the tests read of a Responses API answer.
type response struct {
	ID     string `json:"id"`
	Output []struct {
		Type    string `json:"type"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
	Usage struct {
		InputTokens        int `json:"input_tokens"`
		OutputTokens       int `json:"output_tokens"`
		InputTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	} `json:"usage"`
}

// text is the response's output text.
func (r response) text() string {
	var b strings.Builder
	for _, it := range r.Output {
		for _, c := range it.Content {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// respond posts a greedy Responses request to url with key's bearer token:
// input, continuing previous when not "", stored when store.
func respond(t *testing.T, url, key, previous, input string, store bool) response {
	t.Helper()
	req := map[string]any{"input": input, "temperature": 0, "max_output_tokens": 12, "store": store}
	if previous != "" {
		req["previous_response_id"] = previous
	}
	body, _ := json.Marshal(req)
	code, b := call(t, http.MethodPost, url+"/v1/responses", key, body)
	if code != http.StatusOK {
		t.Fatalf("POST /v1/responses: %d %s", code, b)
	}
	var r response
	if err := json.Unmarshal(b, &r); err != nil || r.ID == "" {
		t.Fatalf("POST /v1/responses: %v: %s", err, b)
	}
	return r
}

// call makes a request with key's bearer token (none when "") and
// returns the status and body.
func call(t *testing.T, method, url, key string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestServeResponsesSurviveRestart: with --cache-disk, a response stored
// (store: true) by one corral serve process is continued through
// previous_response_id by the next one on the same directory after a
// SIGTERM, as it was before the restart: GET returns the same bytes, the
// continuation's prompt has as many tokens and its greedy answer is the
// same, and the whole prompt but its last token is found in the KV disk
// tier, which kept it across the restart. It stays its API key's: another
// key does not find it. A server started with --responses-dir= (empty)
// keeps nothing across the restart.
func TestServeResponsesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	const alice, bob = "sk-alice-0123456789", "sk-bob-0123456789"
	args := []string{"--cache-disk", dir, "--api-key", alice, "--api-key", bob, "--metrics-public"}
	url, stop := serveProcess(t, args...)
	first := respond(t, url, alice, "", "Tom had a big red ball.", true)
	next := "What did Tom do next?"
	before := respond(t, url, alice, first.ID, next, false)
	if before.Usage.InputTokens <= first.Usage.InputTokens+first.Usage.OutputTokens || before.text() == "" {
		t.Fatalf("the continuation before the restart: %+v; want the first turn's %d+%d tokens in its prompt", before, first.Usage.InputTokens, first.Usage.OutputTokens)
	}
	code, stored := call(t, http.MethodGet, url+"/v1/responses/"+first.ID, alice, nil)
	if code != http.StatusOK {
		t.Fatalf("GET before the restart: %d %s", code, stored)
	}
	stop() // SIGTERM; fails t unless the process exits 0
	if files, _ := filepath.Glob(filepath.Join(dir, "responses", "*.resp")); len(files) != 1 {
		t.Fatalf("the store's directory holds %v; want the one stored response", files)
	}

	url, stop = serveProcess(t, args...)
	if code, b := call(t, http.MethodGet, url+"/v1/responses/"+first.ID, alice, nil); code != http.StatusOK || !bytes.Equal(b, stored) {
		t.Errorf("GET after the restart: %d %s\nwant %s", code, b, stored)
	}
	if code, b := call(t, http.MethodGet, url+"/v1/responses/"+first.ID, bob, nil); code != http.StatusNotFound {
		t.Errorf("another key's GET after the restart: %d %s", code, b)
	}
	after := respond(t, url, alice, first.ID, next, false)
	if after.Usage.InputTokens != before.Usage.InputTokens || after.text() != before.text() {
		t.Errorf("the continuation after the restart: %d prompt tokens, %q; before it: %d, %q",
			after.Usage.InputTokens, after.text(), before.Usage.InputTokens, before.text())
	}
	t.Logf("continued after the restart: %d prompt tokens (%d cached), %q", after.Usage.InputTokens, after.Usage.InputTokensDetails.CachedTokens, after.text())
	if cached := after.Usage.InputTokensDetails.CachedTokens; cached != after.Usage.InputTokens-1 {
		t.Errorf("after the restart: %d of the %d prompt tokens cached; want all but the last, from the disk tier", cached, after.Usage.InputTokens)
	}
	if got := metric(t, url, `corral_disk_cache_hits_total{`); !strings.HasSuffix(got, "} 1") {
		t.Errorf("metrics: %q, want one disk hit", got)
	}
	stop()

	url, _ = serveProcess(t, append(args, "--responses-dir=")...)
	if code, b := call(t, http.MethodGet, url+"/v1/responses/"+first.ID, alice, nil); code != http.StatusNotFound {
		t.Errorf("GET with --responses-dir= (memory only): %d %s", code, b)
	}
	respond(t, url, alice, "", "Lily ran.", true)
	if files, _ := filepath.Glob(filepath.Join(dir, "responses", "*.resp")); len(files) != 1 {
		t.Errorf("with --responses-dir= the directory holds %v; want the first server's file alone", files)
	}
}

// TestServeResponsesDir: --responses-dir keeps the store in a directory
// of its own (created 0700) without --cache-disk; a second server on the
// same directory, or a directory that cannot be one, is refused before
// anything loads, naming the flag.
func TestServeResponsesDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	url, stop := serveProcess(t, "--responses-dir", dir)
	first := respond(t, url, "", "", "Tom had a big red ball.", true)
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the directory: %v %v", fi, err)
	}
	err = runServe(context.Background(), []string{"--responses-dir", dir})
	if err == nil || !strings.Contains(err.Error(), "--responses-dir: ") || !strings.Contains(err.Error(), "held by another") {
		t.Errorf("a second server on the directory: %v", err)
	}
	err = runServe(context.Background(), []string{"--responses-dir", filepath.Join(dir, "lock", "sub")})
	if err == nil || !strings.Contains(err.Error(), "--responses-dir: ") {
		t.Errorf("a directory under a file: %v", err)
	}
	stop()
	url, _ = serveProcess(t, "--responses-dir", dir)
	if code, b := call(t, http.MethodGet, url+"/v1/responses/"+first.ID, "", nil); code != http.StatusOK {
		t.Errorf("GET after the restart: %d %s", code, b)
	}
}
