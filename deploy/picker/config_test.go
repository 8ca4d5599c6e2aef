package picker

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
)

// TestConfigLoads: every configuration Config writes is one the picker's
// own loader accepts and instantiates, with the scorers it names.
func TestConfigLoads(t *testing.T) {
	zport, err := FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{
		{Queue: 2, KVCache: 2},
		{Queue: 2, KVCache: 2, Prefix: 3},
		{Queue: 1, Precise: 3, ZMQEndpoint: "tcp://127.0.0.1:" + zport, RenderURL: "http://127.0.0.1:1"},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		pk, err := NewPicker(ctx, c.YAML(), Pool{Namespace: "default", Name: "corral", Port: 8080}, logr.Discard())
		if err != nil {
			cancel()
			t.Fatalf("%+v: %v\n%s", c, err, c.YAML())
		}
		for name, weight := range map[string]int{"queue-scorer": c.Queue, "kv-cache-utilization-scorer": c.KVCache, "prefix-cache-scorer": c.Prefix, PreciseScorerType: c.Precise} {
			if got := pk.Plugin(name) != nil; got != (weight > 0) {
				t.Errorf("%+v: plugin %s instantiated %v", c, name, got)
			}
		}
		pk.Stop()
		cancel()
	}
}
