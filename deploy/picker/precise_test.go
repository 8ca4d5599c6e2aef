package picker

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPreciseRouting: the picker with the precise prefix-cache scorer,
// the only one of its scorers that tells idle endpoints apart
// (precise.go: llm-d's indexer fed by corral's KV events), sends a
// conversation's next turn to the process that served its first turn,
// although that turn went to the process directly, not through the
// picker: the picker learns what each process holds from the process
// itself. Each of three conversations starts on a different process, so
// a picker choosing at random would be right for all three once in 27.
func TestPreciseRouting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	zport, err := FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	servers, hosts, port := startPool(t, ctx, "--kv-events=tcp://127.0.0.1:"+zport)
	gw, pk := startPicker(t, ctx, Config{Queue: 1, Precise: 3, ZMQEndpoint: "tcp://127.0.0.1:" + zport, RenderURL: "http://" + servers[0].Addr}.YAML(), hosts, port)
	scorer, ok := pk.Plugin(PreciseScorerType).(*PreciseScorer)
	if !ok {
		t.Fatalf("the configuration's %s is a %T", PreciseScorerType, pk.Plugin(PreciseScorerType))
	}
	waitSubscribed(t, ctx, servers)
	gsrv := httptest.NewServer(gw)
	t.Cleanup(gsrv.Close)

	var pods []string
	for _, s := range servers {
		pods = append(pods, s.Addr)
	}
	for i, s := range servers {
		prompt := fmt.Sprintf("Conversation %d. Once upon a time there was a little girl named Lily who lived in a small house near the forest. ", i) +
			strings.Repeat("She liked to play outside with her red ball. ", 2+i)
		post(t, "http://"+s.Addr, `{"model":"tiny","prompt":`+strconv.Quote(prompt)+`,"max_tokens":4}`)
		// The index learns of the turn asynchronously.
		ids := render(t, s.Addr, prompt)
		tick := time.NewTicker(20 * time.Millisecond)
		for held := scorer.Held(ctx, "tiny", ids, pods); held[s.Addr] != 1; held = scorer.Held(ctx, "tiny", ids, pods) {
			select {
			case <-ctx.Done():
				t.Fatalf("conversation %d: the index has %v", i, held)
			case <-tick.C:
			}
		}
		tick.Stop()
		before := gw.Picks()[s.Addr]
		post(t, gsrv.URL, `{"model":"tiny","prompt":`+strconv.Quote(prompt+" Then she went home.")+`,"max_tokens":4}`)
		if gw.Picks()[s.Addr] != before+1 {
			t.Errorf("conversation %d's second turn went elsewhere than %s: picks %v", i, s.Addr, gw.Picks())
		}
	}
}
