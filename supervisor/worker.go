package supervisor

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/supervisor/agent"
	"github.com/corral-llm/corral/supervisor/process"
)

// WorkerConfig describes one worker. The YAML names are those of
// example.yaml; fields tagged "-" are set from Go only.
type WorkerConfig struct {
	// Name identifies the worker in logs, routes and the BIOS.
	Name string `yaml:"name"`
	// Model is the model id clients ask for in chat completions and the
	// default "model" of upstream requests. Defaults to Name.
	Model string `yaml:"model"`
	// Command is the child's argv. The placeholders {host}, {port},
	// {name}, {model} and {slots} are replaced in every argument.
	Command []string `yaml:"command"`
	// URL makes the worker remote: an existing server at this base URL
	// (http(s)://host:port), typically on another machine, with no
	// Command. Readiness probes, slots, timeouts (without CPU liveness, as
	// its process is not ours to see), routing and the job API apply; a
	// restart only fails the requests in flight and waits for the probe
	// to pass again.
	URL string `yaml:"url"`
	// Kind is the server's kind, which picks the default readiness probe
	// (WorkerKind.ReadinessPath). Default: detected from Command
	// (DetectKind); a remote worker's default is KindOther.
	Kind WorkerKind `yaml:"kind"`
	// APIKeyEnv names an environment variable holding an API key for the
	// server (llama-server --api-key, or its LLAMA_API_KEY), sent as
	// "Authorization: Bearer" on probes, jobs and proxied requests. The
	// key is read once by NewWorker and never logged or reported. A
	// Supervisor lends it only to callers that authenticated with a
	// supervisor API key (see Options.Keys).
	APIKeyEnv string `yaml:"api_key_env"`
	// GenerateKey (nil: true) gives a local worker of a kind whose server
	// takes an API key from its environment (WorkerKind.KeyEnv) a key of
	// its own when it has none (no APIKeyEnv, and the variable is not set
	// in Env or the supervisor's environment): 130 random bits, made at
	// NewWorker, given to the child in that variable (which, unlike its
	// command line, other users' processes cannot read) and sent on every
	// request to it, so that nothing on the machine reaches the server
	// past the supervisor's keys and limits. It is lent to every caller
	// of the supervisor: it only keeps others out.
	GenerateKey *bool `yaml:"generate_key"`
	// Env is added to the inherited environment of the child.
	Env map[string]string `yaml:"env"`
	// Host and Port locate the child's HTTP server; the port is assigned
	// by whoever configures the worker. Host defaults to 127.0.0.1.
	Host string `yaml:"host"`
	Port int    `yaml:"port"`
	// Slots is the number of requests in flight at once. Default 1.
	Slots int `yaml:"slots"`
	// Timeouts defaults to DefaultTimeouts() when entirely zero.
	Timeouts TimeoutProfile `yaml:"timeouts"`
	// NormalTools are round-trip tools run by ToolRunner.
	NormalTools []agent.ToolDef  `yaml:"-"`
	ToolRunner  agent.ToolRunner `yaml:"-"`
	// ExitTools are shown to the model and recorded as signals when called.
	ExitTools []agent.ToolDef `yaml:"exit_tools"`
	// BIOS defaults to agent.BIOS.
	BIOS agent.BiosProvider `yaml:"-"`
	// Timezone is an IANA name for the BIOS clock. Default UTC.
	Timezone string `yaml:"timezone"`
	// Readiness is the probe that makes the worker READY. Its path
	// defaults to Kind's ReadinessPath.
	Readiness ReadinessProbe `yaml:"readiness"`
	// StartupTimeout bounds the time from starting the child (or, for a
	// remote worker, from a restart) to READY; past it the worker restarts
	// with startup_timeout, which counts toward the crash-loop limit.
	// Default 10m; negative disables it.
	StartupTimeout time.Duration `yaml:"startup_timeout"`
	// ResultTTL is how long a finished request's result is kept unread;
	// then it expires (Status and Result answer ErrNotFound). Default 1h.
	ResultTTL time.Duration `yaml:"result_ttl"`
	// MaxResults bounds the finished results kept unread; beyond it the
	// oldest expire first. Default 4096.
	MaxResults int `yaml:"max_results"`
	// ToolFormat defaults to agent.ToolFormatNative.
	ToolFormat agent.ToolFormat `yaml:"tool_format"`
	// MaxTokens is the max_tokens sent when params set none (0: none).
	MaxTokens int `yaml:"max_tokens"`
	// MaxToolIterations is each request's tool-round budget. Default 8.
	MaxToolIterations int `yaml:"max_tool_iterations"`
	// RepeatedLine is the loop guard; the zero value disables it.
	RepeatedLine agent.RepeatedLineGuard `yaml:"repeated_line"`
	// StopTimeout is how long the child may take to exit after SIGTERM
	// before the group gets SIGKILL. Default 10s.
	StopTimeout time.Duration `yaml:"stop_timeout"`
	// LogLines is the size of the child's log ring buffer. Default 256.
	LogLines int `yaml:"log_lines"`
	// Config holds how the child is run and where its output goes:
	// log_file, log_max_bytes, log_files and pid_namespace (package
	// process).
	process.Config `yaml:",inline"`
	// Logger defaults to slog.Default().
	Logger *slog.Logger `yaml:"-"`
}

