package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/supervisor/agent"
)

// The end-to-end tests run real `corral serve` children.

// readyTimeout bounds a model load plus the first readiness probe.
const readyTimeout = 2 * time.Minute

// jobTimeout bounds one job on the tiny test model.
const jobTimeout = 2 * time.Minute

// corralWorker returns a started, READY worker whose child is corral serve
// with the given model and extra flags. It is stopped at the end of the test.
func corralWorker(t *testing.T, model string, slots int, extra []string, mutate func(*WorkerConfig)) *Worker {
	t.Helper()
	cmd := append(DefaultServeCommand(corralBinary(t)), "-m", model, "--chat-template", "chatml", "-t", "1",
		"-c", strconv.Itoa(2048*max(slots, 1)))
	cfg := WorkerConfig{
		Name: "tiny", Command: append(cmd, extra...), Port: freePort(t), Slots: slots,
		Timeouts: fastTimeouts(), StopTimeout: 5 * time.Second, ToolFormat: agent.ToolFormatJSON,
	}
	return startReady(t, cfg, mutate)
}

// startReady starts a worker of cfg, changed by mutate (nil: as it is),
// and waits until it is READY. It is stopped at the end of the test.
func startReady(t *testing.T, cfg WorkerConfig, mutate func(*WorkerConfig)) *Worker {
	t.Helper()
	if mutate != nil {
		mutate(&cfg)
	}
	w, err := NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	stopWorker(t, w)
	waitState(t, w, WorkerReady, readyTimeout)
	return w
}

// tinyWorker runs the stories260K model (its vocabulary has byte tokens, so
// any text, JSON included, can be tokenized and generated).
func tinyWorker(t *testing.T, slots int, extra []string, mutate func(*WorkerConfig)) *Worker {
	t.Helper()
	return corralWorker(t, testmodel.Path(t, testmodel.Stories260K), slots, extra, mutate)
}

// finish waits for a request to end and reads (releasing) its result.
func finish(t *testing.T, w *Worker, id int64) (RequestStatus, RequestResult) {
	t.Helper()
	st := waitTerminal(t, w, id, jobTimeout)
	res, err := w.Result(id)
	if err != nil {
		t.Fatalf("Result(%d): %v", id, err)
	}
	return st, res
}

// schemaParams asks for greedy output constrained by a JSON schema.
func schemaParams(schema string) map[string]any {
	return map[string]any{
		"temperature": 0,
		"max_tokens":  200,
		"response_format": map[string]any{
			"type":        "json_schema",
			"json_schema": map[string]any{"name": "reply", "schema": json.RawMessage(schema)},
		},
	}
}

// callSchema is the schema of one tool call named name with arguments args.
func callSchema(name, args string) string {
	return fmt.Sprintf(`{"type":"object","properties":{"name":{"const":%q},"arguments":%s},"required":["name","arguments"]}`, name, args)
}

const (
	lookupArgs = `{"type":"object","properties":{"q":{"type":"string","maxLength":8}},"required":["q"]}`
	reportArgs = `{"type":"object","properties":{"confidence":{"type":"integer","minimum":0,"maximum":9}},"required":["confidence"]}`
)

var (
	lookupTool = agent.ToolDef{Type: "function", Function: agent.ToolFunctionDef{Name: "lookup", Description: "Look a word up.",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}}}
	reportTool = agent.ToolDef{Type: "function", Function: agent.ToolFunctionDef{Name: "report", Description: "Report your confidence."}}
)

