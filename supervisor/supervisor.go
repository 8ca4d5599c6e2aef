package supervisor

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/corral-llm/corral/gate"
)

// Errors of worker selection.
var (
	// ErrUnknownWorker means a job named a worker that does not exist.
	ErrUnknownWorker = errors.New("UNKNOWN_WORKER")
	// ErrUnknownModel means no worker serves the model a job named.
	ErrUnknownModel = errors.New("UNKNOWN_MODEL")
	// ErrAuthRequired means every worker the request could go to sends
	// an API key to its server (api_key_env), and the caller did not
	// authenticate with a supervisor API key: the supervisor does not
	// lend a worker's key to anonymous callers.
	ErrAuthRequired = errors.New("AUTHENTICATION_REQUIRED")
	// ErrForbidden means the operation needs an admin key.
	ErrForbidden = errors.New("FORBIDDEN")
)

// Options are a Supervisor's settings that are not a worker's.
type Options struct {
	// MaxJobBytes bounds the bytes held for jobs across all workers: the
	// bodies of jobs in flight (their prompts and the JSON of their
	// params) and the names and results (text and failure detail) of
	// jobs not yet read or expired. A submission that would take the
	// total past it is refused with ErrJobStorageFull. 0 means
	// DefaultMaxJobBytes.
	MaxJobBytes int64
	// MaxJobBytesPerKey bounds the part of MaxJobBytes the jobs of one
	// API key (gate.Caller.ID) may hold, so that one key cannot fill the
	// pool for everyone until its results expire: a submission that
	// would take its key past it is refused with ErrKeyStorageFull.
	// Without API keys there is one caller, bound by MaxJobBytes only.
	// 0 means MaxJobBytes / DefaultKeyShare; it may not exceed
	// MaxJobBytes.
	MaxJobBytesPerKey int64
	// MaxBody bounds the body of a job submission or chat completion;
	// a larger one gets 413. 0 means DefaultMaxBody.
	MaxBody int64
	// Keys says that the HTTP face is served behind gate.Wrap with at
	// least one key, so that callers present a key (gate.FromContext's
	// Caller.Key). Without keys a worker with api_key_env is refused:
	// its key would be lent to anyone who can reach the supervisor.
	// Either way a worker's key is sent only for callers whose request
	// carries a key.
	Keys bool
}

// Supervisor runs a set of workers and gives their requests job ids:
// 128-bit random strings that cannot be guessed, unlike a worker's own
// request ids, which count from 1 per worker. A job belongs to the caller
// that submitted it (gate.Caller.ID); only that caller and admins see it.
type Supervisor struct {
	workers []*Worker
	byName  map[string]*Worker
	budget  *byteBudget
	maxBody int64
	// reading counts the requests reading their bodies (admitBody).
	reading atomic.Int64

	mu   sync.Mutex
	jobs map[string]jobEntry
	refs map[jobRef]string // the inverse of jobs
}

// jobEntry is what the supervisor keeps of a job besides its worker's
// request.
type jobEntry struct {
	ref   jobRef
	owner string // the submitting caller's gate ID ("" without keys)
}

// jobRef locates a job's request.
type jobRef struct {
	w  *Worker
	id int64
}

// Target selects the worker for a job: by Worker name, else by Model, else
// any worker. Among the candidates, the one with the most free slots that
// accepts the job gets it (ties go in configuration order).
type Target struct {
	Worker string
	Model  string
}

// JobStatus is a request's status seen through the supervisor: RequestID is
// the job id (it hides RequestStatus.RequestID), WorkerRequestID the id
// within the worker.
type JobStatus struct {
	RequestStatus
	RequestID       string `json:"request_id"`
	Worker          string `json:"worker"`
	WorkerRequestID int64  `json:"worker_request_id"`
}

// JobResult is a request's result seen through the supervisor, RequestID
// being the job id as in JobStatus.
type JobResult struct {
	RequestResult
	RequestID       string `json:"request_id"`
	Worker          string `json:"worker"`
	WorkerRequestID int64  `json:"worker_request_id"`
}

