package supervisor

import "time"

// Defaults of WorkerConfig fields.
const (
	// DefaultStartupTimeout is WorkerConfig.StartupTimeout's default:
	// generous, since loading a large model from a slow disk takes
	// minutes.
	DefaultStartupTimeout = 10 * time.Minute
	// DefaultResultTTL is WorkerConfig.ResultTTL's default.
	DefaultResultTTL = time.Hour
	// DefaultMaxResults is WorkerConfig.MaxResults's default.
	DefaultMaxResults = 4096
)

// resultBook accounts the finished, unread results of a worker, guarded by
// Worker.mu.
type resultBook struct {
	// order lists request ids in the order they finished; ids already
	// released are skipped (and compacted away) lazily.
	order   []int64
	kept    int    // finished results held, unread
	expired uint64 // results dropped unread, by age or by number
}

// keepResultLocked accounts r, which just became terminal, and drops the
// oldest unread results beyond MaxResults.
func (w *Worker) keepResultLocked(r *request) {
	b := &w.results
	b.kept++
	b.order = append(b.order, r.id)
	for b.kept > w.cfg.MaxResults && len(b.order) > 0 {
		id := b.order[0]
		b.order = b.order[1:]
		if old, ok := w.reqs[id]; ok && old.state.Terminal() {
			w.expireLocked(id, "max_results")
		}
	}
	w.compactResultsLocked()
}

// releaseLocked drops a terminal request whose result was read.
func (w *Worker) releaseLocked(id int64) {
	w.dropLocked(id)
	w.results.kept--
	w.compactResultsLocked()
}

// expireLocked drops an unread result.
func (w *Worker) expireLocked(id int64, why string) {
	w.dropLocked(id)
	w.results.kept--
	w.results.expired++
	w.log.Debug("result expired unread", "request_id", id, "why", why)
	if w.onExpire != nil {
		w.onExpire(id)
	}
}

// dropLocked forgets a request and gives back the bytes it held in the
// supervisor's budget.
func (w *Worker) dropLocked(id int64) {
	if r, ok := w.reqs[id]; ok {
		w.budget.release(r.acct.key, r.bodyBytes+r.keptBytes)
		r.bodyBytes, r.keptBytes = 0, 0
		delete(w.reqs, id)
	}
}

// compactResultsLocked drops released ids from the order once they
// outnumber the kept ones, so that it stays proportional to what is kept.
func (w *Worker) compactResultsLocked() {
	b := &w.results
	if len(b.order) <= 2*b.kept+64 {
		return
	}
	live := b.order[:0]
	for _, id := range b.order {
		if _, ok := w.reqs[id]; ok {
			live = append(live, id)
		}
	}
	b.order = live
}

// sweepResults expires the unread results that finished ResultTTL or more
// ago by the worker's clock. The supervision loop calls it every probe
// interval.
func (w *Worker) sweepResults() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	b := &w.results
	for len(b.order) > 0 {
		id := b.order[0]
		r, ok := w.reqs[id]
		if ok && now.Sub(r.completed) < w.cfg.ResultTTL {
			return // results finish in order: the rest are younger
		}
		b.order = b.order[1:]
		if ok {
			w.expireLocked(id, "result_ttl")
		}
	}
}