// maxRestartRecords bounds WorkerDebugInfo.RecentRestartReasons.
const maxRestartRecords = 32

// restartRequest asks the supervision loop to restart proc.
type restartRequest struct {
	proc   *process.Process
	reason FailReason
	detail string
}

// Worker supervises one child server process and runs requests against it.
// Its methods are safe for concurrent use.
type Worker struct {
	cfg     WorkerConfig
	loc     *time.Location
	argv    []string
	env     []string
	baseURL string
	logs    *process.Ring
	// procOpts says how the worker runs its children (package process).
	procOpts *process.Options
	client   *http.Client // requests to the child
	probes   *http.Client // readiness probes
	log      *slog.Logger
	kick     chan restartRequest
	remote   bool
	apiKey   string // from APIKeyEnv, or generated (GenerateKey); never logged
	// lendsKey: apiKey comes from APIKeyEnv, and goes only with the
	// requests of callers that presented a supervisor key.
	lendsKey bool
	redact   *process.Redactor // hides secrets in logs, the ring and failure details
	budget   *byteBudget       // the supervisor's; nil outside one
	now      func() time.Time  // the clock of result expiry (tests replace it)
	// onExpire is told of every result that expired, under mu; the
	// Supervisor forgets the job. Lock order: Worker.mu, then
	// Supervisor.mu.
	onExpire func(id int64)

	mu           sync.Mutex
	state        WorkerState
	proc         *process.Process
	stopLoop     context.CancelFunc
	loopDone     chan struct{}
	nextID       int64
	reqs         map[int64]*request
	proxies      map[int64]context.CancelCauseFunc
	nextProxy    int64
	slotsUsed    int
	restartTimes []time.Time // within the restart window
	restartCount int
	restarts     []RestartRecord
	counts       workerCounts // for /metrics
	lastError    string
	lastReadyAt  time.Time
	liveness     time.Time // last time the child's CPU time advanced
	procStarted  time.Time // when the current child started, for StartupTimeout
	results      resultBook
	streamByte   time.Time // last response byte of any stream (jobs and proxied chats)
	cpuTicks     uint64
	reqWG        sync.WaitGroup
}