// New builds the workers of cfgs (stopped). Names must be unique. Without
// opts.Keys no worker may have an api_key_env.
func New(cfgs []WorkerConfig, opts Options) (*Supervisor, error) {
	switch {
	case opts.MaxJobBytes == 0:
		opts.MaxJobBytes = DefaultMaxJobBytes
	case opts.MaxJobBytes < 0:
		return nil, fmt.Errorf("max_job_bytes %d must not be negative", opts.MaxJobBytes)
	}
	switch {
	case opts.MaxJobBytesPerKey == 0:
		opts.MaxJobBytesPerKey = max(opts.MaxJobBytes/DefaultKeyShare, 1)
	case opts.MaxJobBytesPerKey < 0 || opts.MaxJobBytesPerKey > opts.MaxJobBytes:
		return nil, fmt.Errorf("max_job_bytes_per_key %d: want 1 to max_job_bytes (%d)", opts.MaxJobBytesPerKey, opts.MaxJobBytes)
	}
	switch {
	case opts.MaxBody == 0:
		opts.MaxBody = DefaultMaxBody
	case opts.MaxBody < 0:
		return nil, fmt.Errorf("max body %d must not be negative", opts.MaxBody)
	}
	s := &Supervisor{
		byName: make(map[string]*Worker), budget: newByteBudget(opts.MaxJobBytes, opts.MaxJobBytesPerKey),
		maxBody: opts.MaxBody, jobs: make(map[string]jobEntry), refs: make(map[jobRef]string),
	}
	for _, c := range cfgs {
		if c.APIKeyEnv != "" && !opts.Keys {
			return nil, fmt.Errorf("worker %s: api_key_env %s is set but the supervisor has no API keys: "+
				"its key would be sent for anyone who can reach the supervisor; give the supervisor keys "+
				"(its callers then authenticate, and only they get the worker's key) or remove api_key_env", c.Name, c.APIKeyEnv)
		}
		w, err := NewWorker(c)
		if err != nil {
			return nil, err
		}
		w.onExpire = func(id int64) { s.forget(jobRef{w, id}) }
		w.budget = s.budget
		if s.byName[w.Name()] != nil {
			return nil, fmt.Errorf("worker %s: duplicate name", w.Name())
		}
		s.workers = append(s.workers, w)
		s.byName[w.Name()] = w
	}
	// A child inherits the environment, so any worker's output may show
	// another worker's key.
	for _, w := range s.workers {
		for _, o := range s.workers {
			w.redact.Add(o.apiKey)
		}
	}
	return s, nil
}

// Workers returns the workers in configuration order.
func (s *Supervisor) Workers() []*Worker { return s.workers }

// Worker returns the named worker or nil.
func (s *Supervisor) Worker(name string) *Worker { return s.byName[name] }

// Start starts every worker; if one fails to start, those already started
// are stopped again.
func (s *Supervisor) Start(ctx context.Context) error {
	for i, w := range s.workers {
		if err := w.Start(); err != nil {
			for _, started := range s.workers[:i] {
				_ = started.Stop(ctx) // the start error is the one to report
			}
			return err
		}
	}
	return nil
}