func TestE2EJobLifecycle(t *testing.T) {
	b := newBlockingRunner()
	w := tinyWorker(t, 2, nil, func(c *WorkerConfig) {
		c.NormalTools, c.ToolRunner, c.MaxToolIterations = []agent.ToolDef{lookupTool}, b, 1
	})
	st := w.WorkerStatus()
	if st.LastReadyAt.IsZero() || st.PID == 0 || st.SlotsTotal != 2 || st.SlotsUsed != 0 {
		t.Fatalf("READY status: %+v", st)
	}
	// Two jobs at once on the two slots: each streams its first reply and
	// then waits in its tool call, so both are in flight together (a tool
	// call is the deterministic way to hold a request; the tiny model's
	// streams are too short to catch both mid-stream).
	for want := int64(1); want <= 2; want++ {
		id, err := w.Submit(Job{Name: fmt.Sprint("both-", want), UserPrompt: "Look up cat.", Params: toolParams})
		if err != nil || id != want {
			t.Fatalf("Submit = %d, %v; want id %d", id, err, want)
		}
	}
	for range 2 {
		select {
		case <-b.entered:
		case <-time.After(jobTimeout):
			t.Fatal("the two jobs never both reached their tool call")
		}
	}
	for id := int64(1); id <= 2; id++ {
		if rs, err := w.Status(id); err != nil || rs.State != RequestToolRunning || rs.DispatchedAt.IsZero() || rs.TokensReceived == 0 {
			t.Fatalf("job %d while both run: %+v %v", id, rs, err)
		}
	}
	if st := w.WorkerStatus(); st.SlotsUsed != 2 || !slices.Equal(st.ActiveRequestIDs, []int64{1, 2}) {
		t.Fatalf("worker while both run: %+v", st)
	}
	if _, err := w.Submit(Job{UserPrompt: "x"}); !errors.Is(err, ErrNoSlotAvailable) {
		t.Fatalf("a third job: %v, want ErrNoSlotAvailable", err)
	}
	close(b.release)
	for id := int64(1); id <= 2; id++ {
		if rs, res := finish(t, w, id); res.State != RequestCompleted || res.FinishReason != FinishToolBudget || rs.ToolItersLeft != 0 {
			t.Fatalf("job %d: %+v / %+v", id, rs, res)
		}
	}
	for want := int64(3); want <= 4; want++ {
		id, err := w.Submit(Job{Name: "story", SystemPrompt: "Tell a story.", UserPrompt: "Once upon a time",
			Params: map[string]any{"temperature": 0, "max_tokens": 12}})
		if err != nil || id != want {
			t.Fatalf("Submit = %d, %v; want id %d", id, err, want)
		}
		rs, res := finish(t, w, id)
		if rs.State != RequestCompleted || rs.TokensReceived == 0 || rs.DispatchedAt.IsZero() || rs.FirstTokenAt.IsZero() {
			t.Fatalf("status: %+v", rs)
		}
		if res.State != RequestCompleted || res.JobName != "story" || res.Text == "" || res.FailReason != "" ||
			(res.FinishReason != FinishStop && res.FinishReason != FinishMaxToken) {
			t.Fatalf("result: %+v", res)
		}
		// Released on read.
		if _, err := w.Result(id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("second Result: %v, want ErrNotFound", err)
		}
		if _, err := w.Status(id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Status after release: %v, want ErrNotFound", err)
		}
	}
	if st := w.WorkerStatus(); st.SlotsUsed != 0 || len(st.ActiveRequestIDs) != 0 {
		t.Fatalf("slots not freed: %+v", st)
	}
	// Stop leaves nothing of the child's process group.
	pid := w.WorkerStatus().PID
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if left := liveGroupMembers(pid); len(left) > 0 {
		t.Fatalf("processes survived Stop: %v", left)
	}
}

// blockingRunner is a ToolRunner that holds every call until released.
type blockingRunner struct {
	entered chan agent.ToolInvocation
	release chan struct{}
}

func newBlockingRunner() *blockingRunner {
	return &blockingRunner{entered: make(chan agent.ToolInvocation, 16), release: make(chan struct{})}
}

