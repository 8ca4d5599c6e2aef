package picker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/llm-d/llm-d-kv-cache-manager/pkg/kvcache/kvblock"
	"github.com/llm-d/llm-d-kv-cache-manager/pkg/kvcache/kvevents"
	"k8s.io/apimachinery/pkg/util/sets"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	framework "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// PreciseScorerType is the type of the precise prefix-cache scorer: the
// picker's scorer plugin that scores each endpoint by the share of a
// request's prompt its KV cache holds, from the KV events the endpoints
// publish (corral serve --kv-events), as llm-d's precise prefix-cache
// scorer does. It is llm-d's indexer that does the work: its ZeroMQ
// subscriber and event pool (libzmq), its in-memory index, its token
// processor (the block hashes). What differs from llm-d's scorer is the
// tokenizer: a prompt's token ids come from a corral serving the model
// (POST /v1/completions/render or /v1/chat/completions/render, the
// model's own tokenizer and chat template), where llm-d runs Hugging Face
// tokenizers inside the picker.
//
// Parameters (JSON):
//
//	zmqEndpoint: where the indexer binds, tcp://*:5557; each corral gets
//	             --kv-events=tcp://PICKER:5557
//	renderURL:   a corral serving the models, http://HOST:PORT
//	cpuWeight:   the score of a block held in a corral's host cache
//	             (medium CPU) against 1 for its KV cache; default 0.8
const PreciseScorerType = "precise-prefix-cache-scorer"

// PreciseScorer is the plugin; see PreciseScorerType.
type PreciseScorer struct {
	name      string
	index     kvblock.Index
	tokens    kvblock.TokenProcessor
	renderURL string
	cpuWeight float64
	client    *http.Client
}

type preciseParams struct {
	ZMQEndpoint string   `json:"zmqEndpoint"`
	RenderURL   string   `json:"renderURL"`
	CPUWeight   *float64 `json:"cpuWeight"`
}

// PreciseScorerFactory builds the scorer and starts its indexer, which
// runs until the handle's context ends.
func PreciseScorerFactory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	var p preciseParams
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("%s: %w", PreciseScorerType, err)
		}
	}
	if p.ZMQEndpoint == "" || p.RenderURL == "" {
		return nil, fmt.Errorf("%s: zmqEndpoint and renderURL are required", PreciseScorerType)
	}
	index, err := kvblock.NewInMemoryIndex(kvblock.DefaultInMemoryIndexConfig())
	if err != nil {
		return nil, err
	}
	s := &PreciseScorer{
		name: name, index: index, tokens: kvblock.NewChunkedTokenDatabase(kvblock.DefaultTokenProcessorConfig()),
		renderURL: p.RenderURL, cpuWeight: 0.8, client: &http.Client{Timeout: time.Second},
	}
	if p.CPUWeight != nil {
		s.cpuWeight = *p.CPUWeight
	}
	ctx := handle.Context()
	pool := kvevents.NewPool(&kvevents.Config{ZMQEndpoint: p.ZMQEndpoint, TopicFilter: "kv@", Concurrency: 4}, index)
	pool.Start(ctx)
	go func() {
		<-ctx.Done()
		pool.Shutdown(context.Background())
	}()
	return s, nil
}

// TypedName implements fwkplugin.Plugin.
func (s *PreciseScorer) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: PreciseScorerType, Name: s.name}
}

// Category implements framework.Scorer: it prefers endpoints that hold
// the prompt.
func (s *PreciseScorer) Category() framework.ScorerCategory { return framework.Affinity }

// Score gives each endpoint the share of the prompt's whole blocks, from
// the first, that it holds: 0 for none (or when the prompt cannot be
// rendered), 1 for all.
func (s *PreciseScorer) Score(ctx context.Context, _ *framework.CycleState, req *framework.LLMRequest, endpoints []framework.Endpoint) map[framework.Endpoint]float64 {
	scores := make(map[framework.Endpoint]float64, len(endpoints))
	for _, ep := range endpoints {
		scores[ep] = 0
	}
	ids, err := s.render(ctx, req)
	if err != nil {
		ctrllog.FromContext(ctx).V(1).Info("precise prefix scorer: render", "err", err.Error())
		return scores
	}
	var pods []string
	byPod := map[string]framework.Endpoint{}
	for _, ep := range endpoints {
		m := ep.GetMetadata()
		id := net.JoinHostPort(m.Address, m.Port)
		pods = append(pods, id)
		byPod[id] = ep
	}
	for pod, share := range s.Held(ctx, req.TargetModel, ids, pods) {
		scores[byPod[pod]] = share
	}
	return scores
}

// Held returns, for each of pods (host:port) that holds any of the
// prompt's first block, the share of the prompt's whole blocks it holds
// from the first on, as the index has it: a block in host memory (medium
// CPU) counts cpuWeight, one in the KV cache 1.
func (s *PreciseScorer) Held(ctx context.Context, model string, ids []uint32, pods []string) map[string]float64 {
	keys := s.tokens.TokensToKVBlockKeys(ids, model)
	if len(keys) == 0 {
		return nil
	}
	found, err := s.index.Lookup(ctx, keys, sets.New(pods...))
	if err != nil {
		return nil
	}
	held := map[string]float64{}
	alive := map[string]bool{}
	for i, k := range keys {
		weight := map[string]float64{}
		for _, e := range found[k] {
			if i > 0 && !alive[e.PodIdentifier] {
				continue
			}
			w := 1.0
			if e.DeviceTier == "cpu" {
				w = s.cpuWeight
			}
			weight[e.PodIdentifier] = max(weight[e.PodIdentifier], w)
		}
		clear(alive)
		for pod, w := range weight {
			held[pod] += w
			alive[pod] = true
		}
		if len(alive) == 0 {
			break
		}
	}
	for pod := range held {
		held[pod] /= float64(len(keys))
	}
	return held
}

// render asks a corral for the token ids of the request's prompt, within
// a second: a request the scorer cannot render is scored 0 everywhere,
// and the other scorers decide.
func (s *PreciseScorer) render(ctx context.Context, req *framework.LLMRequest) ([]uint32, error) {
	if req.Body == nil {
		return nil, fmt.Errorf("no body")
	}
	path := "/v1/completions/render"
	if req.Body.ChatCompletions != nil {
		path = "/v1/chat/completions/render"
	}
	payload, ok := req.Body.Payload.(framework.PayloadMap)
	if !ok {
		return nil, fmt.Errorf("a %T body", req.Body.Payload)
	}
	body, err := json.Marshal(payload)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, s.renderURL+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %d %s", path, resp.StatusCode, b)
	}
	// /v1/completions/render answers a list, the chat one an object.
	var one struct {
		TokenIDs []uint32 `json:"token_ids"`
	}
	if path == "/v1/chat/completions/render" {
		err = json.Unmarshal(b, &one)
	} else {
		var list []struct {
			TokenIDs []uint32 `json:"token_ids"`
		}
		if err = json.Unmarshal(b, &list); err == nil && len(list) > 0 {
			one.TokenIDs = list[0].TokenIDs
		}
	}
	return one.TokenIDs, err
}
