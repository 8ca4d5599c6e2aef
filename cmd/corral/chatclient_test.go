package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// TestWaitReady waits for a loading server, gives up on a draining one
// and reports a refused connection as such.
func TestWaitReady(t *testing.T) {
	var mu sync.Mutex
	status := []string{"loading", "loading", "ok"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		s := status[0]
		if len(status) > 1 {
			status = status[1:]
		}
		mu.Unlock()
		if s != "ok" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintf(w, `{"status":%q}`, s)
	}))
	defer srv.Close()
	client := &http.Client{}
	defer client.CloseIdleConnections()
	var errOut bytes.Buffer
	c := &chatClient{http: client, errOut: &errOut}
	ctx := context.Background()
	if err := c.waitReady(ctx, srv.URL); err != nil {
		t.Fatalf("loading server: %v", err)
	}
	if n := strings.Count(errOut.String(), "waiting for the server"); n != 1 {
		t.Errorf("said it waits %d times, want once: %q", n, errOut.String())
	}
	mu.Lock()
	status = []string{"draining"}
	mu.Unlock()
	if err := c.waitReady(ctx, srv.URL); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("draining server: %v", err)
	}
	if err := c.waitReady(ctx, "http://"+closedAddr(t)); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("no server: %v, want connection refused", err)
	}
}

func TestReadChatStream(t *testing.T) {
	for _, tc := range []struct {
		name, stream, text string
		tokens             int // completion tokens of the usage; -1: none
		err                string
	}{
		{"whole", "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n: ping\n\ndata:{\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\n\r\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\ndata: [DONE]\n\n", "a", 2, ""},
		{"no usage", "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n", "a", -1, ""},
		{"error event", "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"error\":{\"message\":\"boom\"}}\n\n", "a", -1, "boom"},
		{"cut short", "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n", "a", -1, "the answer stream ended early"},
		{"not JSON", "data: {oops\n\n", "", -1, "bad stream event"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var text strings.Builder
			usage, err := readChatStream(strings.NewReader(tc.stream), func(s string) { text.WriteString(s) })
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("error %v, want %q", err, tc.err)
			}
			if text.String() != tc.text {
				t.Errorf("text %q, want %q", text.String(), tc.text)
			}
			if tokens := -1; usage != nil {
				tokens = usage.CompletionTokens
				if tokens != tc.tokens {
					t.Errorf("usage %d tokens, want %d", tokens, tc.tokens)
				}
			} else if tc.tokens != -1 {
				t.Errorf("no usage, want %d tokens", tc.tokens)
			}
		})
	}
}