// NewWorker checks cfg, fills its defaults and returns a stopped worker.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if cfg.Name == "" {
		return nil, errors.New("worker: name is empty")
	}
	var baseURL string
	switch {
	case cfg.URL != "" && len(cfg.Command) > 0:
		return nil, fmt.Errorf("worker %s: url (a remote worker) and command exclude each other", cfg.Name)
	case cfg.URL != "":
		u, err := remoteBaseURL(cfg.URL)
		if err != nil {
			return nil, fmt.Errorf("worker %s: %w", cfg.Name, err)
		}
		baseURL = u
	case len(cfg.Command) == 0 || cfg.Command[0] == "":
		return nil, fmt.Errorf("worker %s: command is empty", cfg.Name)
	case cfg.Port <= 0 || cfg.Port > 65535:
		return nil, fmt.Errorf("worker %s: port %d out of range", cfg.Name, cfg.Port)
	}
	if cfg.Kind == "" {
		cfg.Kind = DetectKind(cfg.Command)
	}
	if !cfg.Kind.valid() {
		return nil, fmt.Errorf("worker %s: kind %q is none of corral, llama-server, vllm, other", cfg.Name, cfg.Kind)
	}
	if cfg.Readiness.Path == "" {
		cfg.Readiness.Path = cfg.Kind.ReadinessPath()
	}
	apiKey, err := apiKeyFrom(cfg.APIKeyEnv)
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", cfg.Name, err)
	}
	if cfg.StartupTimeout == 0 {
		cfg.StartupTimeout = DefaultStartupTimeout
	}
	if cfg.ResultTTL == 0 {
		cfg.ResultTTL = DefaultResultTTL
	}
	if cfg.MaxResults == 0 {
		cfg.MaxResults = DefaultMaxResults
	}
	if cfg.ResultTTL < 0 || cfg.MaxResults < 0 {
		return nil, fmt.Errorf("worker %s: result_ttl and max_results must not be negative", cfg.Name)
	}
	if cfg.Model == "" {
		cfg.Model = cfg.Name
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Slots == 0 {
		cfg.Slots = 1
	}
	if cfg.Slots < 0 {
		return nil, fmt.Errorf("worker %s: slots %d < 0", cfg.Name, cfg.Slots)
	}
	if cfg.Timeouts == (TimeoutProfile{}) {
		cfg.Timeouts = DefaultTimeouts()
	}
	if cfg.Timeouts.ProbeInterval <= 0 {
		return nil, fmt.Errorf("worker %s: timeouts.probe_interval must be positive", cfg.Name)
	}
	if cfg.BIOS == nil {
		cfg.BIOS = agent.BIOS
	}
	if cfg.Timezone == "" {
		cfg.Timezone = "UTC"
	}
	loc, err := time.LoadLocation(cfg.Timezone)
	if err != nil {
		return nil, fmt.Errorf("worker %s: timezone: %w", cfg.Name, err)
	}
	switch cfg.ToolFormat {
	case "":
		cfg.ToolFormat = agent.ToolFormatNative
	case agent.ToolFormatNative, agent.ToolFormatJSON:
	default:
		return nil, fmt.Errorf("worker %s: tool_format %q is neither native nor json", cfg.Name, cfg.ToolFormat)
	}
	for _, t := range append(slices.Clone(cfg.NormalTools), cfg.ExitTools...) {
		if t.Function.Name == "" {
			return nil, fmt.Errorf("worker %s: a tool has no name", cfg.Name)
		}
	}
	if cfg.MaxToolIterations == 0 {
		cfg.MaxToolIterations = 8
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 10 * time.Second
	}
	if cfg.LogLines == 0 {
		cfg.LogLines = 256
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// The child inherits the environment, and gets cfg.Env on top.
	env := os.Environ()
	for k, v := range cfg.Env {
		env = append(env, k+"="+v)
	}
	keyEnv := generatedKeyEnv(cfg, env)
	if keyEnv != "" {
		apiKey = "corral-worker-" + rand.Text()
	}
	redact := process.NewRedactor(apiKey)
	redact.AddEnv(env)
	if baseURL == "" {
		baseURL = "http://" + net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
	}
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: cfg.Timeouts.Connect}).DialContext,
		MaxIdleConnsPerHost: cfg.Slots + 1,
		DisableCompression:  true,
	}
	w := &Worker{
		cfg:      cfg,
		loc:      loc,
		argv:     expandArgs(cfg),
		baseURL:  baseURL,
		logs:     process.NewRing(cfg.LogLines),
		client:   &http.Client{Transport: withKey(transport, apiKey)},
		probes:   &http.Client{Transport: withKey(&http.Transport{DisableKeepAlives: true}, apiKey)},
		log:      slog.New(redactHandler{cfg.Logger.Handler(), redact}).With("worker", cfg.Name),
		kick:     make(chan restartRequest),
		remote:   cfg.URL != "",
		apiKey:   apiKey,
		lendsKey: cfg.APIKeyEnv != "",
		redact:   redact,
		now:      time.Now,
		state:    WorkerStopped,
		reqs:     make(map[int64]*request),
		proxies:  make(map[int64]context.CancelCauseFunc),
		counts:   newWorkerCounts(),
	}
	if w.procOpts, err = process.NewOptions(cfg.Name, cfg.Port, cfg.Config, w.log); err != nil {
		return nil, err
	}
	w.procOpts.SetRedactor(redact)
	for _, k := range slices.Sorted(maps.Keys(cfg.Env)) {
		w.env = append(w.env, k+"="+cfg.Env[k])
	}
	if keyEnv != "" {
		spec := apiKey
		if cfg.Kind == KindCorral {
			// A user key: the jobs' params may not load or unload the
			// worker's models, nor claim a better priority.
			spec += " role=user name=supervisor"
		}
		w.env = append(w.env, keyEnv+"="+spec)
		w.log.Debug("worker api key generated", "env", keyEnv)
	}
	return w, nil
}

