package serving

import "time"

// SetClock makes f the clock of the streams' keep-alive until the
// returned function restores time.Now. Tests that set it do not run in
// parallel with other streams.
func SetClock(f func() time.Time) (restore func()) {
	now = f
	return func() { now = time.Now }
}
