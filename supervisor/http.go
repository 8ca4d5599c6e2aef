package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/wire"
)

// DefaultMaxBody is Options.MaxBody's default, and corral supervise's
// --max-body: 8 MiB, corral serve's (gate.DefaultMaxBody), whose workers
// refuse larger bodies anyway.
const DefaultMaxBody = gate.DefaultMaxBody

// unreadDrain is the most of a body the HTTP face reads, and discards,
// from a request it refuses before reading the body: a client that sends
// its whole body before it reads the answer then gets the answer rather
// than a reset. The connection closes after the answer.
const unreadDrain = 1 << 20

// Handler returns the HTTP face of the supervisor:
//
//	POST   /v1/jobs                  submit {job_name, system_prompt, user_prompt, params, worker, model}
//	                                 → 200 {"ok":true,"request_id":"ID","worker":"..."}
//	                                 | 429 {"ok":false,"error":"NO_SLOT_AVAILABLE"}
//	                                 | 503 {"ok":false,"error":"WORKER_NOT_READY"|"WORKER_FAILED"}
//	                                 | 503 JOB_STORAGE_FULL, with Retry-After | 413 JOB_TOO_LARGE
//	                                 | 404 {"ok":false,"error":"UNKNOWN_WORKER"|"UNKNOWN_MODEL"}
//	                                 | 401 AUTHENTICATION_REQUIRED | 413 REQUEST_TOO_LARGE
//	                                 | 429 KEY_JOB_STORAGE_FULL, with Retry-After
//	GET    /v1/jobs/{id}             status (JobStatus) | 404 NOT_FOUND
//	GET    /v1/jobs/{id}/result      result (JobResult), releasing the job | 404 NOT_FOUND | 409 NOT_FINISHED
//	DELETE /v1/jobs/{id}             cancel → {"ok":true} if it was in flight | 404 NOT_FOUND
//	GET    /v1/workers               {"workers":[WorkerStatus...]}
//	GET    /v1/workers/{name}/debug  WorkerDebugInfo | 404 | 403 FORBIDDEN (admin only)
//	POST   /v1/workers/{name}/restart  restart now, reason "manual"; leaves FAILED
//	                                 → 200 {"ok":true,"worker":"..."} | 404 UNKNOWN_WORKER
//	                                 | 409 WORKER_STOPPED | 403 FORBIDDEN (admin only)
//	GET    /v1/models                the workers' model ids, OpenAI style
//	GET    /metrics                  Prometheus metrics (see docs/operations.md)
//	POST   /v1/chat/completions      proxied (streaming or not) to a READY worker
//	                                 serving the body's "model" (any worker if it names
//	                                 none), local or remote, the one with the most free
//	                                 slots; the X-Corral-Worker header names it;
//	                                 429 no_slot_available when none has one
//
// The caller of a request is gate.FromContext's (the gate in front of this
// handler authenticates it; without keys every caller is an admin with ID
// ""). A job belongs to the caller that submitted it: its status, result
// and cancellation answer 404 NOT_FOUND to any other caller but an admin,
// as for an id never issued. Worker debug output and restarts are for
// admins. A worker with api_key_env serves only callers that presented a
// key (401 AUTHENTICATION_REQUIRED, or authentication_required, for the
// others).
//
// A proxied chat completion holds a slot while it runs and is cut off when
// its worker restarts; it is not a job (no BIOS, tools or loop guard) and
// its timeouts are the client's.
//
// A job submission or chat completion is admitted before its body is read
// (admitBody): when no worker the caller may use could take it now, it is
// refused at once, and no more bodies are read at a time than those
// workers have free slots. A body is read up to Options.MaxBody bytes
// (413 past it).
//
// A job goes to the worker named by "worker"; else to a worker serving
// "model"; else to any worker; of those that are READY with a free slot,
// the one with the most free slots takes it (ties in configuration order). "job_name" only labels the job. The
// request_id returned is the job id: 26 characters of base32, 130 random
// bits, that cannot be guessed from other ids.
func (s *Supervisor) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", s.handleSubmit)
	mux.HandleFunc("GET /v1/jobs/{id}", s.handleStatus)
	mux.HandleFunc("GET /v1/jobs/{id}/result", s.handleResult)
	mux.HandleFunc("DELETE /v1/jobs/{id}", s.handleCancel)
	mux.HandleFunc("GET /v1/workers", s.handleWorkers)
	mux.HandleFunc("GET /v1/workers/{name}/debug", s.handleDebug)
	mux.HandleFunc("POST /v1/workers/{name}/restart", s.handleRestart)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	mux.Handle("GET /metrics", s.metricsHandler())
	return mux
}