// generatedKeyEnv is the environment variable in which a worker configured
// by cfg, whose child's environment is env, gets a generated API key
// (WorkerConfig.GenerateKey), or "" when it gets none.
func generatedKeyEnv(cfg WorkerConfig, env []string) string {
	name := cfg.Kind.KeyEnv()
	if name == "" || cfg.URL != "" || cfg.APIKeyEnv != "" || cfg.GenerateKey != nil && !*cfg.GenerateKey {
		return ""
	}
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == name && v != "" {
			return "" // the operator's key: the server takes it, and api_key_env tells it to the supervisor
		}
	}
	return name
}

// expandArgs replaces the placeholders in cfg.Command.
func expandArgs(cfg WorkerConfig) []string {
	r := strings.NewReplacer("{host}", cfg.Host, "{port}", strconv.Itoa(cfg.Port),
		"{name}", cfg.Name, "{model}", cfg.Model, "{slots}", strconv.Itoa(cfg.Slots))
	argv := make([]string, len(cfg.Command))
	for i, a := range cfg.Command {
		argv[i] = r.Replace(a)
	}
	return argv
}

// Name returns the worker's name.
func (w *Worker) Name() string { return w.cfg.Name }

// Model returns the model id the worker serves.
func (w *Worker) Model() string { return w.cfg.Model }

// Start starts the child and its supervision. It returns once the child
// runs; the worker becomes READY when the readiness probe passes.
func (w *Worker) Start() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != WorkerStopped {
		return fmt.Errorf("start worker %s: state is %s", w.cfg.Name, w.state)
	}
	p, err := w.launch()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.proc, w.state, w.stopLoop, w.loopDone = p, WorkerRunning, cancel, make(chan struct{})
	w.restartTimes, w.cpuTicks, w.lastError, w.procStarted = nil, 0, "", time.Now()
	if w.remote {
		w.log.Info("worker started", "url", w.baseURL)
	} else {
		w.log.Info("worker started", "pid", p.PID(), "command", w.redact.Args(w.argv))
	}
	go w.supervise(ctx, p)
	return nil
}

// Stop fails the requests in flight with worker_stopped and ends the child
// (SIGTERM to its process group, StopTimeout, SIGKILL). It returns when the
// child is gone and the worker's goroutines have ended, or when ctx ends.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	stop, done := w.stopLoop, w.loopDone
	w.stopLoop = nil
	w.mu.Unlock()
	if stop == nil {
		return nil
	}
	stop()
	allDone := make(chan struct{})
	go func() {
		<-done
		w.reqWG.Wait()
		close(allDone)
	}()
	select {
	case <-allDone:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop worker %s: %w", w.cfg.Name, ctx.Err())
	}
}

// failAll is failAllLocked under the lock.
func (w *Worker) failAll(reason FailReason, detail string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failAllLocked(reason, detail)
}

// failAllLocked fails every request in flight and cancels the proxied
// chat completions.
func (w *Worker) failAllLocked(reason FailReason, detail string) {
	for _, r := range w.reqs {
		w.finishLocked(r, RequestFailed, FinishFailed, reason, detail, r.text.String())
	}
	for _, cancel := range w.proxies {
		cancel(&failure{reason, detail})
	}
}

// finishLocked moves r to a terminal state unless it is in one already,
// frees its slot and cancels its context (ending its upstream stream).
func (w *Worker) finishLocked(r *request, state RequestState, finish FinishReason, reason FailReason, detail, text string) {
	if r.state.Terminal() {
		return
	}
	detail = w.redact.String(detail)
	r.state, r.finish, r.failReason, r.failDetail, r.resultText = state, finish, reason, detail, text
	r.completed = w.now()
	// The result is held until read or expired.
	n := int64(len(text) + len(detail))
	r.keptBytes += n
	w.budget.charge(r.acct.key, n)
	w.keepResultLocked(r)
	// The job no longer holds its key's place among its requests in
	// flight; tokens of a turn cut short are still charged when the
	// turn returns.
	r.acct.lease.Release()
	w.counts.finished[state]++
	if reason != "" {
		w.counts.failed[reason]++
	}
	w.slotsUsed--
	if reason != "" {
		r.cancel(&failure{reason, detail})
	} else {
		r.cancel(nil)
	}
}

