package supervisor

import (
	"encoding/json"
	"errors"
	"sync"
	"time"
)

// DefaultMaxJobBytes is Options.MaxJobBytes's default: 1 GiB, room for 128
// jobs at the 8 MiB body limit at once, or about a quarter of a million
// jobs of 4 KiB with their results. Without a byte bound a supervisor
// would hold up to max_results (4096) results per worker for result_ttl
// (1h), each with a job body of up to the body limit: tens of gigabytes
// that anyone able to submit could make it allocate.
const DefaultMaxJobBytes = 1 << 30

// jobStorageRetryAfter is the Retry-After of a JOB_STORAGE_FULL answer:
// stored bytes come back as soon as results are read, and at the latest
// when they expire (result_ttl).
const jobStorageRetryAfter = 10 * time.Second

// DefaultKeyShare is the share of Options.MaxJobBytes one API key may
// hold when Options.MaxJobBytesPerKey is 0: a quarter, so that no key
// fills the pool and at least four keys are needed to.
const DefaultKeyShare = 4

var (
	// ErrJobStorageFull means the job would take the bytes held for jobs
	// and unread results past Options.MaxJobBytes; it may be retried once
	// results have been read or have expired.
	ErrJobStorageFull = errors.New("JOB_STORAGE_FULL")
	// ErrKeyStorageFull means the job would take the bytes its caller's
	// API key holds for jobs and unread results past
	// Options.MaxJobBytesPerKey; it may be retried once that key's
	// results have been read or have expired.
	ErrKeyStorageFull = errors.New("KEY_JOB_STORAGE_FULL")
	// ErrJobTooLarge means a job is larger than Options.MaxJobBytes (or,
	// for a caller with a key, Options.MaxJobBytesPerKey) by itself: it
	// can never be accepted.
	ErrJobTooLarge = errors.New("JOB_TOO_LARGE")
)

// byteBudget accounts the bytes a supervisor holds for jobs: the bodies of
// jobs in flight (prompts and params) and the text of results not yet read
// or expired, in all and for each API key. Its methods are safe for
// concurrent use, and those of a nil budget (a worker outside a
// supervisor) account nothing and refuse nothing. A budget's lock is
// taken last, after Worker.mu.
type byteBudget struct {
	limit  int64 // > 0
	perKey int64 // > 0, <= limit

	mu      sync.Mutex
	used    int64
	byKey   map[string]int64 // bytes held for each key ("" is never held to perKey)
	refused uint64           // submissions turned away with ErrJobStorageFull
	keyFull uint64           // and with ErrKeyStorageFull
}

// newByteBudget returns a budget of limit bytes, of which each key may
// hold perKey.
func newByteBudget(limit, perKey int64) *byteBudget {
	return &byteBudget{limit: limit, perKey: perKey, byKey: make(map[string]int64)}
}

// reserve takes n bytes for key if they fit, else counts a refusal. The
// bytes of key "" (no API keys: one caller) count toward the whole budget
// only.
func (b *byteBudget) reserve(key string, n int64) error {
	if b == nil {
		return nil
	}
	if n > b.limit || key != "" && n > b.perKey {
		return ErrJobTooLarge
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch { // the key's own share first: what its caller can do something about
	case key != "" && b.byKey[key]+n > b.perKey:
		b.keyFull++
		return ErrKeyStorageFull
	case b.used+n > b.limit:
		b.refused++
		return ErrJobStorageFull
	}
	b.addLocked(key, n)
	return nil
}

// charge takes n bytes for key whether they fit or not: a finished job's
// result is kept even when it takes the budget (or the key's share) past
// its limit, and submissions are refused until it is back below.
func (b *byteBudget) charge(key string, n int64) {
	if b != nil {
		b.mu.Lock()
		b.addLocked(key, n)
		b.mu.Unlock()
	}
}

// release gives n bytes of key back.
func (b *byteBudget) release(key string, n int64) {
	if b != nil {
		b.mu.Lock()
		b.addLocked(key, -n)
		b.mu.Unlock()
	}
}

// addLocked adds n (which may be negative) to the bytes held, in all and
// for key; a key that holds nothing is forgotten.
func (b *byteBudget) addLocked(key string, n int64) {
	b.used += n
	if key == "" {
		return
	}
	if held := b.byKey[key] + n; held != 0 {
		b.byKey[key] = held
	} else {
		delete(b.byKey, key)
	}
}

// state returns the bytes held and the submissions refused so far for
// want of room in all and in a key's share.
func (b *byteBudget) state() (used int64, refused, keyFull uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.refused, b.keyFull
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
