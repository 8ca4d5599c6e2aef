package web

import (
	"context"
	"slices"
	"time"

	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/registry"
)

// Snapshot is one event of the live stream: the state of the server at
// Time. Field names are the JSON the page reads.
type Snapshot struct {
	// Time is when the snapshot was taken, in Unix milliseconds.
	Time int64 `json:"time"`
	// Status is "ok", "loading" (no API yet) or "draining" (shutting
	// down; the stream ends after this snapshot).
	Status string `json:"status"`
	// Memory is the registry's memory budget.
	Memory Memory `json:"memory"`
	// WaitingForMemory counts the requests waiting for a model to get
	// memory.
	WaitingForMemory int `json:"waiting_for_memory"`
	// Models are every model the server knows, loaded or not, the default
	// first.
	Models []ModelView `json:"models"`
	// Rate covers the interval since the previous periodic snapshot of
	// the same stream; it is absent from the first snapshot and from
	// those sent because something changed.
	Rate *Rate `json:"rate,omitempty"`
}

// Memory is the memory budget in bytes.
type Memory struct {
	// UsedBytes is reserved by loaded and loading models.
	UsedBytes int64 `json:"used_bytes"`
	// BudgetBytes is the limit, 0 when there is none.
	BudgetBytes int64 `json:"budget_bytes"`
}

// ModelView is one model of a Snapshot.
type ModelView struct {
	ID string `json:"id"`
	// State is "loaded", "loading", "unloading" or "unloaded".
	State string `json:"state"`
	// MemoryBytes is what the model reserves in the budget while loaded.
	MemoryBytes int64 `json:"memory_bytes"`
	// Requests counts the requests holding the model.
	Requests int `json:"requests"`
	// Error is why its last load failed.
	Error string `json:"error,omitempty"`
	// The fields below describe a model in memory; they are empty
	// otherwise.
	Slots []SlotView `json:"slots"`
	// Queue counts the requests waiting for a slot per priority class
	// (see engine.Stats.Queue); QueueDepth is their number, requests just
	// submitted included.
	Queue      []ClassQueue `json:"queue"`
	QueueDepth int          `json:"queue_depth"`
	// KVUsed and KVTotal are the cells of the KV pool used and in all;
	// KVActive of the used ones are held for running requests, the
	// others only by idle slots' cached prefixes.
	KVUsed   int `json:"kv_used"`
	KVActive int `json:"kv_active"`
	KVTotal  int `json:"kv_total"`
	// HostBytes and HostHits are the host tier of saved prefixes: its
	// size and the prefixes restored from it.
	HostBytes int64  `json:"host_bytes"`
	HostHits  uint64 `json:"host_hits"`
	// DiskBytes and DiskHits are the disk tier's (--cache-disk; 0
	// without one).
	DiskBytes int64  `json:"disk_bytes"`
	DiskHits  uint64 `json:"disk_hits"`
	// TokensOut and RequestsDone count generated tokens and finished
	// requests since the model loaded.
	TokensOut    uint64 `json:"tokens_out"`
	RequestsDone uint64 `json:"requests_done"`
}

// SlotView is one slot of a model.
type SlotView struct {
	ID int `json:"id"`
	// State is "idle", "prefill", "decode" or "paused".
	State string `json:"state"`
	// CachedTokens are the tokens in the slot's KV cache, of NCtx.
	CachedTokens int `json:"cached_tokens"`
	NCtx         int `json:"n_ctx"`
	// RequestID is the engine's id of the request the slot serves (the
	// id_task of GET /slots), 0 when idle.
	RequestID uint64 `json:"request_id"`
	// Decoded counts the tokens generated for that request.
	Decoded int `json:"decoded"`
}

// ClassQueue counts the requests of one priority class waiting for a
// slot: Queued were never admitted, Preempted wait to resume.
type ClassQueue struct {
	Priority  int `json:"priority"`
	Queued    int `json:"queued"`
	Preempted int `json:"preempted"`
}

// Rate measures the server, all models together, over an interval.
type Rate struct {
	// Seconds is the interval's length.
	Seconds float64 `json:"seconds"`
	// TokensPerSecond is the tokens generated per second.
	TokensPerSecond float64 `json:"tokens_per_second"`
	// TTFTMs is the mean time to first token, in milliseconds, of the
	// requests that got their first token in the interval; absent when
	// none did.
	TTFTMs *float64 `json:"ttft_ms,omitempty"`
	// FirstTokens counts those requests.
	FirstTokens uint64 `json:"first_tokens"`
}

