package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/server"
	"github.com/corral-llm/corral/voice"
	"github.com/corral-llm/corral/wire"
)

// pacedEvent is a paced chat stream's event as a client sees it.
type pacedEvent struct {
	chatCompletion
	Chunk *wire.ChunkInfo `json:"chunk"`
}

// pacedChat opens a paced chat stream and reads it, calling onChunk with
// each chunk event (its id, index, text and whether it is held); it
// returns the text and the finish reason, and the paced usage.
func pacedChat(t *testing.T, ts *e2etest.Server, body map[string]any, onChunk func(id string, index int, text string, held bool)) (string, string, map[string]any) {
	t.Helper()
	resp := ts.OpenStream(t, context.Background(), "/v1/chat/completions", body)
	defer resp.Body.Close()
	events := newSSEEvents(t, resp.Body)
	var text strings.Builder
	finish := ""
	var usage map[string]any
	for n := 0; ; n++ {
		sse := events.next()
		if sse.IsComment {
			continue // a keep-alive ping
		}
		if sse.Done {
			return text.String(), finish, usage
		}
		data := string(sse.Data)
		var ev pacedEvent
		unmarshal(t, data, &ev)
		var raw struct {
			Usage map[string]any `json:"usage"`
		}
		unmarshal(t, data, &raw)
		if raw.Usage != nil {
			usage = raw.Usage
		}
		if len(ev.Choices) == 0 {
			continue
		}
		c := ev.Choices[0]
		if c.FinishReason != nil {
			finish = *c.FinishReason
		}
		if c.Delta == nil || c.Delta.Content == nil || *c.Delta.Content == "" {
			continue
		}
		if ev.Chunk == nil {
			t.Fatalf("paced text event without chunk: %s", data)
		}
		text.WriteString(*c.Delta.Content)
		onChunk(ev.ID, ev.Chunk.Index, *c.Delta.Content, ev.Chunk.Held)
	}
}

// TestPacedChatOverHTTP: "chunking" on a streamed chat completion sends
// one event per chunk and pauses after each until .../continue; the text
// is the unpaced text; .../cancel with spoken_chars interrupts.
func TestPacedChatOverHTTP(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 2})
	body := map[string]any{
		"messages":    []map[string]string{{"role": "user", "content": "Once upon a time"}},
		"temperature": 0, "max_tokens": 80, "stream": true, "chunking": map[string]any{"first_min_tokens": 4},
		"stream_options": map[string]any{"include_usage": true},
	}
	chunks := 0
	text, finish, usage := pacedChat(t, ts, body, func(id string, index int, _ string, held bool) {
		if index != chunks {
			t.Fatalf("chunk index %d, want %d", index, chunks)
		}
		chunks++
		if held {
			resp, b := ts.Post(t, "/v1/chat/completions/"+id+"/continue", nil)
			if resp.StatusCode != 200 || !strings.Contains(string(b), `"index":`+strconv.Itoa(index)) {
				t.Fatalf("continue of chunk %d: %d %s", index, resp.StatusCode, b)
			}
		}
	})
	paced, _ := usage["paced"].(map[string]any)
	if chunks < 2 || finish == "" || paced == nil || int(paced["chunks"].(float64)) != chunks {
		t.Fatalf("%d chunks, finish %q, usage %v", chunks, finish, usage)
	}
	plain := map[string]any{"messages": body["messages"], "temperature": 0, "max_tokens": 80}
	var whole chatCompletion
	if resp, b := ts.Post(t, "/v1/chat/completions", plain); resp.StatusCode != 200 {
		t.Fatalf("unpaced: %d %s", resp.StatusCode, b)
	} else {
		unmarshal(t, string(b), &whole)
	}
	if want := whole.Choices[0].Message.Content; text != want {
		t.Fatalf("paced %q\nunpaced %q", text, want)
	}

	// An interrupt after the first chunk and two characters of the second.
	heard := 0
	_, finish, usage = pacedChat(t, ts, body, func(id string, index int, text string, held bool) {
		if index == 0 {
			heard = utf8.RuneCountInString(text)
			ts.Post(t, "/v1/chat/completions/"+id+"/continue", map[string]any{"index": 0})
			return
		}
		if index == 1 {
			resp, b := ts.Post(t, "/v1/chat/completions/"+id+"/cancel", map[string]any{"spoken_chars": heard + 2})
			if resp.StatusCode != 200 {
				t.Fatalf("cancel: %d %s", resp.StatusCode, b)
			}
		}
	})
	if finish != string(engine.FinishInterrupted) {
		t.Fatalf("finish %q after cancel, usage %v", finish, usage)
	}
	e2etest.WaitFor(t, "the slots to be idle", func() bool { return busySlots(t, ts) == 0 })
}

