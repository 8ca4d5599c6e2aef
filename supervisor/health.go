package supervisor

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
)

// This file is the supervision loop: readiness probes, CPU liveness,
// timeout checks and nuke-and-repave restarts.

// probeResult is the outcome of one readiness probe of proc.
type probeResult struct {
	proc *process
	err  error
}

// supervise is the worker's supervision loop. It alone starts, stops and
// restarts children after Start.
func (w *Worker) supervise(ctx context.Context, p *process) {
	defer close(w.loopDone)
	tick := time.NewTicker(w.cfg.Timeouts.ProbeInterval)
	defer tick.Stop()
	probes := make(chan probeResult, 1)
	probing := false
	for p != nil {
		select {
		case <-ctx.Done():
			w.failAll(FailWorkerStopped, "worker stopped")
			p.stop(w.cfg.StopTimeout)
			p = nil
		case <-p.done:
			p = w.restart(ctx, p, FailServerDied, p.exitDetail())
		case k := <-w.kick:
			if k.proc == p {
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
			if v, ok := w.check(p); ok {
				p = w.restart(ctx, p, v.reason, v.detail)
			} else if !probing && w.wantProbe() {
				probing = true
				go func(p *process) {
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
	<-ctx.Done()
	w.mu.Lock()
	w.failAllLocked(FailWorkerStopped, "worker stopped")
	w.state, w.proc = WorkerStopped, nil
	w.mu.Unlock()
	w.client.CloseIdleConnections()
	w.log.Info("worker stopped")
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
		w.log.Info("worker ready", "pid", w.proc.pid)
	case err != nil && w.state == WorkerReady && w.slotsUsed == 0:
		return verdict{reason: FailProbe, detail: err.Error(), restart: true}, true
	}
	return verdict{}, false
}

// check samples the child's CPU time and judges every request in flight.
// Requests past a request-level timeout fail here; a verdict is returned
// when the child must be restarted.
func (w *Worker) check(p *process) (verdict, bool) {
	ticks, _ := groupCPU(p.pid)
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
func (w *Worker) restart(ctx context.Context, p *process, reason FailReason, detail string) *process {
	for {
		now := time.Now()
		w.mu.Lock()
		w.failAllLocked(reason, detail)
		w.state = WorkerRunning
		w.lastError = string(reason) + ": " + detail
		w.restarts = append(w.restarts, RestartRecord{Reason: reason, Detail: detail, At: now})
		if len(w.restarts) > maxRestartRecords {
			w.restarts = slices.Delete(w.restarts, 0, len(w.restarts)-maxRestartRecords)
		}
		tp := w.cfg.Timeouts
		allowed := tp.allowRestart(w.restartTimes, now)
		w.restartTimes = slices.DeleteFunc(w.restartTimes, func(t time.Time) bool { return now.Sub(t) >= tp.RestartWindow })
		if allowed {
			w.restartTimes = append(w.restartTimes, now)
			w.restartCount++
			w.counts.restarts[reason]++
		}
		w.mu.Unlock()
		w.log.Warn("worker restart", "reason", reason, "detail", detail, "allowed", allowed)
		if p != nil {
			p.stop(w.cfg.StopTimeout)
		}
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
		np, err := startProcess(w.argv, w.env, w.logs)
		if err == nil {
			w.mu.Lock()
			w.proc, w.cpuTicks = np, 0
			w.mu.Unlock()
			w.log.Info("worker restarted", "pid", np.pid)
			return np
		}
		p, reason, detail = nil, FailServerDied, err.Error()
	}
}