// Submit starts a request and returns its id at once, or ErrWorkerFailed,
// ErrWorkerNotReady or ErrNoSlotAvailable; in a Supervisor also
// ErrJobStorageFull or ErrJobTooLarge (Options.MaxJobBytes). Ids increase
// by one per request over the worker's lifetime, starting at 1.
func (w *Worker) Submit(job Job) (int64, error) {
	return w.submit(job, bodySize(job), account{})
}

// account is whom a job's use of shared resources is charged to.
type account struct {
	// key is the API key (gate.Caller.ID) whose share of the byte
	// budget the job's bytes count in; "" without keys.
	key string
	// lease holds the key's place among its requests in flight while
	// the job runs, and takes the tokens it uses; nil: no limits.
	lease *gate.Lease
}

// submit is Submit of a job whose bodySize is body, charged to acct. The
// job releases acct.lease when it ends, but not when submit fails.
func (w *Worker) submit(job Job, body int64, acct account) (int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.admitLocked(); err != nil {
		return 0, err
	}
	if err := w.budget.reserve(acct.key, int64(len(job.Name))+body); err != nil {
		return 0, err
	}
	job.Params = maps.Clone(job.Params)
	w.nextID++
	ctx, cancel := context.WithCancelCause(context.Background())
	r := &request{
		id: w.nextID, job: job, proc: w.proc, cancel: cancel,
		state: RequestRunning, created: time.Now(), toolItersLeft: w.cfg.MaxToolIterations,
		bodyBytes: body, keptBytes: int64(len(job.Name)), acct: acct,
	}
	w.reqs[r.id] = r
	w.slotsUsed++
	w.reqWG.Add(1)
	go w.run(ctx, r)
	return r.id, nil
}

// admitLocked checks that the worker can take one more request.
func (w *Worker) admitLocked() error {
	switch {
	case w.state == WorkerFailed:
		return ErrWorkerFailed
	case w.state != WorkerReady:
		return ErrWorkerNotReady
	case w.slotsUsed >= w.cfg.Slots:
		return ErrNoSlotAvailable
	}
	return nil
}

// run executes a request and records its outcome, unless a cancellation,
// timeout or restart has already made it terminal.
func (w *Worker) run(ctx context.Context, r *request) {
	defer w.reqWG.Done()
	text, finish, err := w.converse(ctx, r)
	w.mu.Lock()
	defer w.mu.Unlock()
	// The conversation is over: the job's body is no longer needed, only
	// its name (for status and result).
	r.job = Job{Name: r.job.Name}
	w.budget.release(r.acct.key, r.bodyBytes)
	r.bodyBytes = 0
	if err == nil {
		w.finishLocked(r, RequestCompleted, finish, "", "", text)
		return
	}
	var f *failure
	if !errors.As(err, &f) {
		f = &failure{FailUnknown, err.Error()}
	}
	w.finishLocked(r, RequestFailed, FinishFailed, f.reason, f.detail, r.text.String())
}

// Cancel cancels a request in flight (best effort: its upstream stream is
// closed). It reports whether the request was in flight.
func (w *Worker) Cancel(id int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.reqs[id]
	if !ok || r.state.Terminal() {
		return false
	}
	w.finishLocked(r, RequestCanceled, FinishCanceled, FailCanceled, "canceled by caller", r.text.String())
	return true
}