func (b *blockingRunner) RunTool(ctx context.Context, call agent.ToolInvocation) (any, error) {
	b.entered <- call
	select {
	case <-b.release:
		return "ok", nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// toolParams forces one call of lookup per reply.
var toolParams = schemaParams(`{"type":"object","properties":{"tool_calls":{"type":"array","prefixItems":[` +
	callSchema("lookup", lookupArgs) + `]}},"required":["tool_calls"]}`)

// heldRequest submits a request that sits in a blocking tool call, holding
// its slot deterministically.
func heldRequest(t *testing.T, w *Worker, b *blockingRunner) int64 {
	t.Helper()
	id, err := w.Submit(Job{Name: "held", UserPrompt: "Look up cat.", Params: toolParams})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.entered:
	case <-time.After(jobTimeout):
		t.Fatalf("request %d never called its tool", id)
	}
	if st, _ := w.Status(id); st.State != RequestToolRunning {
		t.Fatalf("held request state %s, want tool_running", st.State)
	}
	return id
}

func TestE2ENoSlotAvailable(t *testing.T) {
	b := newBlockingRunner()
	w := tinyWorker(t, 1, nil, func(c *WorkerConfig) {
		c.NormalTools, c.ToolRunner, c.MaxToolIterations = []agent.ToolDef{lookupTool}, b, 1
	})
	id := heldRequest(t, w, b)
	if _, err := w.Submit(Job{UserPrompt: "x"}); !errors.Is(err, ErrNoSlotAvailable) {
		t.Fatalf("Submit with all slots busy: %v, want ErrNoSlotAvailable", err)
	}
	if _, err := w.Result(id); !errors.Is(err, ErrNotFinished) {
		t.Fatalf("Result in flight: %v, want ErrNotFinished", err)
	}
	// Cancel frees the slot at once.
	if !w.Cancel(id) {
		t.Fatal("Cancel of a request in flight reported false")
	}
	st, res := finish(t, w, id)
	if st.State != RequestCanceled || res.FinishReason != FinishCanceled || res.FailReason != FailCanceled {
		t.Fatalf("canceled: %+v / %+v", st, res)
	}
	if w.Cancel(id) {
		t.Fatal("Cancel of a released request reported true")
	}
	id2, err := w.Submit(Job{UserPrompt: "Once upon a time", Params: map[string]any{"max_tokens": 4}})
	if err != nil || id2 != id+1 {
		t.Fatalf("Submit after cancel = %d, %v", id2, err)
	}
	if _, res := finish(t, w, id2); res.State != RequestCompleted {
		t.Fatalf("after cancel: %+v", res)
	}
}

func TestE2EToolLoopAndExitTools(t *testing.T) {
	var mu sync.Mutex
	var calls []agent.ToolInvocation
	runner := agent.ToolRunnerFunc(func(_ context.Context, c agent.ToolInvocation) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, c)
		return map[string]any{"definition": "a small animal", "n": len(calls)}, nil
	})
	w := tinyWorker(t, 1, []string{"--log-requests"}, func(c *WorkerConfig) {
		c.NormalTools, c.ExitTools, c.ToolRunner, c.MaxToolIterations = []agent.ToolDef{lookupTool}, []agent.ToolDef{reportTool}, runner, 2
	})

	t.Run("loop until the budget is spent", func(t *testing.T) {
		// Every reply calls lookup and report: two tool rounds run, the
		// third reply finds the budget spent.
		params := schemaParams(`{"type":"object","properties":{"tool_calls":{"type":"array","prefixItems":[` +
			callSchema("lookup", lookupArgs) + `,` + callSchema("report", reportArgs) + `]}},"required":["tool_calls"]}`)
		id, err := w.Submit(Job{Name: "tools", UserPrompt: "What is a cat?", Params: params})
		if err != nil {
			t.Fatal(err)
		}
		st, res := finish(t, w, id)
		if res.State != RequestCompleted || res.FinishReason != FinishToolBudget || st.ToolItersLeft != 0 {
			t.Fatalf("status %+v result %+v", st, res)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(calls) != 2 {
			t.Fatalf("runner called %d times, want 2: %+v", len(calls), calls)
		}
		for _, c := range calls {
			if _, ok := c.Arguments["q"].(string); c.Name != "lookup" || !ok || c.RequestID != id || c.JobName != "tools" {
				t.Errorf("tool call %+v", c)
			}
		}
		// One signal per reply, recorded on status and result alike.
		if len(res.Signals) != 3 || len(st.Signals) != 3 {
			t.Fatalf("signals: result %+v status %+v, want 3", res.Signals, st.Signals)
		}
		for _, s := range res.Signals {
			if _, ok := s.Arguments["confidence"].(float64); s.ToolName != "report" || !ok || s.EmittedAt.IsZero() {
				t.Errorf("signal %+v", s)
			}
		}
		// The child saw three requests: the BIOS counted the budget down
		// and the continuations carried the tool results.
		logs := strings.Join(w.DebugInfo().RecentLogs, "\n")
		for _, want := range []string{"at most 2 more tool rounds", "at most 1 more tool rounds", "no tool rounds are left", `tool_results`, `a small animal`} {
			if !strings.Contains(logs, want) {
				t.Errorf("child never received %q", want)
			}
		}
	})

	t.Run("exit tool does not change control flow", func(t *testing.T) {
		params := schemaParams(`{"type":"object","properties":{"tool_calls":{"type":"array","prefixItems":[` +
			callSchema("report", reportArgs) + `]},"content":{"type":"string","minLength":1,"maxLength":20}},"required":["tool_calls","content"]}`)
		id, err := w.Submit(Job{Name: "signal", UserPrompt: "Say hi.", Params: params})
		if err != nil {
			t.Fatal(err)
		}
		_, res := finish(t, w, id)
		if res.State != RequestCompleted || res.FinishReason != FinishStop || res.Text == "" {
			t.Fatalf("result %+v", res)
		}
		if len(res.Signals) != 1 || res.Signals[0].ToolName != "report" {
			t.Fatalf("signals %+v", res.Signals)
		}
	})
}

