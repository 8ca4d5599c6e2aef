package bench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/corral-llm/corral/wire"
)

func TestParseEvent(t *testing.T) {
	chat := &Client{API: APIChat}
	llama := &Client{API: APILlamaCpp}
	for _, tc := range []struct {
		c       *Client
		stream  string
		content bool
		done    bool
		usage   *wire.Usage
		errMsg  string
	}{
		{chat, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}", false, false, nil, ""},
		{chat, ": keep-alive comment\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}", true, false, nil, ""},
		{chat, "data:{\"choices\":[{\"delta\":{\"reasoning_content\":\"hmm\"}}]}", true, false, nil, ""},
		{&Client{API: APICompletions}, "data: {\"choices\":[{\"text\":\" there\"}]}", true, false, nil, ""},
		{chat, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":5}}}",
			false, false, &wire.Usage{PromptTokens: 7, CompletionTokens: 3, PromptTokensDetails: wire.PromptTokensDetails{CachedTokens: 5}}, ""},
		{chat, "data: [DONE]", false, true, nil, ""},
		{chat, "data: {\"error\":{\"message\":\"context full\",\"type\":\"server_error\"}}", false, false, nil, "context full"},
		{chat, "data: {\"error\":\"plain\"}", false, false, nil, "\"plain\""},
		{llama, "data: {\"content\":\"Once\",\"stop\":false}", true, false, nil, ""},
		{llama, "data: {\"content\":\"\",\"stop\":true,\"tokens_predicted\":9,\"tokens_evaluated\":4}", false, true,
			&wire.Usage{PromptTokens: 4, CompletionTokens: 9}, ""},
		{llama, "data: {\"content\":\"\",\"stop\":true}", false, true, nil, ""},
	} {
		sse, err := wire.NewReader(strings.NewReader(tc.stream + "\n\n")).Next()
		if err != nil {
			t.Fatalf("%q: %v", tc.stream, err)
		}
		ev, err := tc.c.parseEvent(sse)
		if err != nil {
			t.Errorf("%s %q: %v", tc.c.API, tc.stream, err)
			continue
		}
		if ev.content != tc.content || ev.done != tc.done || ev.errMsg != tc.errMsg ||
			fmt.Sprint(ev.usage) != fmt.Sprint(tc.usage) {
			t.Errorf("%s %q: got %+v (usage %v), want content %v done %v usage %v error %q",
				tc.c.API, tc.stream, ev, ev.usage, tc.content, tc.done, tc.usage, tc.errMsg)
		}
	}
	if _, err := chat.parseEvent(wire.Event{Data: []byte("{not json")}); err == nil {
		t.Error("malformed chunk parsed without error")
	}
}

func TestRequestBody(t *testing.T) {
	p := Prompt{Messages: []wire.Message{{Role: "system", Content: "S"}, {Role: "user", Content: "U"}}}
	for _, tc := range []struct {
		c        Client
		path     string
		contains []string
	}{
		{Client{API: APIChat, Model: "m", MaxTokens: 16, IgnoreEOS: true}, "/v1/chat/completions",
			[]string{`"messages":[{"role":"system","content":"S"},{"role":"user","content":"U"}]`, `"max_tokens":16`,
				`"ignore_eos":true`, `"include_usage":true`, `"model":"m"`, `"stream":true`}},
		{Client{API: APICompletions, MaxTokens: 8}, "/v1/completions",
			[]string{`"prompt":"S\nU"`, `"max_tokens":8`, `"include_usage":true`}},
		{Client{API: APILlamaCpp, MaxTokens: 4, Priority: 2}, "/completion",
			[]string{`"prompt":"S\nU"`, `"n_predict":4`, `"cache_prompt":true`, `"priority":2`}},
	} {
		path, body, err := tc.c.requestBody(p)
		if err != nil {
			t.Fatal(err)
		}
		if path != tc.path {
			t.Errorf("%s: path %q, want %q", tc.c.API, path, tc.path)
		}
		for _, s := range tc.contains {
			if !bytes.Contains(body, []byte(s)) {
				t.Errorf("%s: body %s lacks %s", tc.c.API, body, s)
			}
		}
	}
	if _, err := ParseAPI("grpc"); err == nil {
		t.Error("ParseAPI accepted grpc")
	}
	c := Client{BaseURL: "http://h:1/v1/"}
	if got := c.url("/v1/models"); got != "http://h:1/v1/models" {
		t.Errorf("url with /v1 base = %q", got)
	}
}

func TestClassify(t *testing.T) {
	bg := context.Background()
	refused := &net.OpError{Op: "read", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	dial := &net.OpError{Op: "dial", Err: fmt.Errorf("no route")}
	deadline, cancel := context.WithTimeout(bg, 0)
	defer cancel()
	aborted, abort := context.WithCancel(bg)
	abort()
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want string
	}{
		{bg, refused, ErrKindConnect},
		{bg, dial, ErrKindConnect},
		{bg, fmt.Errorf("read: %w", syscall.ECONNRESET), ErrKindDisconnect},
		{deadline, context.DeadlineExceeded, ErrKindTimeout},
		{aborted, context.Canceled, ErrKindAborted},
	} {
		if got := classify(tc.ctx, tc.err); got != tc.want {
			t.Errorf("classify(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
