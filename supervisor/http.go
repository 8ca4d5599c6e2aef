package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/corral-llm/corral/openai/wire"
)

// maxBodyBytes bounds request bodies accepted by the HTTP face.
const maxBodyBytes = 64 << 20

// Handler returns the HTTP face of the supervisor:
//
//	POST   /v1/jobs                  submit {job_name, system_prompt, user_prompt, params, worker, model}
//	                                 → 200 {"ok":true,"request_id":N,"worker":"..."}
//	                                 | 429 {"ok":false,"error":"NO_SLOT_AVAILABLE"}
//	                                 | 503 {"ok":false,"error":"WORKER_NOT_READY"|"WORKER_FAILED"}
//	                                 | 404 {"ok":false,"error":"UNKNOWN_WORKER"|"UNKNOWN_MODEL"}
//	GET    /v1/jobs/{id}             status (JobStatus) | 404 NOT_FOUND
//	GET    /v1/jobs/{id}/result      result (JobResult), releasing the job | 404 NOT_FOUND | 409 NOT_FINISHED
//	DELETE /v1/jobs/{id}             cancel → {"ok":true} if it was in flight | 404 NOT_FOUND
//	GET    /v1/workers               {"workers":[WorkerStatus...]}
//	GET    /v1/workers/{name}/debug  WorkerDebugInfo | 404
//	POST   /v1/workers/{name}/restart  restart now, reason "manual"; leaves FAILED
//	                                 → 200 {"ok":true,"worker":"..."} | 404 UNKNOWN_WORKER
//	                                 | 409 WORKER_STOPPED
//	GET    /v1/models                the workers' model ids, OpenAI style
//	GET    /metrics                  Prometheus metrics (see README)
//	POST   /v1/chat/completions      proxied (streaming or not) to a READY worker
//	                                 serving the body's "model" (any worker if it names
//	                                 none), local or remote, the one with the most free
//	                                 slots; the X-Corral-Worker header names it;
//	                                 429 no_slot_available when none has one
//
// A proxied chat completion holds a slot while it runs and is cut off when
// its worker restarts; it is not a job (no BIOS, tools or loop guard) and
// its timeouts are the client's.
//
// A job goes to the worker named by "worker"; else to a worker serving
// "model"; else to any worker; of those that are READY with a free slot,
// the one with the most free slots takes it (ties in configuration order). "job_name" only labels the job. The
// request_id returned is a job id unique within the supervisor.
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
// matches err.
func writeCode(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrNoSlotAvailable):
		code = http.StatusTooManyRequests
	case errors.Is(err, ErrWorkerNotReady), errors.Is(err, ErrWorkerFailed):
		code = http.StatusServiceUnavailable
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrUnknownWorker), errors.Is(err, ErrUnknownModel):
		code = http.StatusNotFound
	case errors.Is(err, ErrNotFinished), errors.Is(err, ErrWorkerStopped):
		code = http.StatusConflict
	}
	writeJSON(w, code, map[string]any{"ok": false, "error": err.Error()})
}

func badRequest(w http.ResponseWriter, detail string) {
	writeJSON(w, http.StatusBadRequest, map[string]any{"ok": false, "error": "BAD_REQUEST", "detail": detail})
}

func (s *Supervisor) handleSubmit(w http.ResponseWriter, r *http.Request) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
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
	id, worker, err := s.Submit(Target{Worker: req.Worker, Model: req.Model}, job)
	if err != nil {
		writeCode(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "request_id": id, "worker": worker})
}

// jobID parses the {id} path value; it writes 404 when it is not a number.
func jobID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		writeCode(w, ErrNotFound)
		return 0, false
	}
	return id, true
}

func (s *Supervisor) handleStatus(w http.ResponseWriter, r *http.Request) {
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	st, err := s.Status(id)
	if err != nil {
		writeCode(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Supervisor) handleResult(w http.ResponseWriter, r *http.Request) {
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	res, err := s.Result(id)
	if err != nil {
		writeCode(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Supervisor) handleCancel(w http.ResponseWriter, r *http.Request) {
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	canceled, err := s.Cancel(id)
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

func (s *Supervisor) handleDebug(w http.ResponseWriter, r *http.Request) {
	wk := s.Worker(r.PathValue("name"))
	if wk == nil {
		writeCode(w, ErrUnknownWorker)
		return
	}
	writeJSON(w, http.StatusOK, wk.DebugInfo())
}

// handleRestart asks a worker for a manual restart.
func (s *Supervisor) handleRestart(w http.ResponseWriter, r *http.Request) {
	wk := s.Worker(r.PathValue("name"))
	if wk == nil {
		writeCode(w, ErrUnknownWorker)
		return
	}
	if err := wk.Restart(r.Context(), "POST /v1/workers/"+wk.Name()+"/restart from "+r.RemoteAddr); err != nil {
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
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
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
	ws, err := s.candidates(Target{Model: head.Model})
	if err != nil {
		openAIError(w, http.StatusNotFound, "invalid_request_error", "model_not_found", "no worker serves model "+strconv.Quote(head.Model))
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
	switch {
	case errors.Is(err, ErrNoSlotAvailable):
		openAIError(w, http.StatusTooManyRequests, "rate_limit_error", "no_slot_available", "every worker of this model is busy")
		return
	case err != nil:
		openAIError(w, http.StatusServiceUnavailable, "server_error", "worker_not_ready", "no worker of this model is ready: "+err.Error())
		return
	}
	defer sl.release()
	w.Header().Set("X-Corral-Worker", wk.Name())
	wk.proxyChat(w, r.WithContext(sl.ctx), body)
}
