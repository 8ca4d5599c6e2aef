package engine

import (
	"context"

	"golang.org/x/sync/semaphore"
)

// CPU shares a machine's cores among the engines of one process, so that
// models computing at the same time never run more compute threads than
// there are cores. ggml's threads meet at a barrier after every operation
// of a forward pass, spinning while they wait, and one of them descheduled
// for another engine's thread stalls the rest: three models with two
// threads each on two cores served 1.2 requests/s, against 7.8 with one
// thread each (scripts/models.sh's workload). Each forward pass holds as
// many cores as its engine has threads; passes of engines that fit
// together run at once, the others wait their turn, first come first
// served.
type CPU struct {
	cores int64
	sem   *semaphore.Weighted
}

// NewCPU returns a share of cores cores.
func NewCPU(cores int) *CPU {
	cores = max(cores, 1)
	return &CPU{cores: int64(cores), sem: semaphore.NewWeighted(int64(cores))}
}

// tryAcquire takes threads cores (all of them when threads is more) if
// they are free now, and returns the function that gives them back.
func (c *CPU) tryAcquire(threads int) (release func(), ok bool) {
	n := min(int64(threads), c.cores)
	if !c.sem.TryAcquire(n) {
		return nil, false
	}
	return func() { c.sem.Release(n) }, true
}

// acquire waits for threads cores (all of them when threads is more) and
// returns the function that gives them back; it fails only when ctx ends.
func (c *CPU) acquire(ctx context.Context, threads int) (release func(), err error) {
	n := min(int64(threads), c.cores)
	if err := c.sem.Acquire(ctx, n); err != nil {
		return nil, err
	}
	return func() { c.sem.Release(n) }, nil
}