// TestE2ENativeToolLoop runs the native tool loop against corral serve:
// the tools go in the request's "tools", tool_choice makes the model
// call, and corral's parsed tool_calls drive the rounds.
func TestE2ENativeToolLoop(t *testing.T) {
	var mu sync.Mutex
	var calls []agent.ToolInvocation
	runner := agent.ToolRunnerFunc(func(_ context.Context, c agent.ToolInvocation) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, c)
		return map[string]any{"definition": "a small animal"}, nil
	})
	schema := func(s string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	lookup := agent.ToolDef{Type: "function", Function: agent.ToolFunctionDef{Name: "lookup", Description: "Look a word up.",
		Parameters: schema(lookupArgs)}}
	report := agent.ToolDef{Type: "function", Function: agent.ToolFunctionDef{Name: "report", Description: "Report your confidence.",
		Parameters: schema(reportArgs)}}
	w := tinyWorker(t, 1, []string{"--log-requests"}, func(c *WorkerConfig) {
		c.ToolFormat = agent.ToolFormatNative
		c.NormalTools, c.ExitTools, c.ToolRunner, c.MaxToolIterations = []agent.ToolDef{lookup}, []agent.ToolDef{report}, runner, 2
	})
	force := func(name string) map[string]any {
		return map[string]any{"temperature": 0, "max_tokens": 120,
			"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": name}}}
	}

	t.Run("normal tool until the budget is spent", func(t *testing.T) {
		id, err := w.Submit(Job{Name: "native", UserPrompt: "What is a cat?", Params: force("lookup")})
		if err != nil {
			t.Fatal(err)
		}
		st, res := finish(t, w, id)
		if res.State != RequestCompleted || res.FinishReason != FinishToolBudget || st.ToolItersLeft != 0 {
			t.Fatalf("status %+v result %+v", st, res)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(calls) != 2 {
			t.Fatalf("runner called %d times, want 2: %+v", len(calls), calls)
		}
		for _, c := range calls {
			// maxLength counts characters, not bytes.
			if q, ok := c.Arguments["q"].(string); c.Name != "lookup" || !ok || utf8.RuneCountInString(q) > 8 || c.RequestID != id {
				t.Errorf("tool call %+v", c)
			}
		}
		// The continuations carried the calls and their results as
		// messages, which corral rendered.
		logs := strings.Join(w.DebugInfo().RecentLogs, "\n")
		for _, want := range []string{`tool_call_id`, `a small animal`, `tool_calls`} {
			if !strings.Contains(logs, want) {
				t.Errorf("child never received %q", want)
			}
		}
	})

	t.Run("exit tool", func(t *testing.T) {
		id, err := w.Submit(Job{Name: "signal", UserPrompt: "Say hi.", Params: force("report")})
		if err != nil {
			t.Fatal(err)
		}
		_, res := finish(t, w, id)
		// The answer was the call ("tool_calls"), which ends the turn.
		if res.State != RequestCompleted || res.FinishReason != FinishStop {
			t.Fatalf("result %+v", res)
		}
		if len(res.Signals) != 1 || res.Signals[0].ToolName != "report" {
			t.Fatalf("signals %+v", res.Signals)
		}
		if c, ok := res.Signals[0].Arguments["confidence"].(float64); !ok || c < 0 || c > 9 {
			t.Fatalf("signal arguments %+v", res.Signals[0].Arguments)
		}
	})
}

