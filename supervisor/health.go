package supervisor

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/corral-llm/corral/supervisor/process"
)

// This file is the supervision loop: readiness probes, CPU liveness,
// timeout checks and nuke-and-repave restarts.

// probeResult is the outcome of one readiness probe of proc.
type probeResult struct {
	proc *process.Process
	err  error
}

// supervise is the worker's supervision loop. It alone starts, stops and
// restarts children after Start. While the worker is FAILED (p is nil) it
// waits for a manual restart or Stop.
func (w *Worker) supervise(ctx context.Context, p *process.Process) {
	defer close(w.loopDone)
	tick := time.NewTicker(w.cfg.Timeouts.ProbeInterval)
	defer tick.Stop()
	probes := make(chan probeResult, 1)
	probing := false
	for {
		if p == nil { // FAILED, or stopped
			if ctx.Err() != nil {
				break
			}
			select {
			case <-ctx.Done():
			case k := <-w.kick:
				if k.reason == FailManual {
					p = w.restart(ctx, nil, k.reason, k.detail)
				}
			case <-tick.C:
				w.sweepResults()
			}
			continue
		}
		select {
		case <-ctx.Done():
			w.failAll(FailWorkerStopped, "worker stopped")
			w.halt(p)
			p = nil
		case <-p.Done():
			p = w.restart(ctx, p, FailServerDied, p.ExitDetail())
		case k := <-w.kick:
			if k.proc == p || k.reason == FailManual {
				p = w.restart(ctx, p, k.reason, k.detail)
			}
		case res := <-probes:
			probing = false
			if res.proc == p {
				if v, ok := w.probed(res.err); ok {
					p = w.restart(ctx, p, v.reason, v.detail)
				}
			}
		case <-tick.C:
			w.sweepResults()
			if v, ok := w.check(p); ok {
				p = w.restart(ctx, p, v.reason, v.detail)
			} else if v, ok := w.startupOverdue(); ok {
				p = w.restart(ctx, p, v.reason, v.detail)
			} else if !probing && w.wantProbe() {
				probing = true
				go func(p *process.Process) {
					pctx, cancel := context.WithTimeout(ctx, w.probeTimeout())
					defer cancel()
					probes <- probeResult{p, probeReady(pctx, w.probes, w.baseURL, w.cfg.Readiness)}
				}(p)
			}
		}
	}
	if probing {
		<-probes
	}
	w.mu.Lock()
	w.failAllLocked(FailWorkerStopped, "worker stopped")
	w.state, w.proc = WorkerStopped, nil
	w.mu.Unlock()
	w.client.CloseIdleConnections()
	w.log.Info("worker stopped")
}

// launch starts a child. A remote worker has no child: its stand-in never
// exits and has no pid, and halt leaves it alone.
func (w *Worker) launch() (*process.Process, error) {
	if w.remote {
		return process.Placeholder(), nil
	}
	return process.Start(w.argv, w.env, w.logs, w.procOpts)
}

// halt stops the child's process group; it does nothing for a remote
// worker or a nil p.
func (w *Worker) halt(p *process.Process) {
	if p != nil && !w.remote {
		p.Stop(w.cfg.StopTimeout)
	}
}

// startupOverdue returns a verdict when the current child has been
// starting (RUNNING, not yet READY) for StartupTimeout or longer.
func (w *Worker) startupOverdue() (verdict, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	limit := w.cfg.StartupTimeout
	if w.state != WorkerRunning || limit <= 0 || time.Since(w.procStarted) < limit {
		return verdict{}, false
	}
	return verdict{reason: FailStartupTimeout, restart: true,
		detail: fmt.Sprintf("not ready within %s of starting (probe GET %s)", limit, w.cfg.Readiness.Path)}, true
}

// Restart asks the supervision loop to restart the worker now, reason
// manual: the child is stopped and started again, or, when the worker is
// FAILED, started afresh. A manual restart starts a new crash-loop window.
// It returns once the loop took the request, ErrWorkerStopped when the
// worker is not started, or ctx's error.
func (w *Worker) Restart(ctx context.Context, detail string) error {
	w.mu.Lock()
	done, started := w.loopDone, w.stopLoop != nil
	w.mu.Unlock()
	if !started {
		return fmt.Errorf("restart worker %s: %w", w.cfg.Name, ErrWorkerStopped)
	}
	if detail == "" {
		detail = "requested by an operator"
	}
	select {
	case w.kick <- restartRequest{reason: FailManual, detail: detail}:
		return nil
	case <-done:
		return fmt.Errorf("restart worker %s: %w", w.cfg.Name, ErrWorkerStopped)
	case <-ctx.Done():
		return fmt.Errorf("restart worker %s: %w", w.cfg.Name, ctx.Err())
	}
}

