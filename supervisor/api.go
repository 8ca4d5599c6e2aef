// Package supervisor runs OpenAI-compatible inference servers (corral serve,
// llama-server, vLLM) as supervised child processes and offers a job API on
// top of them.
//
// A Worker owns one child process. Its slots are admission control: Submit
// returns at once with a request id, or with ErrNoSlotAvailable,
// ErrWorkerNotReady or ErrWorkerFailed; there is no queue. Callers poll
// Status and read the outcome with Result, which releases everything held for
// the request. Every request streams internally so that the worker sees
// progress; a server that dies, stalls or becomes unreachable is killed and
// started again (nuke and repave) and every request in flight fails with an
// explicit FailReason. Requests are never replayed.
//
// A worker is READY when its readiness probe (GET of a path answering 200
// with JSON) passes. The default path is the one that proves the model is
// loaded for the worker's kind (WorkerKind.ReadinessPath): /health for
// corral and llama-server, whose /v1/models answers 200 while it still
// loads; /v1/models for vLLM and other servers. A worker not READY within
// its StartupTimeout restarts. A FAILED worker leaves that state only by
// Worker.Restart (POST /v1/workers/{name}/restart). A remote worker (URL,
// no Command) is a server corral does not run: everything but process
// management applies to it.
//
// Time to first token may be many minutes for a long prompt, so a request is
// judged stalled only when no response bytes arrive AND the child's CPU time
// (from /proc/<pid>/stat) stops advancing; a long prefill that burns CPU is
// never killed. Once tokens flow, a request is also judged on its own bytes:
// one that gets none while other streams of its worker do is stalled.
//
// Prompting is layered: a BIOS system prompt (a pure function of an
// agent.BiosContext) comes first, then the caller's system prompt, then the
// conversation. Tools follow the OpenAI function-calling schema and run
// through an agent.ToolRunner; exit tools are only recorded as signals.
//
// Behind its gate (Supervisor.Gated), a job counts against its caller's API
// key as a request that lasts until the job ends: it holds one of the
// key's places in flight (concurrency), charges the tokens of its turns
// (tokens per minute), and its bytes count in the key's share of the job
// storage (Options.MaxJobBytesPerKey). A local worker whose server takes an
// API key from its environment gets a generated one
// (WorkerConfig.GenerateKey), so that nothing else on the machine uses it.
//
// A Supervisor groups workers and serves the HTTP face described in http.go;
// the YAML configuration format is documented in example.yaml. Package
// process runs a worker's child process group; package agent holds the
// BIOS, the tool plumbing and the loop guard that need no worker.
package supervisor

import (
	"errors"
	"time"
)

// WorkerState is the lifecycle state of a Worker.
type WorkerState string

// Worker states.
const (
	// WorkerRunning means the child process runs but has not (yet, or again
	// after a restart) passed the readiness probe.
	WorkerRunning WorkerState = "running"
	// WorkerReady means the child passed the readiness probe and Submit
	// accepts requests.
	WorkerReady WorkerState = "ready"
	// WorkerFailed means the worker restarted too often within the restart
	// window and gave up; the child is not running.
	WorkerFailed WorkerState = "failed"
	// WorkerStopped means the worker was never started or has been stopped.
	WorkerStopped WorkerState = "stopped"
)

// RequestState is the state of one submitted request.
type RequestState string

// Request states. Completed, Failed and Canceled are terminal.
const (
	// RequestRunning: a turn is streaming from the child.
	RequestRunning RequestState = "running"
	// RequestToolRunning: the ToolRunner is executing the model's calls.
	RequestToolRunning RequestState = "tool_running"
	// RequestCompleted: the model finished (see FinishReason).
	RequestCompleted RequestState = "completed"
	// RequestFailed: see FailReason and FailDetail.
	RequestFailed RequestState = "failed"
	// RequestCanceled: Cancel was called.
	RequestCanceled RequestState = "canceled"
)

// Terminal reports whether s is a final state.
func (s RequestState) Terminal() bool {
	return s == RequestCompleted || s == RequestFailed || s == RequestCanceled
}