// counters are one model's cumulative counters, for Rate.
type counters struct {
	tokens, ttftCount uint64
	ttftSum           time.Duration
}

// Models are the models the live view shows: a registry of served models
// (serving.Registry is one).
type Models interface {
	Budget() *registry.Budget
	Waiting() int
	Status() []registry.Status[*model.Model]
}

// snapshot assembles a Snapshot of reg (nil while loading) and returns
// with it each loaded model's counters, by model id.
func snapshot(ctx context.Context, reg Models, status string, now time.Time) (Snapshot, map[string]counters) {
	snap := Snapshot{Time: now.UnixMilli(), Status: status, Models: []ModelView{}}
	if reg == nil {
		return snap, nil
	}
	budget := reg.Budget()
	snap.Memory.UsedBytes = budget.Used()
	if !budget.Unlimited() {
		snap.Memory.BudgetBytes = budget.Limit()
	}
	snap.WaitingForMemory = reg.Waiting()
	counts := make(map[string]counters)
	for _, st := range reg.Status() {
		m := ModelView{ID: st.ID, State: string(st.State), MemoryBytes: st.Need, Requests: st.Requests,
			Slots: []SlotView{}, Queue: []ClassQueue{}}
		if st.Err != nil {
			m.Error = st.Err.Error()
		}
		if st.Model != nil {
			eng := st.Model.Engine()
			stats := eng.Stats()
			m.QueueDepth = stats.QueueDepth
			m.KVUsed, m.KVActive, m.KVTotal = stats.KVCellsUsed, stats.KVCellsActive, stats.KVCellsTotal
			m.HostBytes, m.HostHits = stats.HostCacheBytes, stats.HostCacheRestored
			m.DiskBytes, m.DiskHits = stats.DiskCacheBytes, stats.DiskCacheHits
			m.TokensOut, m.RequestsDone = stats.TokensOut, stats.Requests
			for _, q := range stats.Queue {
				m.Queue = append(m.Queue, ClassQueue{Priority: q.Priority, Queued: q.Queued, Preempted: q.Preempted})
			}
			counts[st.ID] = counters{tokens: stats.TokensOut, ttftCount: stats.TTFTCount, ttftSum: stats.TTFTSum}
			// Slots fails only when ctx has ended: the stream ends too.
			slots, _ := eng.Slots(ctx)
			for _, s := range slots {
				m.Slots = append(m.Slots, SlotView{ID: s.ID, State: s.State, CachedTokens: s.CachedTokens,
					NCtx: s.NCtx, RequestID: s.RequestID, Decoded: s.Decoded})
			}
		}
		snap.Models = append(snap.Models, m)
	}
	return snap, counts
}

// rate measures the interval from prev (taken at from) to cur (taken at
// to). A model whose counters went back was loaded again in between: its
// counters count from zero.
func rate(prev, cur map[string]counters, from, to time.Time) *Rate {
	secs := to.Sub(from).Seconds()
	if secs <= 0 {
		return nil
	}
	var tokens, firsts uint64
	var ttft time.Duration
	for id, c := range cur {
		p := prev[id]
		if c.tokens < p.tokens || c.ttftCount < p.ttftCount {
			p = counters{}
		}
		tokens += c.tokens - p.tokens
		firsts += c.ttftCount - p.ttftCount
		ttft += c.ttftSum - p.ttftSum
	}
	r := &Rate{Seconds: secs, TokensPerSecond: float64(tokens) / secs, FirstTokens: firsts}
	if firsts > 0 {
		ms := float64(ttft) / float64(time.Millisecond) / float64(firsts)
		r.TTFTMs = &ms
	}
	return r
}

// changed reports whether b differs from a in what the page shows, the
// periodic rates aside: the models, their slots (state, request, tokens),
// queues and memory.
func changed(a, b Snapshot) bool {
	if a.Status != b.Status || a.Memory != b.Memory || a.WaitingForMemory != b.WaitingForMemory || len(a.Models) != len(b.Models) {
		return true
	}
	for i, am := range a.Models {
		bm := b.Models[i]
		if am.ID != bm.ID || am.State != bm.State || am.Requests != bm.Requests || am.Error != bm.Error ||
			am.QueueDepth != bm.QueueDepth || am.KVUsed != bm.KVUsed || am.KVActive != bm.KVActive || am.HostHits != bm.HostHits || am.DiskHits != bm.DiskHits || am.DiskBytes != bm.DiskBytes || am.RequestsDone != bm.RequestsDone ||
			!slices.Equal(am.Slots, bm.Slots) || !slices.Equal(am.Queue, bm.Queue) {
			return true
		}
	}
	return false
}