// submitRequest is the body of POST /v1/jobs.
type submitRequest struct {
	JobName      string         `json:"job_name"`
	SystemPrompt string         `json:"system_prompt"`
	UserPrompt   string         `json:"user_prompt"`
	Params       map[string]any `json:"params"`
	Worker       string         `json:"worker"`
	Model        string         `json:"model"`
}

// writeJSON writes v as the JSON response body with status code.
func writeJSON(w http.ResponseWriter, code int, v any) { wire.WriteJSON(w, code, v) }

// writeCode writes {"ok":false,"error":err} with the status code that
// matches err; the errors that need explaining come with a "detail".
func writeCode(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	body := map[string]any{"ok": false, "error": err.Error()}
	switch {
	case errors.Is(err, ErrNoSlotAvailable):
		code = http.StatusTooManyRequests
	case errors.Is(err, ErrWorkerNotReady), errors.Is(err, ErrWorkerFailed):
		code = http.StatusServiceUnavailable
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrUnknownWorker), errors.Is(err, ErrUnknownModel):
		code = http.StatusNotFound
	case errors.Is(err, ErrNotFinished), errors.Is(err, ErrWorkerStopped):
		code = http.StatusConflict
	case errors.Is(err, ErrJobStorageFull):
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", strconv.Itoa(int(jobStorageRetryAfter.Seconds())))
		body["detail"] = "the supervisor holds max_job_bytes of job bodies and unread results; " +
			"retry once results have been read or have expired"
	case errors.Is(err, ErrKeyStorageFull):
		code = http.StatusTooManyRequests
		w.Header().Set("Retry-After", strconv.Itoa(int(jobStorageRetryAfter.Seconds())))
		body["detail"] = "this API key's jobs and unread results hold max_job_bytes_per_key bytes; " +
			"retry once its results have been read or have expired"
	case errors.Is(err, ErrJobTooLarge):
		code = http.StatusRequestEntityTooLarge
		body["detail"] = "the job's prompts and params are larger than max_job_bytes, or than max_job_bytes_per_key"
	case errors.Is(err, ErrAuthRequired):
		code = http.StatusUnauthorized
		w.Header().Set("WWW-Authenticate", "Bearer")
		body["detail"] = authRequiredDetail
	case errors.Is(err, ErrForbidden):
		code = http.StatusForbidden
		body["detail"] = "this operation needs an admin key"
	}
	writeJSON(w, code, body)
}

// authRequiredDetail explains ErrAuthRequired.
const authRequiredDetail = "the worker sends an API key to its server, which the supervisor does " +
	"not lend to callers that did not authenticate: send a supervisor API key " +
	"(Authorization: Bearer or x-api-key)"

func badRequest(w http.ResponseWriter, detail string) {
	writeJSON(w, http.StatusBadRequest, map[string]any{"ok": false, "error": "BAD_REQUEST", "detail": detail})
}

func (s *Supervisor) handleSubmit(w http.ResponseWriter, r *http.Request) {
	done, err := s.admitBody(gate.FromContext(r.Context()))
	if err != nil {
		discardBody(w, r)
		writeCode(w, err)
		return
	}
	defer done()
	data, err := s.readBody(w, r)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeJSON(w, http.StatusRequestEntityTooLarge, map[string]any{"ok": false, "error": "REQUEST_TOO_LARGE",
				"detail": fmt.Sprintf("the job is larger than the supervisor's body limit (%d bytes, --max-body)", tooLarge.Limit)})
			return
		}
		badRequest(w, "read job: "+err.Error())
		return
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var req submitRequest
	if err := dec.Decode(&req); err != nil {
		badRequest(w, "decode job: "+err.Error())
		return
	}
	if req.UserPrompt == "" {
		badRequest(w, "user_prompt is empty")
		return
	}
	job := Job{Name: req.JobName, SystemPrompt: req.SystemPrompt, UserPrompt: req.UserPrompt, Params: req.Params}
	id, worker, err := s.Submit(r.Context(), Target{Worker: req.Worker, Model: req.Model}, job)
	done()
	if err != nil {
		writeCode(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "request_id": id, "worker": worker})
}

// jobID returns the {id} path value.
func jobID(r *http.Request) string { return r.PathValue("id") }