// TestPacedChatErrors: bad pacing requests get clear errors.
func TestPacedChatErrors(t *testing.T) {
	ts := startServer(t, engine.Config{Parallel: 1})
	msgs := []map[string]string{{"role": "user", "content": "Hi"}}
	for _, tt := range []struct {
		path   string
		body   any
		status int
		want   string
	}{
		{"/v1/chat/completions", map[string]any{"messages": msgs, "chunking": map[string]any{}}, 400, "stream"},
		{"/v1/chat/completions", map[string]any{"messages": msgs, "stream": true, "chunking": map[string]any{"max_chars": 0}}, 400, "max_chars"},
		{"/v1/chat/completions", map[string]any{"messages": msgs, "stream": true, "chunking": map[string]any{"first_min_tokens": 9, "first_max_tokens": 3}}, 400, "first_min_tokens"},
		{"/v1/chat/completions", map[string]any{"messages": msgs, "stream": true, "chunking": map[string]any{"pause_timeout": -1}}, 400, "pause_timeout"},
		{"/v1/chat/completions", map[string]any{"messages": msgs, "stream": true, "chunking": "yes"}, 400, ""},
		{"/v1/chat/completions/chatcmpl-nope/continue", nil, 404, "no paced response"},
		{"/v1/chat/completions/chatcmpl-nope/cancel", map[string]any{"spoken_chars": 3}, 404, "no paced response"},
		{"/v1/chat/completions/chatcmpl-nope/cancel", map[string]any{"spoken_chars": -3}, 400, "spoken_chars"},
		{"/v1/chat/completions/chatcmpl-nope/continue", map[string]any{"index": "x"}, 400, ""},
	} {
		resp, b := ts.Post(t, tt.path, tt.body)
		if resp.StatusCode != tt.status || !strings.Contains(string(b), tt.want) || !strings.Contains(string(b), `"error"`) {
			t.Errorf("POST %s %v: %d %s, want %d mentioning %q", tt.path, tt.body, resp.StatusCode, b, tt.status, tt.want)
		}
	}
}

// referenceBoundary is the reference voice agent's sentence test: text
// (right-trimmed) ending with . ! or ? and any closing quotes.
var referenceBoundary = regexp.MustCompile(`[.!?]["')]*$`)

