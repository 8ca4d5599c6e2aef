package supervisor

import (
	"maps"
	"net/http"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// workerCounts are a worker's counters since it was built, guarded by
// Worker.mu.
type workerCounts struct {
	restarts map[FailReason]uint64   // restarts done, by reason
	finished map[RequestState]uint64 // jobs ended, by terminal state
	failed   map[FailReason]uint64   // jobs failed or canceled, by reason
}

func newWorkerCounts() workerCounts {
	return workerCounts{
		restarts: make(map[FailReason]uint64),
		finished: make(map[RequestState]uint64),
		failed:   make(map[FailReason]uint64),
	}
}

// workerMetrics is a snapshot of what /metrics reports of a worker.
type workerMetrics struct {
	state            WorkerState
	slots, slotsUsed int
	submitted        int64
	jobs             map[RequestState]int // held (in flight, or finished and not yet released)
	restarts, failed map[FailReason]uint64
	finished         map[RequestState]uint64
	resultsExpired   uint64
}

// metrics takes the worker's snapshot for /metrics.
func (w *Worker) metrics() workerMetrics {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := workerMetrics{
		state: w.state, slots: w.cfg.Slots, slotsUsed: w.slotsUsed, submitted: w.nextID,
		jobs:     make(map[RequestState]int),
		restarts: maps.Clone(w.counts.restarts), failed: maps.Clone(w.counts.failed), finished: maps.Clone(w.counts.finished),
		resultsExpired: w.results.expired,
	}
	for _, r := range w.reqs {
		m.jobs[r.state]++
	}
	return m
}

// Every worker and job state, so that their series exist while 0.
var (
	workerStates = []WorkerState{WorkerRunning, WorkerReady, WorkerFailed, WorkerStopped}
	jobStates    = []RequestState{RequestRunning, RequestToolRunning, RequestCompleted, RequestFailed, RequestCanceled}
	endStates    = []RequestState{RequestCompleted, RequestFailed, RequestCanceled}
)

// collector reads the workers at scrape time (prometheus.Collector).
type collector struct {
	s                                      *Supervisor
	workers, slots, slotsUsed, jobs        *prometheus.Desc
	submitted, finished, failed, restarts  *prometheus.Desc
	expired                                *prometheus.Desc
	jobBytes, jobBytesMax, jobBytesRefused *prometheus.Desc
	jobBytesKeyMax, keyStorageRefused      *prometheus.Desc
}

func newCollector(s *Supervisor) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("corral_supervisor_"+name, help, labels, nil)
	}
	return &collector{
		s:               s,
		workers:         d("workers", "Workers by state (running: started, not ready; ready; failed: gave up restarting; stopped).", "state"),
		slots:           d("slots", "Slots of the worker: requests it runs at once.", "worker"),
		slotsUsed:       d("slots_used", "Slots in use, by jobs and proxied chat completions.", "worker"),
		jobs:            d("jobs", "Jobs held by state: in flight (running, tool_running), or ended and not yet released by GET /v1/jobs/{id}/result.", "worker", "state"),
		submitted:       d("jobs_submitted_total", "Jobs the worker accepted.", "worker"),
		finished:        d("jobs_finished_total", "Jobs ended, by state (completed, failed, canceled).", "worker", "state"),
		failed:          d("jobs_failed_total", "Jobs failed or canceled, by fail reason.", "worker", "reason"),
		restarts:        d("worker_restarts_total", "Restarts of the worker's child, by reason.", "worker", "reason"),
		expired:         d("results_expired_total", "Finished results dropped unread, older than result_ttl or beyond max_results.", "worker"),
		jobBytes:        d("job_bytes", "Bytes held for jobs: bodies (prompts, params) of jobs in flight, names and results of jobs not yet read or expired."),
		jobBytesMax:     d("job_bytes_max", "max_job_bytes: the bound of corral_supervisor_job_bytes beyond which submissions are refused."),
		jobBytesRefused: d("jobs_refused_storage_full_total", "Submissions refused with 503 JOB_STORAGE_FULL: they would have taken corral_supervisor_job_bytes past max_job_bytes."),
		jobBytesKeyMax:  d("job_bytes_per_key_max", "max_job_bytes_per_key: the bytes held for jobs one API key may hold."),
		keyStorageRefused: d("jobs_refused_key_storage_full_total",
			"Submissions refused with 429 KEY_JOB_STORAGE_FULL: they would have taken the bytes held for their API key's jobs past max_job_bytes_per_key."),
	}
}

// Describe sends the collector's descriptors.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.workers, c.slots, c.slotsUsed, c.jobs, c.submitted, c.finished, c.failed, c.restarts, c.expired,
		c.jobBytes, c.jobBytesMax, c.jobBytesRefused, c.jobBytesKeyMax, c.keyStorageRefused} {
		ch <- d
	}
}

// Collect reads every worker.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	byState := make(map[WorkerState]int)
	for _, w := range c.s.workers {
		m := w.metrics()
		name := w.Name()
		byState[m.state]++
		ch <- prometheus.MustNewConstMetric(c.slots, prometheus.GaugeValue, float64(m.slots), name)
		ch <- prometheus.MustNewConstMetric(c.slotsUsed, prometheus.GaugeValue, float64(m.slotsUsed), name)
		ch <- prometheus.MustNewConstMetric(c.submitted, prometheus.CounterValue, float64(m.submitted), name)
		ch <- prometheus.MustNewConstMetric(c.expired, prometheus.CounterValue, float64(m.resultsExpired), name)
		for _, st := range jobStates {
			ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(m.jobs[st]), name, string(st))
		}
		for _, st := range endStates {
			ch <- prometheus.MustNewConstMetric(c.finished, prometheus.CounterValue, float64(m.finished[st]), name, string(st))
		}
		for _, reason := range slices.Sorted(maps.Keys(m.failed)) {
			ch <- prometheus.MustNewConstMetric(c.failed, prometheus.CounterValue, float64(m.failed[reason]), name, string(reason))
		}
		for _, reason := range slices.Sorted(maps.Keys(m.restarts)) {
			ch <- prometheus.MustNewConstMetric(c.restarts, prometheus.CounterValue, float64(m.restarts[reason]), name, string(reason))
		}
	}
	for _, st := range workerStates {
		ch <- prometheus.MustNewConstMetric(c.workers, prometheus.GaugeValue, float64(byState[st]), string(st))
	}
	if b := c.s.budget; b != nil {
		used, refused, keyFull := b.state()
		ch <- prometheus.MustNewConstMetric(c.jobBytes, prometheus.GaugeValue, float64(used))
		ch <- prometheus.MustNewConstMetric(c.jobBytesMax, prometheus.GaugeValue, float64(b.limit))
		ch <- prometheus.MustNewConstMetric(c.jobBytesRefused, prometheus.CounterValue, float64(refused))
		ch <- prometheus.MustNewConstMetric(c.jobBytesKeyMax, prometheus.GaugeValue, float64(b.perKey))
		ch <- prometheus.MustNewConstMetric(c.keyStorageRefused, prometheus.CounterValue, float64(keyFull))
	}
}

// metricsHandler serves GET /metrics: the collector's families and the Go
// process's, in Prometheus' exposition format.
func (s *Supervisor) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(s), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