func TestE2EToolFailures(t *testing.T) {
	runner := agent.ToolRunnerFunc(func(context.Context, agent.ToolInvocation) (any, error) {
		return nil, errors.New("dictionary offline")
	})
	w := tinyWorker(t, 1, nil, func(c *WorkerConfig) {
		c.NormalTools, c.ToolRunner = []agent.ToolDef{lookupTool}, runner
	})
	id, err := w.Submit(Job{UserPrompt: "What is a cat?", Params: toolParams})
	if err != nil {
		t.Fatal(err)
	}
	if _, res := finish(t, w, id); res.FailReason != FailToolExecution || !strings.Contains(res.FailDetail, "dictionary offline") || res.FinishReason != FinishFailed {
		t.Fatalf("runner error: %+v", res)
	}
	// A call of a tool that does not exist, next to one that does, is real
	// model output that the strict parser refuses. (A reply calling only
	// unknown tools is content: see TestE2EJSONAnswerIsContent.)
	bad := schemaParams(`{"type":"object","properties":{"tool_calls":{"type":"array","prefixItems":[` +
		callSchema("lookup", lookupArgs) + `,` + callSchema("format_disk", lookupArgs) + `],"minItems":2}},"required":["tool_calls"]}`)
	id, err = w.Submit(Job{UserPrompt: "What is a cat?", Params: bad})
	if err != nil {
		t.Fatal(err)
	}
	if _, res := finish(t, w, id); res.FailReason != FailToolParse || !strings.Contains(res.FailDetail, "format_disk") {
		t.Fatalf("unknown tool: %+v", res)
	}
	// Only the requests failed; the worker never restarted.
	if st := w.WorkerStatus(); st.State != WorkerReady || st.RestartCount != 0 {
		t.Fatalf("worker after tool failures: %+v", st)
	}
}