func (s *Supervisor) handleStatus(w http.ResponseWriter, r *http.Request) {
	st, err := s.Status(r.Context(), jobID(r))
	if err != nil {
		writeCode(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Supervisor) handleResult(w http.ResponseWriter, r *http.Request) {
	res, err := s.Result(r.Context(), jobID(r))
	if err != nil {
		writeCode(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Supervisor) handleCancel(w http.ResponseWriter, r *http.Request) {
	canceled, err := s.Cancel(r.Context(), jobID(r))
	if err != nil {
		writeCode(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": canceled})
}

func (s *Supervisor) handleWorkers(w http.ResponseWriter, _ *http.Request) {
	sts := make([]WorkerStatus, 0, len(s.workers))
	for _, wk := range s.workers {
		sts = append(sts, wk.WorkerStatus())
	}
	writeJSON(w, http.StatusOK, map[string]any{"workers": sts})
}

// handleDebug serves a worker's recent child output (which may show
// prompts and command lines) and restart history, to admins only.
func (s *Supervisor) handleDebug(w http.ResponseWriter, r *http.Request) {
	if !gate.FromContext(r.Context()).Admin() {
		writeCode(w, ErrForbidden)
		return
	}
	wk := s.Worker(r.PathValue("name"))
	if wk == nil {
		writeCode(w, ErrUnknownWorker)
		return
	}
	writeJSON(w, http.StatusOK, wk.DebugInfo())
}

// handleRestart asks a worker for a manual restart; admins only.
func (s *Supervisor) handleRestart(w http.ResponseWriter, r *http.Request) {
	caller := gate.FromContext(r.Context())
	if !caller.Admin() {
		writeCode(w, ErrForbidden)
		return
	}
	wk := s.Worker(r.PathValue("name"))
	if wk == nil {
		writeCode(w, ErrUnknownWorker)
		return
	}
	by := r.RemoteAddr
	if id := caller.ID(); id != "" {
		by = id + " at " + by
	}
	if err := wk.Restart(r.Context(), "POST /v1/workers/"+wk.Name()+"/restart from "+by); err != nil {
		writeCode(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "worker": wk.Name()})
}

func (s *Supervisor) handleModels(w http.ResponseWriter, _ *http.Request) {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		OwnedBy string `json:"owned_by"`
	}
	seen := make(map[string]bool)
	data := []model{}
	for _, wk := range s.workers {
		if !seen[wk.Model()] {
			seen[wk.Model()] = true
			data = append(data, model{wk.Model(), "model", "corral"})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// openAIError writes an OpenAI error envelope.
func openAIError(w http.ResponseWriter, status int, typ, code, msg string) {
	writeJSON(w, status, wire.Envelope{Error: wire.ErrorObject{Message: msg, Type: typ, Code: &code}})
}

// handleChat proxies a chat completion to a worker of the requested model
// that is READY and has a free slot. The slot is held until the response
// has been copied; a restart of the worker cuts the response off. The
// forwarding itself is proxyChat's (httputil.ReverseProxy).
func (s *Supervisor) handleChat(w http.ResponseWriter, r *http.Request) {
	caller := gate.FromContext(r.Context())
	done, err := s.admitBody(caller)
	if err != nil {
		discardBody(w, r)
		chatRefused(w, err, "")
		return
	}
	defer done()
	body, err := s.readBody(w, r)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			openAIError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
				fmt.Sprintf("the request is larger than the supervisor's body limit (%d bytes, --max-body)", tooLarge.Limit))
			return
		}
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "invalid_body", "read body: "+err.Error())
		return
	}
	var head struct {
		Model string `json:"model"`
	}
	if err := json.Unmarshal(body, &head); err != nil {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", "decode body: "+err.Error())
		return
	}
	ws, err := s.candidates(Target{Model: head.Model}, caller)
	if err != nil {
		chatRefused(w, err, head.Model)
		return
	}
	type slot struct {
		ctx     context.Context
		release func()
	}
	sl, wk, err := pick(ws, func(wk *Worker) (slot, error) {
		ctx, release, err := wk.acquire(r.Context())
		return slot{ctx, release}, err
	})
	done() // the slot, if any, bounds the body from now on
	if err != nil {
		chatRefused(w, err, head.Model)
		return
	}
	defer sl.release()
	w.Header().Set("X-Corral-Worker", wk.Name())
	wk.proxyChat(w, r.WithContext(sl.ctx), body)
}

// chatRefused writes the OpenAI error of a chat completion for model that
// no worker takes, err saying why.
func chatRefused(w http.ResponseWriter, err error, model string) {
	switch {
	case errors.Is(err, ErrAuthRequired):
		w.Header().Set("WWW-Authenticate", "Bearer")
		openAIError(w, http.StatusUnauthorized, "authentication_error", "authentication_required", authRequiredDetail)
	case errors.Is(err, ErrUnknownModel), errors.Is(err, ErrUnknownWorker):
		openAIError(w, http.StatusNotFound, "invalid_request_error", "model_not_found", "no worker serves model "+strconv.Quote(model))
	case errors.Is(err, ErrNoSlotAvailable):
		openAIError(w, http.StatusTooManyRequests, "rate_limit_error", "no_slot_available", "every worker of this model is busy")
	default:
		openAIError(w, http.StatusServiceUnavailable, "server_error", "worker_not_ready", "no worker of this model is ready: "+err.Error())
	}
}

// admitBody lets a request that runs on a worker (a job or a chat
// completion) of caller read its body, or refuses it before a byte is
// read. It refuses with the error a submission would get when no worker
// the caller may use (whatever the model) is READY with a free slot, and
// with ErrNoSlotAvailable when as many requests are reading their bodies
// as those workers have free slots. However many clients post at once,
// the bodies in memory are so bounded by the free slots times
// Options.MaxBody; without it, every post would be read whole before the
// slot check turned it away. done ends the admission (more than once is
// fine): call it once the request holds a slot or has been refused one.
func (s *Supervisor) admitBody(caller gate.Caller) (done func(), err error) {
	ws, err := s.candidates(Target{}, caller)
	if err != nil {
		return nil, err
	}
	free := 0
	for _, w := range ws {
		free += w.readySlots()
	}
	if s.reading.Add(1) <= int64(free) {
		return sync.OnceFunc(func() { s.reading.Add(-1) }), nil
	}
	s.reading.Add(-1)
	_, _, err = pick(ws, func(w *Worker) (struct{}, error) { return struct{}{}, w.admissible() })
	if err == nil {
		err = ErrNoSlotAvailable // the free slots are spoken for by bodies being read
	}
	return nil, err
}

// readBody reads r's body, up to Options.MaxBody bytes: past it the error
// is an *http.MaxBytesError, at once (before a byte is read) for a body
// whose Content-Length says so. A declared body is read into one buffer
// of its size.
func (s *Supervisor) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > s.maxBody {
		discardBody(w, r)
		return nil, &http.MaxBytesError{Limit: s.maxBody}
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, s.maxBody)); err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	return buf.Bytes(), nil
}

// discardBody reads and discards up to unreadDrain bytes of the body of a
// request refused unread, and closes the connection after the answer.
func discardBody(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Connection", "close")
	if r.Body != nil {
		io.CopyN(io.Discard, r.Body, unreadDrain) // a short or broken body ends it early: fine
	}
}

// metered reports the requests of the HTTP face that run on a worker, job
// submissions and chat completions: those the per-key limits of API keys
// (concurrency, tokens per minute) apply to. The others (status, results,
// cancellations, listings, metrics, worker operations) are unmetered, so
// that a key whose jobs hold all of its places in flight, or that spent
// its tokens, can still follow and read them.
func metered(r *http.Request) bool {
	return r.Method == http.MethodPost && (r.URL.Path == "/v1/jobs" || r.URL.Path == "/v1/chat/completions")
}

// Gated returns the HTTP face (Handler) behind a gate configured by cfg,
// the supervisor's settings taking the place of three of cfg's fields:
// MaxBody is Options.MaxBody; Unmetered is every request but job
// submissions and chat completions (see metered); Errors writes the gate's
// refusals in the shape of the API they answer: OpenAI's envelope for
// chat completions, {"ok":false,"error":CODE,"message":...} for the job
// API.
func (s *Supervisor) Gated(cfg gate.Config) *gate.Gate {
	cfg.MaxBody = s.maxBody
	cfg.Unmetered = func(r *http.Request) bool { return !metered(r) }
	cfg.Errors = writeGateError
	return gate.New(cfg, s.Handler())
}

// writeGateError writes a refusal of the gate in the shape of the
// supervisor's API: OpenAI's envelope for the proxied chat completions,
// {"ok":false,"error":CODE,"message":...} for the job API.
func writeGateError(w http.ResponseWriter, r *http.Request, e *gate.Error) {
	if strings.HasSuffix(r.URL.Path, "/chat/completions") {
		code := e.Code
		wire.WriteJSON(w, e.Status, wire.Envelope{Error: wire.ErrorObject{Message: e.Message, Type: wire.ErrorType(e.Status), Code: &code}})
		return
	}
	wire.WriteJSON(w, e.Status, map[string]any{"ok": false, "error": strings.ToUpper(e.Code), "message": e.Message})
}
