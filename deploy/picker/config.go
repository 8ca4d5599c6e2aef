package picker

import (
	"fmt"
	"strings"
)

// Config describes a picker configuration (an EndpointPickerConfig) for
// a pool of corral processes: the data layer reading corral's vLLM-named
// metrics, the scorers with their weights (0 leaves a scorer out), and
// the max-score picker.
type Config struct {
	Queue, KVCache int // the queue-scorer and kv-cache-utilization-scorer
	Prefix         int // the picker's own (approximate) prefix-cache-scorer
	Precise        int // the precise prefix-cache scorer on KV events (precise.go)
	// ZMQEndpoint and RenderURL are the precise scorer's parameters.
	ZMQEndpoint, RenderURL string
}

// YAML is the configuration as the picker's --config-text takes it.
func (c Config) YAML() []byte {
	type scorer struct {
		typ, params string
		weight      int
	}
	scorers := []scorer{
		{"queue-scorer", "", c.Queue},
		{"kv-cache-utilization-scorer", "", c.KVCache},
		{"prefix-cache-scorer", "", c.Prefix},
		{PreciseScorerType, fmt.Sprintf("\n    parameters:\n      zmqEndpoint: %q\n      renderURL: %q", c.ZMQEndpoint, c.RenderURL), c.Precise},
	}
	var b strings.Builder
	b.WriteString(`apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: metrics-data-source
  - type: core-metrics-extractor
    parameters:
      defaultEngine: corral
      engineConfigs:
        - name: corral
          queuedRequestsSpec: "vllm:num_requests_waiting"
          runningRequestsSpec: "vllm:num_requests_running"
          kvUsageSpec: "vllm:kv_cache_usage_perc"
          loraSpec: ""
          cacheInfoSpec: "vllm:cache_config_info"
`)
	for _, s := range scorers {
		if s.weight > 0 {
			fmt.Fprintf(&b, "  - type: %s%s\n", s.typ, s.params)
		}
	}
	b.WriteString(`  - type: max-score-picker
dataLayer:
  sources:
    - pluginRef: metrics-data-source
      extractors:
        - pluginRef: core-metrics-extractor
schedulingProfiles:
  - name: default
    plugins:
`)
	for _, s := range scorers {
		if s.weight > 0 {
			fmt.Fprintf(&b, "      - pluginRef: %s\n        weight: %d\n", s.typ, s.weight)
		}
	}
	b.WriteString("      - pluginRef: max-score-picker\n")
	return []byte(b.String())
}
