package engine

import "time"

// TimeLimits is the queue wait and the pause grace e runs with, defaults
// applied.
func TimeLimits(e *Engine) (maxQueueWait, pauseGrace time.Duration) {
	return e.cfg.MaxQueueWait, e.cfg.PauseGrace
}