func TestE2ERepeatedLine(t *testing.T) {
	// --grammar-whitespace free: the grammar allows a line break between
	// JSON's tokens (compact JSON, the default, allows none).
	w := tinyWorker(t, 1, []string{"--grammar-whitespace", "free"}, func(c *WorkerConfig) {
		c.RepeatedLine = agent.RepeatedLineGuard{MinChars: 16, Repeats: 4}
	})
	// An array of one long constant string, many times: the grammar allows
	// a line break between tokens and the logit bias makes the model take
	// it, so the same line comes again and again.
	nl := newlineToken(t, w)
	params := schemaParams(`{"type":"array","items":{"const":"the cat sat on the mat again"},"minItems":40}`)
	params["logit_bias"] = map[string]any{fmt.Sprint(nl): 100}
	params["max_tokens"] = 400
	id, err := w.Submit(Job{UserPrompt: "Repeat.", Params: params})
	if err != nil {
		t.Fatal(err)
	}
	st, res := finish(t, w, id)
	if res.State != RequestFailed || res.FailReason != FailRepeatedLine || !strings.Contains(res.FailDetail, "the cat sat on the mat again") {
		t.Fatalf("status %+v result %+v", st, res)
	}
	if strings.Count(res.Text, "the cat sat on the mat again") < 4 {
		t.Fatalf("partial text has fewer than 4 repeats: %q", res.Text)
	}
	if st := w.WorkerStatus(); st.State != WorkerReady || st.RestartCount != 0 || st.SlotsUsed != 0 {
		t.Fatalf("worker after loop kill: %+v", st)
	}
}

// newlineToken asks the child for the token id of "\n", with the
// worker's key.
func newlineToken(t *testing.T, w *Worker) int {
	t.Helper()
	var out struct {
		Tokens []int `json:"tokens"`
	}
	postJSON(t, w.client, w.baseURL+"/tokenize", map[string]any{"content": "\n"}, &out)
	if len(out.Tokens) == 0 {
		t.Fatal(`tokenize "\n": no tokens`)
	}
	return out.Tokens[len(out.Tokens)-1]
}