// probeTimeout bounds one readiness probe.
func (w *Worker) probeTimeout() time.Duration {
	if t := w.cfg.Timeouts.Headers; t > 0 {
		return t
	}
	return 10 * w.cfg.Timeouts.ProbeInterval
}

// wantProbe reports whether a readiness probe is due: while starting, and
// while READY and idle (a busy worker is judged by its requests).
func (w *Worker) wantProbe() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state == WorkerRunning || w.state == WorkerReady && w.slotsUsed == 0
}

// probed applies a probe result; it returns a verdict when an idle READY
// worker failed its probe.
func (w *Worker) probed(err error) (verdict, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err == nil && w.state == WorkerRunning:
		w.state, w.lastReadyAt = WorkerReady, time.Now()
		w.log.Info("worker ready", "pid", w.proc.PID())
	case err != nil && w.state == WorkerReady && w.slotsUsed == 0:
		return verdict{reason: FailProbe, detail: err.Error(), restart: true}, true
	}
	return verdict{}, false
}

// check samples the child's CPU time and judges every request in flight.
// Requests past a request-level timeout fail here; a verdict is returned
// when the child must be restarted.
func (w *Worker) check(p *process.Process) (verdict, bool) {
	var ticks uint64
	if !w.remote { // a remote server's CPU time is not ours to see
		ticks, _ = process.GroupCPU(p.PID())
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if ticks != w.cpuTicks {
		w.cpuTicks, w.liveness = ticks, now
	}
	for _, id := range slices.Sorted(maps.Keys(w.reqs)) {
		r := w.reqs[id]
		if r.state.Terminal() {
			continue
		}
		v, ok := w.cfg.Timeouts.judge(now, r.started, r.tl, w.liveness, w.streamByte)
		if !ok {
			continue
		}
		if v.restart {
			return v, true
		}
		w.finishLocked(r, RequestFailed, FinishFailed, v.reason, v.detail, r.text.String())
	}
	return verdict{}, false
}

// restart is nuke and repave: fail every request in flight with reason,
// stop the child's process group, wait the backoff and start a new child.
// It returns the new child, or nil when the crash-loop limit made the
// worker FAILED or ctx ended.
func (w *Worker) restart(ctx context.Context, p *process.Process, reason FailReason, detail string) *process.Process {
	for {
		now := time.Now()
		detail = w.redact.String(detail)
		w.mu.Lock()
		w.failAllLocked(reason, detail)
		w.state = WorkerRunning
		w.lastError = string(reason) + ": " + detail
		w.restarts = append(w.restarts, RestartRecord{Reason: reason, Detail: detail, At: now})
		if len(w.restarts) > maxRestartRecords {
			w.restarts = slices.Delete(w.restarts, 0, len(w.restarts)-maxRestartRecords)
		}
		tp := w.cfg.Timeouts
		if reason == FailManual { // an operator's restart opens a new window
			w.restartTimes = nil
		}
		allowed := reason == FailManual || tp.allowRestart(w.restartTimes, now)
		w.restartTimes = slices.DeleteFunc(w.restartTimes, func(t time.Time) bool { return now.Sub(t) >= tp.RestartWindow })
		if allowed {
			w.restartTimes = append(w.restartTimes, now)
			w.restartCount++
			w.counts.restarts[reason]++
		}
		w.mu.Unlock()
		w.log.Warn("worker restart", "reason", reason, "detail", detail, "allowed", allowed)
		w.halt(p)
		w.client.CloseIdleConnections()
		if !allowed {
			w.mu.Lock()
			w.state, w.proc = WorkerFailed, nil
			w.lastError = fmt.Sprintf("more than %d restarts within %s; last: %s: %s",
				tp.MaxRestartsPerWindow, tp.RestartWindow, reason, detail)
			w.mu.Unlock()
			w.log.Error("worker failed", "error", w.lastError)
			return nil
		}
		backoff := time.NewTimer(tp.RestartBackoff)
		select {
		case <-ctx.Done():
			backoff.Stop()
			return nil
		case <-backoff.C:
		}
		np, err := w.launch()
		if err == nil {
			w.mu.Lock()
			w.proc, w.cpuTicks, w.procStarted = np, 0, time.Now()
			w.mu.Unlock()
			w.log.Info("worker restarted", "pid", np.PID())
			return np
		}
		p, reason, detail = nil, FailServerDied, err.Error()
	}
}