// FailReason says why a request failed or why the worker restarted.
type FailReason string

// Fail reasons of the specification. Those of a restart fail every request
// in flight on the worker.
const (
	// FailWorkerRestarted: the worker restarted for a reason that is not
	// more specific.
	FailWorkerRestarted FailReason = "worker_restarted"
	// FailServerDied: the child exited (restart).
	FailServerDied FailReason = "server_died"
	// FailConnectFailed: no connection to the child (restart).
	FailConnectFailed FailReason = "connect_failed"
	// FailHeadersTimeout: no response headers in time (restart).
	FailHeadersTimeout FailReason = "headers_timeout"
	// FailStallTimeout: neither response bytes nor CPU progress within
	// PrefillLiveness or IdleStream (restart); or, once tokens flow, no
	// bytes for IdleStream while other streams of the worker got some
	// (that request only).
	FailStallTimeout FailReason = "stall_timeout"
	// FailToolParse: the model's tool call could not be parsed strictly.
	FailToolParse FailReason = "tool_parse_error"
	// FailToolExecution: the ToolRunner returned an error.
	FailToolExecution FailReason = "tool_execution_error"
	// FailRepeatedLine: the repeated-line loop guard tripped.
	FailRepeatedLine FailReason = "repeated_line_loop"
	// FailCanceled: Cancel was called.
	FailCanceled FailReason = "canceled"
	// FailUnknown: anything else; FailDetail says what.
	FailUnknown FailReason = "unknown_error"
)

// Fail reasons added by corral.
const (
	// FailTTFTTimeout: no token within TimeoutProfile.TTFT (request only).
	FailTTFTTimeout FailReason = "ttft_timeout"
	// FailAbsoluteTimeout: the request ran past TimeoutProfile.Absolute
	// (request only).
	FailAbsoluteTimeout FailReason = "absolute_timeout"
	// FailConnectionLost: the response stream broke while the child was
	// still alive; the worker restarts.
	FailConnectionLost FailReason = "connection_lost"
	// FailUpstream: the child answered with an HTTP error status or a body
	// that is not a chat completion stream (request only).
	FailUpstream FailReason = "upstream_error"
	// FailWorkerStopped: Stop was called while the request was in flight.
	FailWorkerStopped FailReason = "worker_stopped"
	// FailProbe: an idle worker failed its periodic readiness probe; used
	// as a restart reason.
	FailProbe FailReason = "probe_failed"
	// FailStartupTimeout: the worker was not READY within its
	// StartupTimeout of starting (restart; counts toward the crash-loop
	// limit).
	FailStartupTimeout FailReason = "startup_timeout"
	// FailManual: an operator asked for the restart (Worker.Restart,
	// POST /v1/workers/{name}/restart). It also leaves FAILED and starts a
	// fresh crash-loop window.
	FailManual FailReason = "manual"
)

// FinishReason says how a request ended.
type FinishReason string

// Finish reasons.
const (
	// FinishStop: the model ended its answer (end of generation or a stop
	// string).
	FinishStop FinishReason = "stop"
	// FinishMaxToken: the answer hit max_tokens.
	FinishMaxToken FinishReason = "max_tokens"
	// FinishCanceled: Cancel was called.
	FinishCanceled FinishReason = "canceled"
	// FinishFailed: the request failed.
	FinishFailed FinishReason = "failed"
	// FinishToolBudget (a corral addition) means the model still asked for
	// normal tools when no tool iterations were left; Text is its last reply.
	FinishToolBudget FinishReason = "tool_budget_exhausted"
)

// Errors returned by Submit, Status and Result. Their texts are the codes of
// the HTTP face.
var (
	// ErrNoSlotAvailable means every slot is in use; there is no queue.
	ErrNoSlotAvailable = errors.New("NO_SLOT_AVAILABLE")
	// ErrWorkerNotReady means the worker is stopped or (re)starting.
	ErrWorkerNotReady = errors.New("WORKER_NOT_READY")
	// ErrWorkerFailed means the worker gave up after too many restarts.
	ErrWorkerFailed = errors.New("WORKER_FAILED")
	// ErrNotFound means the id was never issued, or its result was
	// released, or it expired unread.
	ErrNotFound = errors.New("NOT_FOUND")
	// ErrNotFinished means Result was asked for a request still in flight.
	ErrNotFinished = errors.New("NOT_FINISHED")
	// ErrWorkerStopped means Restart was asked of a worker that is not
	// started (or is stopping).
	ErrWorkerStopped = errors.New("WORKER_STOPPED")
)