func TestE2EParamsPassThrough(t *testing.T) {
	w := tinyWorker(t, 1, []string{"--log-requests", "--log-format", "json"}, nil)
	id, err := w.Submit(Job{UserPrompt: "Once upon a time", Params: map[string]any{
		"aaa_unknown_knob": map[string]any{"nested": []int{7, 8}},
		"temperature":      0,
		"max_tokens":       3,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, res := finish(t, w, id); res.State != RequestCompleted {
		t.Fatalf("result %+v", res)
	}
	var line string
	for _, l := range w.DebugInfo().RecentLogs {
		if strings.Contains(l, "request body") && strings.Contains(l, "aaa_unknown_knob") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no logged request body with the unknown key: %q", w.DebugInfo().RecentLogs)
	}
	for _, want := range []string{"nested", "[7,8]", "max_tokens", "stream"} {
		if !strings.Contains(line, want) {
			t.Errorf("logged body lacks %q: %s", want, line)
		}
	}
	var rec struct {
		Msg, ID string
		Body    map[string]any
	}
	_, obj, _ := strings.Cut(line, "{") // after the ring's "stderr: "
	if err := json.Unmarshal([]byte("{"+obj), &rec); err != nil || rec.Msg != "request body" || rec.ID == "" || rec.Body["aaa_unknown_knob"] == nil {
		t.Errorf("--log-format json: body line %s: %v", line, err)
	}
}

func TestE2EKillNineIsServerDied(t *testing.T) {
	b := newBlockingRunner()
	w := tinyWorker(t, 2, nil, func(c *WorkerConfig) {
		c.NormalTools, c.ToolRunner = []agent.ToolDef{lookupTool}, b
	})
	old := w.WorkerStatus().PID
	id := heldRequest(t, w, b)
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st := waitTerminal(t, w, id, jobTimeout)
	if st.State != RequestFailed || st.FailReason != FailServerDied || !strings.Contains(st.FailDetail, "killed") {
		t.Fatalf("in-flight request after kill -9: %+v", st)
	}
	ws := waitState(t, w, WorkerReady, readyTimeout)
	if ws.PID == old || ws.RestartCount != 1 || !strings.HasPrefix(ws.LastError, "server_died") {
		t.Fatalf("after restart: %+v", ws)
	}
	if alive(old) || len(liveGroupMembers(old)) > 0 {
		t.Fatalf("old child %d or its group survived", old)
	}
	dbg := w.DebugInfo()
	if len(dbg.RecentRestartReasons) != 1 || dbg.RecentRestartReasons[0].Reason != FailServerDied {
		t.Fatalf("restart records: %+v", dbg.RecentRestartReasons)
	}
	// The new child serves.
	id, err := w.Submit(Job{UserPrompt: "Once upon a time", Params: map[string]any{"max_tokens": 4}})
	if err != nil {
		t.Fatal(err)
	}
	if _, res := finish(t, w, id); res.State != RequestCompleted {
		t.Fatalf("after restart: %+v", res)
	}
	sup := &Supervisor{workers: []*Worker{w}}
	checkMetrics(t, scrape(t, sup.metricsHandler()), map[string]float64{
		`corral_supervisor_worker_restarts_total{worker="tiny",reason="server_died"}`: 1,
		`corral_supervisor_jobs_failed_total{worker="tiny",reason="server_died"}`:     1,
		`corral_supervisor_jobs_finished_total{worker="tiny",state="failed"}`:         1,
		`corral_supervisor_jobs_finished_total{worker="tiny",state="completed"}`:      1,
		`corral_supervisor_jobs_submitted_total{worker="tiny"}`:                       2,
		`corral_supervisor_workers{state="ready"}`:                                    1,
	})
}

// jsonAnswerParams asks for a JSON answer that is no tool call.
var jsonAnswerParams = schemaParams(`{"type":"object","properties":{"answer":{"type":"string","minLength":1,"maxLength":12}},"required":["answer"]}`)

// TestE2EJSONAnswerIsContent runs tool_format json with response_format
// JSON answers: only a reply that calls a configured tool is a tool call;
// every other JSON object is the answer, whether tools are configured or
// not.
func TestE2EJSONAnswerIsContent(t *testing.T) {
	// answer submits a job and checks that it completed with a JSON object
	// as its text, holding key.
	answer := func(t *testing.T, w *Worker, params map[string]any, key string) {
		t.Helper()
		id, err := w.Submit(Job{UserPrompt: "What is a cat?", Params: params})
		if err != nil {
			t.Fatal(err)
		}
		st, res := finish(t, w, id)
		if res.State != RequestCompleted || res.FailReason != "" || res.FinishReason != FinishStop || len(res.Signals) != 0 || st.ToolItersLeft != 8 {
			t.Fatalf("status %+v result %+v", st, res)
		}
		var obj map[string]any
		if err := json.Unmarshal([]byte(res.Text), &obj); err != nil || obj[key] == nil {
			t.Fatalf("text %q is not the JSON answer with %q: %v", res.Text, key, err)
		}
	}
	// A call in the convention's shape, of a tool no worker here has.
	unknownCall := schemaParams(`{"type":"object","properties":{"tool_calls":{"type":"array","prefixItems":[` +
		callSchema("format_disk", lookupArgs) + `],"minItems":1}},"required":["tool_calls"]}`)

	t.Run("no tools configured", func(t *testing.T) {
		w := tinyWorker(t, 1, nil, nil)
		answer(t, w, jsonAnswerParams, "answer")
		// Even the convention's shape naming a tool is content when no
		// tool is configured.
		answer(t, w, toolParams, "tool_calls")
	})
	t.Run("tools configured, none named", func(t *testing.T) {
		runner := agent.ToolRunnerFunc(func(_ context.Context, c agent.ToolInvocation) (any, error) {
			t.Errorf("tool %q ran for a JSON answer", c.Name)
			return nil, errors.New("unexpected call")
		})
		w := tinyWorker(t, 1, nil, func(c *WorkerConfig) {
			c.NormalTools, c.ExitTools, c.ToolRunner = []agent.ToolDef{lookupTool}, []agent.ToolDef{reportTool}, runner
		})
		answer(t, w, jsonAnswerParams, "answer")
		answer(t, w, unknownCall, "tool_calls")
	})
}
