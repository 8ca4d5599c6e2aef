package supervisor

import (
	"encoding/json"
	"errors"
	"sync/atomic"
	"time"
)

// DefaultMaxJobBytes is Options.MaxJobBytes's default: 1 GiB, room for 16
// jobs at the 64 MiB body limit at once, or about a quarter of a million
// jobs of 4 KiB with their results. Without a byte bound a supervisor
// would hold up to max_results (4096) results per worker for result_ttl
// (1h), each with a job body of up to 64 MiB: hundreds of gigabytes that
// anyone able to submit could make it allocate.
const DefaultMaxJobBytes = 1 << 30

// jobStorageRetryAfter is the Retry-After of a JOB_STORAGE_FULL answer:
// stored bytes come back as soon as results are read, and at the latest
// when they expire (result_ttl).
const jobStorageRetryAfter = 10 * time.Second

var (
	// ErrJobStorageFull means the job would take the bytes held for jobs
	// and unread results past Options.MaxJobBytes; it may be retried once
	// results have been read or have expired.
	ErrJobStorageFull = errors.New("JOB_STORAGE_FULL")
	// ErrJobTooLarge means a job is larger than Options.MaxJobBytes by
	// itself: it can never be accepted.
	ErrJobTooLarge = errors.New("JOB_TOO_LARGE")
)

// byteBudget accounts the bytes a supervisor holds for jobs: the bodies of
// jobs in flight (prompts and params) and the text of results not yet read
// or expired. Its methods are safe for concurrent use, and those of a nil
// budget (a worker outside a supervisor) account nothing and refuse
// nothing.
type byteBudget struct {
	limit   int64 // > 0
	used    atomic.Int64
	refused atomic.Uint64 // submissions turned away with ErrJobStorageFull
}

// newByteBudget returns a budget of limit bytes.
func newByteBudget(limit int64) *byteBudget { return &byteBudget{limit: limit} }

// reserve takes n bytes if they fit, else counts a refusal.
func (b *byteBudget) reserve(n int64) error {
	if b == nil {
		return nil
	}
	if n > b.limit {
		return ErrJobTooLarge
	}
	for {
		used := b.used.Load()
		if used+n > b.limit {
			b.refused.Add(1)
			return ErrJobStorageFull
		}
		if b.used.CompareAndSwap(used, used+n) {
			return nil
		}
	}
}

// charge takes n bytes whether they fit or not: a finished job's result
// is kept even when it takes the budget past its limit, and submissions
// are refused until it is back below.
func (b *byteBudget) charge(n int64) {
	if b != nil {
		b.used.Add(n)
	}
}

// release gives n bytes back.
func (b *byteBudget) release(n int64) {
	if b != nil {
		b.used.Add(-n)
	}
}

// bodySize is what the supervisor counts for a job's body while the job
// runs: its prompts and the JSON encoding of its params.
func bodySize(job Job) int64 {
	n := int64(len(job.SystemPrompt) + len(job.UserPrompt))
	if len(job.Params) > 0 {
		var c countWriter
		if json.NewEncoder(&c).Encode(job.Params) == nil {
			n += int64(c)
		}
	}
	return n
}

// countWriter counts the bytes written to it.
type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}