// Status returns a snapshot of a request, or ErrNotFound.
func (w *Worker) Status(id int64) (RequestStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.reqs[id]
	if !ok {
		return RequestStatus{}, ErrNotFound
	}
	s := RequestStatus{
		RequestID: r.id, JobName: r.job.Name, State: r.state,
		CreatedAt: r.created, DispatchedAt: r.started, FirstTokenAt: r.firstToken, CompletedAt: r.completed,
		LastProgressAt: r.tl.progressAt(w.liveness),
		OutputChars:    r.outputChars, TokensReceived: r.tokens,
		ToolItersLeft: r.toolItersLeft, Signals: slices.Clone(r.signals),
		FailReason: r.failReason, FailDetail: r.failDetail, FinishReason: r.finish,
	}
	if !r.firstToken.IsZero() {
		end := r.completed
		if end.IsZero() {
			end = time.Now()
		}
		if d := end.Sub(r.firstToken).Seconds(); d > 0 {
			s.TokensPerSec = float64(r.tokens) / d
		}
	}
	return s, nil
}

// Result returns the outcome of a terminal request and releases everything
// held for it: afterwards Status and Result return ErrNotFound. A request
// still in flight gives ErrNotFinished.
func (w *Worker) Result(id int64) (RequestResult, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.reqs[id]
	if !ok {
		return RequestResult{}, ErrNotFound
	}
	if !r.state.Terminal() {
		return RequestResult{}, ErrNotFinished
	}
	w.releaseLocked(id)
	return RequestResult{
		RequestID: r.id, JobName: r.job.Name, State: r.state, FinishReason: r.finish,
		Text: r.resultText, Signals: r.signals, FailReason: r.failReason, FailDetail: r.failDetail,
	}, nil
}

// WorkerStatus returns a snapshot of the worker.
func (w *Worker) WorkerStatus() WorkerStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := WorkerStatus{
		Name: w.cfg.Name, Model: w.cfg.Model, State: w.state,
		SlotsTotal: w.cfg.Slots, SlotsUsed: w.slotsUsed, ActiveRequestIDs: []int64{},
		RestartCount: w.restartCount, LastError: w.lastError, LastReadyAt: w.lastReadyAt,
		Kind: w.cfg.Kind, URL: w.cfg.URL,
		ResultsKept: w.results.kept, ResultsExpired: w.results.expired,
	}
	if w.proc != nil && !w.remote {
		s.PID = w.proc.PID()
	}
	for id, r := range w.reqs {
		if !r.state.Terminal() {
			s.ActiveRequestIDs = append(s.ActiveRequestIDs, id)
		}
	}
	slices.Sort(s.ActiveRequestIDs)
	return s
}

// DebugInfo returns the child's recent output lines and restart history.
func (w *Worker) DebugInfo() WorkerDebugInfo {
	w.mu.Lock()
	restarts := slices.Clone(w.restarts)
	w.mu.Unlock()
	if restarts == nil {
		restarts = []RestartRecord{}
	}
	return WorkerDebugInfo{RecentLogs: w.logs.Lines(), RecentRestartReasons: restarts}
}

// acquire takes a slot for a proxied chat completion. The returned context
// ends with parent or when the worker restarts; release frees the slot.
func (w *Worker) acquire(parent context.Context) (ctx context.Context, release func(), err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.admitLocked(); err != nil {
		return nil, nil, err
	}
	w.nextProxy++
	id := w.nextProxy
	ctx, cancel := context.WithCancelCause(parent)
	w.proxies[id] = cancel
	w.slotsUsed++
	return ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.proxies, id)
		w.slotsUsed--
		cancel(nil)
	}, nil
}

// admissible is the error a submission would get now, nil when it would
// be admitted.
func (w *Worker) admissible() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.admitLocked()
}

// readySlots is the number of slots a submission could take now: the free
// ones of a READY worker, else none.
func (w *Worker) readySlots() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != WorkerReady {
		return 0
	}
	return max(w.cfg.Slots-w.slotsUsed, 0)
}

// freeSlots is the number of slots not in use.
func (w *Worker) freeSlots() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cfg.Slots - w.slotsUsed
}

// Helpers for the tool loop, under the lock.

func (w *Worker) toolItersLeft(r *request) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return r.toolItersLeft
}

func (w *Worker) recordSignal(r *request, s ExitSignal) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r.signals = append(r.signals, s)
}

// setToolRunning switches r between RUNNING and TOOL_RUNNING; entering a
// tool round spends one tool iteration. No upstream call is open during a
// tool round, so its timeline is cleared.
func (w *Worker) setToolRunning(r *request, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.state.Terminal() {
		return
	}
	r.tl = timeline{}
	if on {
		r.state = RequestToolRunning
		r.toolItersLeft--
	} else {
		r.state = RequestRunning
	}
}