// Stop stops every worker concurrently.
func (s *Supervisor) Stop(ctx context.Context) error {
	errs := make([]error, len(s.workers))
	var wg sync.WaitGroup
	for i, w := range s.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.Stop(ctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// forget drops the job of a result that expired unread. It is called with
// the worker's lock held (lock order: Worker.mu, then Supervisor.mu).
func (s *Supervisor) forget(ref jobRef) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.refs[ref]; ok {
		delete(s.refs, ref)
		delete(s.jobs, id)
	}
}

// candidates lists the workers a target may use for caller, those with the
// most free slots first (ties in configuration order): routing spreads
// work over local and remote workers alike. A worker that sends an API key
// to its server is a candidate only for a caller that presented a key of
// the supervisor's; when that leaves none, the error is ErrAuthRequired.
func (s *Supervisor) candidates(t Target, caller gate.Caller) ([]*Worker, error) {
	var ws []*Worker
	switch {
	case t.Worker != "":
		w := s.byName[t.Worker]
		if w == nil {
			return nil, ErrUnknownWorker
		}
		ws = []*Worker{w}
	case t.Model != "":
		for _, w := range s.workers {
			if w.Model() == t.Model {
				ws = append(ws, w)
			}
		}
		if len(ws) == 0 {
			return nil, ErrUnknownModel
		}
	default:
		ws = slices.Clone(s.workers)
	}
	if caller.Key == nil {
		ws = slices.DeleteFunc(ws, func(w *Worker) bool { return w.lendsKey })
		if len(ws) == 0 {
			return nil, ErrAuthRequired
		}
	}
	return byFreeSlots(ws), nil
}

// byFreeSlots orders a copy of ws by free slots, most first, stably.
func byFreeSlots(ws []*Worker) []*Worker {
	free := make(map[*Worker]int, len(ws))
	for _, w := range ws {
		free[w] = w.freeSlots()
	}
	out := slices.Clone(ws)
	slices.SortStableFunc(out, func(a, b *Worker) int { return free[b] - free[a] })
	return out
}

// pick tries try on each candidate until one accepts. When none does, the
// most hopeful error wins: no slot, then not ready, then failed. Any other
// error (the byte budget's) ends the search at once.
func pick[T any](ws []*Worker, try func(*Worker) (T, error)) (T, *Worker, error) {
	var zero T
	best := ErrWorkerFailed
	for _, w := range ws {
		v, err := try(w)
		switch {
		case err == nil:
			return v, w, nil
		case errors.Is(err, ErrNoSlotAvailable):
			best = err
		case errors.Is(err, ErrWorkerNotReady):
			if !errors.Is(best, ErrNoSlotAvailable) {
				best = err
			}
		case errors.Is(err, ErrWorkerFailed):
		default:
			return zero, nil, err
		}
	}
	return zero, nil, best
}

// Submit submits job to a worker chosen by t for the caller of ctx
// (gate.FromContext), who owns the job, and returns its job id and the
// worker's name.
//
// The job is charged to the caller's API key as the request that
// submitted it would be, had it lasted as long as the job: it keeps that
// request's place among the key's requests in flight (gate.Keep) until it
// ends, charges the tokens of each of its turns to the key's tokens per
// minute, and its bytes count in the key's share of the job storage
// (Options.MaxJobBytesPerKey).
func (s *Supervisor) Submit(ctx context.Context, t Target, job Job) (string, string, error) {
	caller := gate.FromContext(ctx)
	ws, err := s.candidates(t, caller)
	if err != nil {
		return "", "", err
	}
	body := bodySize(job) // once, not per candidate: it encodes the params
	acct := account{key: caller.ID(), lease: gate.Keep(ctx)}
	id, w, err := pick(ws, func(w *Worker) (int64, error) { return w.submit(job, body, acct) })
	if err != nil {
		acct.lease.Release()
		return "", "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	jobID := rand.Text() // 26 base32 digits: 130 random bits
	for s.jobs[jobID].ref.w != nil {
		jobID = rand.Text()
	}
	s.jobs[jobID] = jobEntry{ref: jobRef{w, id}, owner: caller.ID()}
	s.refs[jobRef{w, id}] = jobID
	return jobID, w.Name(), nil
}

// job returns the job jobID if the caller of ctx may see it: its owner
// and admins may; to anyone else it does not exist.
func (s *Supervisor) job(ctx context.Context, jobID string) (jobRef, bool) {
	caller := gate.FromContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[jobID]
	if !ok || !caller.Admin() && j.owner != caller.ID() {
		return jobRef{}, false
	}
	return j.ref, true
}

// Status returns the status of a job, or ErrNotFound (also for a job the
// caller of ctx may not see).
func (s *Supervisor) Status(ctx context.Context, jobID string) (JobStatus, error) {
	ref, ok := s.job(ctx, jobID)
	if !ok {
		return JobStatus{}, ErrNotFound
	}
	st, err := ref.w.Status(ref.id)
	if errors.Is(err, ErrNotFound) {
		s.forget(ref) // expired between the two looks
	}
	if err != nil {
		return JobStatus{}, err
	}
	return JobStatus{st, jobID, ref.w.Name(), ref.id}, nil
}

// Result returns the result of a finished job and releases it, or
// ErrNotFound (also for a job the caller of ctx may not see), or
// ErrNotFinished.
func (s *Supervisor) Result(ctx context.Context, jobID string) (JobResult, error) {
	ref, ok := s.job(ctx, jobID)
	if !ok {
		return JobResult{}, ErrNotFound
	}
	res, err := ref.w.Result(ref.id)
	if errors.Is(err, ErrNotFinished) {
		return JobResult{}, err
	}
	s.mu.Lock()
	delete(s.jobs, jobID)
	delete(s.refs, ref)
	s.mu.Unlock()
	if err != nil {
		return JobResult{}, err
	}
	return JobResult{res, jobID, ref.w.Name(), ref.id}, nil
}

// Cancel cancels a job in flight, reporting whether it was in flight, or
// ErrNotFound (also for a job the caller of ctx may not see).
func (s *Supervisor) Cancel(ctx context.Context, jobID string) (bool, error) {
	ref, ok := s.job(ctx, jobID)
	if !ok {
		return false, ErrNotFound
	}
	return ref.w.Cancel(ref.id), nil
}
