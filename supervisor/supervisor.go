package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Errors of worker selection.
var (
	// ErrUnknownWorker means a job named a worker that does not exist.
	ErrUnknownWorker = errors.New("UNKNOWN_WORKER")
	// ErrUnknownModel means no worker serves the model a job named.
	ErrUnknownModel = errors.New("UNKNOWN_MODEL")
)

// Supervisor runs a set of workers and gives their requests job ids that are
// unique across workers (a worker's own request ids restart at 1 per worker).
type Supervisor struct {
	workers []*Worker
	byName  map[string]*Worker

	mu      sync.Mutex
	nextJob int64
	jobs    map[int64]jobRef
	refs    map[jobRef]int64 // the inverse of jobs
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
// the job id, WorkerRequestID the id within the worker.
type JobStatus struct {
	RequestStatus
	Worker          string `json:"worker"`
	WorkerRequestID int64  `json:"worker_request_id"`
}

// JobResult is a request's result seen through the supervisor.
type JobResult struct {
	RequestResult
	Worker          string `json:"worker"`
	WorkerRequestID int64  `json:"worker_request_id"`
}

// New builds the workers of cfgs (stopped). Names must be unique.
func New(cfgs []WorkerConfig) (*Supervisor, error) {
	s := &Supervisor{byName: make(map[string]*Worker), jobs: make(map[int64]jobRef), refs: make(map[jobRef]int64)}
	for _, c := range cfgs {
		w, err := NewWorker(c)
		if err != nil {
			return nil, err
		}
		w.onExpire = func(id int64) { s.forget(jobRef{w, id}) }
		if s.byName[w.Name()] != nil {
			return nil, fmt.Errorf("worker %s: duplicate name", w.Name())
		}
		s.workers = append(s.workers, w)
		s.byName[w.Name()] = w
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

// candidates lists the workers a target may use, those with the most free
// slots first (ties in configuration order): routing spreads work over
// local and remote workers alike.
func (s *Supervisor) candidates(t Target) ([]*Worker, error) {
	switch {
	case t.Worker != "":
		w := s.byName[t.Worker]
		if w == nil {
			return nil, ErrUnknownWorker
		}
		return []*Worker{w}, nil
	case t.Model != "":
		var ws []*Worker
		for _, w := range s.workers {
			if w.Model() == t.Model {
				ws = append(ws, w)
			}
		}
		if len(ws) == 0 {
			return nil, ErrUnknownModel
		}
		return byFreeSlots(ws), nil
	}
	return byFreeSlots(s.workers), nil
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
// most hopeful error wins: no slot, then not ready, then failed.
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
		case errors.Is(err, ErrWorkerNotReady) && !errors.Is(best, ErrNoSlotAvailable):
			best = err
		}
	}
	return zero, nil, best
}

// Submit submits job to a worker chosen by t and returns its job id and
// the worker's name.
func (s *Supervisor) Submit(t Target, job Job) (int64, string, error) {
	ws, err := s.candidates(t)
	if err != nil {
		return 0, "", err
	}
	id, w, err := pick(ws, func(w *Worker) (int64, error) { return w.Submit(job) })
	if err != nil {
		return 0, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextJob++
	s.jobs[s.nextJob] = jobRef{w, id}
	s.refs[jobRef{w, id}] = s.nextJob
	return s.nextJob, w.Name(), nil
}

func (s *Supervisor) job(id int64) (jobRef, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ref, ok := s.jobs[id]
	return ref, ok
}

// Status returns the status of a job, or ErrNotFound.
func (s *Supervisor) Status(jobID int64) (JobStatus, error) {
	ref, ok := s.job(jobID)
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
	st.RequestID = jobID
	return JobStatus{st, ref.w.Name(), ref.id}, nil
}

// Result returns the result of a finished job and releases it, or
// ErrNotFound, or ErrNotFinished.
func (s *Supervisor) Result(jobID int64) (JobResult, error) {
	ref, ok := s.job(jobID)
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
	res.RequestID = jobID
	return JobResult{res, ref.w.Name(), ref.id}, nil
}

// Cancel cancels a job in flight, reporting whether it was in flight, or
// ErrNotFound.
func (s *Supervisor) Cancel(jobID int64) (bool, error) {
	ref, ok := s.job(jobID)
	if !ok {
		return false, ErrNotFound
	}
	return ref.w.Cancel(ref.id), nil
}