// TestReferenceClientPattern runs the reference voice agent's own way of
// pacing against corral: POST /completion with id_slot (two alternating
// slots) and cache_prompt, the connection closed at each sentence
// boundary, prompt + text so far re-sent for the next sentence; with
// connection pooling on and off. No request may fail, no slot may stay
// busy, and every cycle must find at least the story prompt cached.
// $CORRAL_REFERENCE_CYCLES sets the number of cycles (default 200).
func TestReferenceClientPattern(t *testing.T) {
	cycles := 200
	if v := os.Getenv("CORRAL_REFERENCE_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 4 {
			t.Fatalf("$CORRAL_REFERENCE_CYCLES=%q", v)
		}
		cycles = n
	}
	ts := startServer(t, engine.Config{Parallel: 2})
	const story = "Lily and Tom went to the park.\n"
	var tok struct{ Tokens []int32 }
	if resp, b := ts.Post(t, "/tokenize", map[string]any{"content": story, "add_special": true}); resp.StatusCode != 200 {
		t.Fatalf("/tokenize: %d %s", resp.StatusCode, b)
	} else {
		unmarshal(t, string(b), &tok)
	}
	prompt := tok.Tokens
	pooled := ts.Client
	unpooled := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	text := ""
	stories := 0
	var cachedSum, promptSum float64
	for i := range cycles {
		client := pooled
		if i%2 == 1 {
			client = unpooled
		}
		before := ts.Metrics(t)
		chunk, ended := referenceCycle(t, client, ts.URL, story+text, i%2)
		text += chunk
		if ended || len(text) > 600 {
			text, stories = "", stories+1
		}
		e2etest.WaitFor(t, fmt.Sprintf("cycle %d to finish", i), func() bool {
			return ts.Metrics(t)["corral_requests_total"] >= before["corral_requests_total"]+1
		})
		after := ts.Metrics(t)
		cached := after["corral_prompt_tokens_cached_total"] - before["corral_prompt_tokens_cached_total"]
		cachedSum += cached
		promptSum += after["corral_prompt_tokens_total"] - before["corral_prompt_tokens_total"]
		if i >= 2 && cached < float64(len(prompt)-1) {
			t.Fatalf("cycle %d found %v tokens cached, want at least the story prompt's %d", i, cached, len(prompt)-1)
		}
	}
	e2etest.WaitFor(t, "the slots to be idle", func() bool { return busySlots(t, ts) == 0 })
	t.Logf("%d cycles, %d stories; %.0f of %.0f prompt tokens found cached (%.1f%%)", cycles, stories, cachedSum, promptSum, 100*cachedSum/promptSum)
}

// referenceCycle is one sentence the reference way: it streams
// /completion until the text ends a sentence, then closes the
// connection. ended reports that the server finished the text first.
func referenceCycle(t *testing.T, client *http.Client, url, prompt string, slot int) (chunk string, ended bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // closes the connection mid-stream
	b := fmt.Sprintf(`{"prompt":%q,"id_slot":%d,"cache_prompt":true,"stream":true,"n_predict":64,"temperature":0}`, prompt, slot)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/completion", strings.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST /completion: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST /completion: %d", resp.StatusCode)
	}
	events := newSSEEvents(t, resp.Body)
	var text strings.Builder
	for {
		sse := events.next()
		if sse.IsComment {
			continue
		}
		data := string(sse.Data)
		var ev llamaCompletion
		unmarshal(t, data, &ev)
		text.WriteString(ev.Content)
		if ev.Stop {
			return text.String(), true
		}
		if referenceBoundary.MatchString(strings.TrimRight(text.String(), " \n\t")) {
			return text.String(), false
		}
	}
}

// TestVoiceThroughTheServer: /v1/voice through the server's routes and
// middleware (the socket hijacks a wrapped ResponseWriter); a server
// shut down with a conversation paused ends it within the grace period.
func TestVoiceThroughTheServer(t *testing.T) {
	ts := e2etest.Start(t, testmodel.TinyStories656K, e2etest.Options{Engine: engine.Config{Parallel: 1},
		Server: server.Config{ShutdownTimeout: 200 * time.Millisecond}})
	ctx := context.Background()
	c, err := voice.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/v1/voice", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	turn := map[string]any{"messages": []wire.Message{{Role: "user", Content: "Tell me a story."}}, "max_tokens": 100, "temperature": 0}
	if err := c.Create(ctx, turn); err != nil {
		t.Fatal(err)
	}
	var events []string
	for len(events) < 2 {
		ev, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev.Type)
	}
	if events[0] != voice.TypeCreated || events[1] != voice.TypeChunk {
		t.Fatalf("events %v", events)
	}
	e2etest.WaitFor(t, "the answer to pause", func() bool { return ts.Metrics(t)["corral_slots_paused"] == 1 })
	if err := ts.Stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := c.Next(ctx); err == nil {
		t.Fatal("the socket is still open after the shutdown")
	}
}
