package picker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llm-d/llm-d-kv-cache-manager/pkg/kvcache/kvblock"
	"github.com/llm-d/llm-d-kv-cache-manager/pkg/kvcache/kvevents"
	"k8s.io/apimachinery/pkg/util/sets"
)

// TestKVEventsIndex: llm-d's KV-cache indexer, fed by three corral serve
// processes' --kv-events, knows exactly which process holds a prompt.
// Everything on the indexer's side is llm-d's own: its ZeroMQ subscriber
// (libzmq, through pebbe/zmq4), its msgpack decoding of the batches, its
// in-memory index and its token processor, which hashes a prompt's token
// ids into the block keys it looks up (corral's /v1/completions/render
// gives the ids, where llm-d would run the model's tokenizer). Each
// process gets its own conversation; the index then names, for each
// conversation's prompt, the process that served it, for every block of
// the prompt, and no other. A process that stops removes its blocks.
func TestKVEventsIndex(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	zport, err := FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	index, err := kvblock.NewInMemoryIndex(kvblock.DefaultInMemoryIndexConfig())
	if err != nil {
		t.Fatal(err)
	}
	pool := kvevents.NewPool(&kvevents.Config{ZMQEndpoint: "tcp://127.0.0.1:" + zport, TopicFilter: "kv@", Concurrency: 2}, index)
	pctx, stopPool := context.WithCancel(ctx)
	pool.Start(pctx)
	defer func() {
		stopPool()
		pool.Shutdown(ctx)
	}()
	tokens := kvblock.NewChunkedTokenDatabase(kvblock.DefaultTokenProcessorConfig())

	servers, _, _ := startPool(t, ctx, "--kv-events=tcp://127.0.0.1:"+zport)
	waitSubscribed(t, ctx, servers)
	prompts := make([]string, len(servers))
	for i, s := range servers {
		prompts[i] = fmt.Sprintf("Conversation %d. Once upon a time there was a little girl named Lily who lived in a small house near the forest with her mother and her dog. ", i) +
			strings.Repeat("She liked to play outside in the sun with her red ball. ", 2+i)
		post(t, "http://"+s.Addr, `{"model":"tiny","prompt":`+strconv.Quote(prompts[i])+`,"max_tokens":4}`)
	}

	// holders maps each process to the number of the prompt's leading
	// blocks the index says it holds.
	holders := func(prompt string) (map[string]int, int) {
		keys := tokens.TokensToKVBlockKeys(render(t, servers[0].Addr, prompt), "tiny")
		if len(keys) == 0 {
			t.Fatalf("a prompt of no whole block: %q", prompt)
		}
		found, err := index.Lookup(ctx, keys, sets.New[string]())
		if err != nil {
			t.Fatal(err)
		}
		run := map[string]int{}
		for i, k := range keys {
			for _, e := range found[k] {
				if run[e.PodIdentifier] == i {
					run[e.PodIdentifier] = i + 1
				}
			}
		}
		return run, len(keys)
	}
	// The events reach the index asynchronously: poll it (on an idle
	// machine it has them in milliseconds).
	ictx, cancelWait := context.WithTimeout(ctx, time.Minute)
	defer cancelWait()
	waitFor := func(what string, ok func() (bool, string)) {
		t.Helper()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			done, state := ok()
			if done {
				return
			}
			select {
			case <-ictx.Done():
				t.Fatalf("%s: %s", what, state)
			case <-tick.C:
			}
		}
	}
	for i, p := range prompts {
		waitFor(fmt.Sprintf("conversation %d in the index", i), func() (bool, string) {
			run, n := holders(p)
			want := map[string]int{servers[i].Addr: n}
			return fmt.Sprint(run) == fmt.Sprint(want), fmt.Sprintf("holders %v; want %v", run, want)
		})
	}

	for _, s := range servers {
		if n, lost := metricSum(t, s.Addr, "corral_kv_events_published_total"), metricSum(t, s.Addr, "corral_kv_events_dropped_total"); n == 0 || lost != 0 {
			t.Errorf("%s: %v batches published, %v dropped", s.Addr, n, lost)
		}
	}

	// A process that stops says its blocks are gone.
	if err := servers[1].Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor("a stopped process's blocks removed", func() (bool, string) {
		run, _ := holders(prompts[1])
		return len(run) == 0, fmt.Sprintf("holders %v", run)
	})
}

// waitSubscribed waits until each server's KV events have a subscriber
// (corral_kv_events_subscribers): what a server publishes before, ZeroMQ
// drops.
func waitSubscribed(t *testing.T, ctx context.Context, servers []*Corral) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for _, s := range servers {
		for metricSum(t, s.Addr, "corral_kv_events_subscribers") < 1 {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: no KV event subscriber", s.Addr)
			case <-tick.C:
			}
		}
	}
}

// render returns the token ids of prompt, as the corral at addr's
// /v1/completions/render gives them.
func render(t *testing.T, addr, prompt string) []uint32 {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/v1/completions/render", "application/json",
		strings.NewReader(`{"model":"tiny","prompt":`+strconv.Quote(prompt)+`}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var got []struct {
		TokenIDs []uint32 `json:"token_ids"`
	}
	if err := json.Unmarshal(b, &got); err != nil || len(got) != 1 {
		t.Fatalf("render: %d %s (%v)", resp.StatusCode, b, err)
	}
	return got[0].TokenIDs
}
