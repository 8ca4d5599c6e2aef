package supervisor

import (
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-llm/corral/gguf"
)

// The long-prefill tests use a synthetic model big enough that a long
// prompt takes seconds to prefill on one thread.

var (
	synthOnce sync.Once
	synthPath string
	synthErr  error
)

// prefillShape is wide and deep enough for a slow prefill, with a small
// vocabulary so that every character is about one token.
var prefillShape = gguf.Shape{Embd: 256, Layers: 4, Heads: 4, HeadsKV: 4, FF: 768, Vocab: 512, Ctx: 16384, Type: "q8_0"}

func synthModel(t *testing.T) string {
	t.Helper()
	synthOnce.Do(func() {
		synthPath = filepath.Join(binDir, "prefill.gguf")
		synthErr = gguf.WriteSynthetic(synthPath, prefillShape, 1)
	})
	if synthErr != nil {
		t.Fatalf("write synthetic model: %v", synthErr)
	}
	return synthPath
}

// longPrompt is a prompt of about 12,000 tokens on the synthetic model:
// TestE2ELongPrefillIsNotKilled needs a prefill of more than 2 s, and at
// 4,000 tokens it took 1.7 s on one thread of a 2-core AVX2 machine, at
// 6,800 tokens 1.8 s on an AVX-512 one (llama.cpp b10573).
func longPrompt() string {
	return strings.Repeat("lorem ipsum dolor sit amet ", 450)
}

// prefillWorker runs the synthetic model on one thread with short
// liveness timeouts.
func prefillWorker(t *testing.T, liveness time.Duration) *Worker {
	t.Helper()
	return corralWorker(t, synthModel(t), 1, []string{"-c", strconv.Itoa(prefillShape.Ctx)}, func(c *WorkerConfig) {
		c.Timeouts.PrefillLiveness = liveness
		c.Timeouts.IdleStream = liveness / 4
		c.Timeouts.ProbeInterval = 50 * time.Millisecond
	})
}

func TestE2ELongPrefillIsNotKilled(t *testing.T) {
	const liveness = time.Second
	w := prefillWorker(t, liveness)
	id, err := w.Submit(Job{UserPrompt: longPrompt(), Params: map[string]any{"max_tokens": 2, "temperature": 0}})
	if err != nil {
		t.Fatal(err)
	}
	st, res := finish(t, w, id)
	if res.State != RequestCompleted {
		t.Fatalf("long prefill: %+v / %+v", st, res)
	}
	// The scenario must really have been exercised: the child sent no
	// token for longer than both timeouts, and only its CPU time showed it
	// was alive.
	ttft := st.FirstTokenAt.Sub(st.DispatchedAt)
	t.Logf("prefill took %s", ttft)
	if ttft < 2*liveness {
		t.Fatalf("prefill took %s, not long enough to exercise a %s liveness timeout; grow the prompt", ttft, liveness)
	}
	if ws := w.WorkerStatus(); ws.RestartCount != 0 {
		t.Fatalf("worker restarted during a live prefill: %+v", ws)
	}
}

func TestE2EStoppedChildIsStalled(t *testing.T) {
	w := prefillWorker(t, time.Second)
	old := w.WorkerStatus().PID
	id, err := w.Submit(Job{UserPrompt: longPrompt(), Params: map[string]any{"max_tokens": 2}})
	if err != nil {
		t.Fatal(err)
	}
	// Once the request is on its way, freeze the child mid-prefill (the
	// prompt takes seconds to evaluate; corral sends headers with the first
	// token, so no byte has arrived yet and only CPU time shows liveness).
	waitFor(t, jobTimeout, "the dispatch", func() bool {
		st, err := w.Status(id)
		return err == nil && !st.DispatchedAt.IsZero()
	})
	if err := syscall.Kill(old, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	st := waitTerminal(t, w, id, jobTimeout)
	if st.State != RequestFailed || st.FailReason != FailStallTimeout {
		t.Fatalf("request in flight on a stopped child: %+v", st)
	}
	ws := waitState(t, w, WorkerReady, readyTimeout)
	if ws.PID == old || ws.RestartCount != 1 || !strings.HasPrefix(ws.LastError, string(FailStallTimeout)) {
		t.Fatalf("after the stall: %+v", ws)
	}
	if alive(old) {
		t.Fatalf("stopped child %d survived the restart", old)
	}
}