// ExitSignal records one exit-tool call emitted by the model.
type ExitSignal struct {
	ToolName  string         `json:"tool_name"`
	Arguments map[string]any `json:"arguments"`
	EmittedAt time.Time      `json:"emitted_at"`
}

// Job is what a caller submits.
type Job struct {
	// Name correlates the request in logs and status; it is not interpreted.
	Name         string
	SystemPrompt string
	UserPrompt   string
	// Params is merged into the upstream chat completion request; keys the
	// worker does not control pass through unchanged.
	Params map[string]any
}

// RequestStatus is a snapshot of one request.
type RequestStatus struct {
	RequestID      int64        `json:"request_id"`
	JobName        string       `json:"job_name"`
	State          RequestState `json:"state"`
	CreatedAt      time.Time    `json:"created_at"`
	DispatchedAt   time.Time    `json:"dispatched_at,omitzero"`
	FirstTokenAt   time.Time    `json:"first_token_at,omitzero"`
	CompletedAt    time.Time    `json:"completed_at,omitzero"`
	LastProgressAt time.Time    `json:"last_progress_at,omitzero"`
	OutputChars    int          `json:"output_chars"`
	TokensReceived int          `json:"tokens_received"`
	TokensPerSec   float64      `json:"tokens_per_second,omitzero"`
	ToolItersLeft  int          `json:"tool_iters_remaining"`
	Signals        []ExitSignal `json:"signals,omitempty"`
	FailReason     FailReason   `json:"fail_reason,omitempty"`
	FailDetail     string       `json:"fail_detail,omitempty"`
	FinishReason   FinishReason `json:"finish_reason,omitempty"`
}

// RequestResult is the outcome of a terminal request.
type RequestResult struct {
	RequestID    int64        `json:"request_id"`
	JobName      string       `json:"job_name"`
	State        RequestState `json:"state"`
	FinishReason FinishReason `json:"finish_reason"`
	Text         string       `json:"text"`
	Signals      []ExitSignal `json:"signals,omitempty"`
	FailReason   FailReason   `json:"fail_reason,omitempty"`
	FailDetail   string       `json:"fail_detail,omitempty"`
}

// WorkerStatus is a snapshot of a worker.
type WorkerStatus struct {
	Name             string      `json:"name"`
	Model            string      `json:"model"`
	State            WorkerState `json:"state"`
	PID              int         `json:"pid,omitempty"`
	SlotsTotal       int         `json:"slots_total"`
	SlotsUsed        int         `json:"slots_used"`
	ActiveRequestIDs []int64     `json:"active_request_ids"`
	RestartCount     int         `json:"restart_count"`
	LastError        string      `json:"last_error,omitempty"`
	LastReadyAt      time.Time   `json:"last_ready_at,omitzero"`
	// Kind is the server's kind (it picks the readiness probe); URL is
	// set for a remote worker.
	Kind WorkerKind `json:"kind"`
	URL  string     `json:"url,omitempty"`
	// ResultsKept counts finished results held unread; ResultsExpired
	// those dropped unread (older than result_ttl, or beyond max_results).
	ResultsKept    int    `json:"results_kept"`
	ResultsExpired uint64 `json:"results_expired"`
}

// RestartRecord is one restart of the child process.
type RestartRecord struct {
	Reason FailReason `json:"reason"`
	Detail string     `json:"detail,omitempty"`
	At     time.Time  `json:"at"`
}

// WorkerDebugInfo carries recent child output and restart history.
type WorkerDebugInfo struct {
	RecentLogs           []string        `json:"recent_logs"`
	RecentRestartReasons []RestartRecord `json:"recent_restart_reasons"`
}
