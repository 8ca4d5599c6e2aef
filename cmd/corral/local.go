package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/server"
)

// startLocal serves the GGUF model at path in this process, for corral run
// when no server answers: the server corral serve runs (serveModel), with
// one slot, on a free port of 127.0.0.1. It returns once the model is
// loaded, with the server's base URL; ending ctx first abandons the load.
// stop shuts the server down, frees the model and returns what serving
// ended with; it may be called more than once.
func startLocal(ctx context.Context, path string, log *slog.Logger) (baseURL string, stop func() error, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("in-process server: %w", err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	loaded := make(chan struct{})
	served := make(chan error, 1)
	go func() {
		// One conversation: one slot, which keeps the conversation's
		// prefix cached, so no host cache for prefixes pushed out.
		cfg := engine.Config{ModelPath: path, Parallel: 1}
		served <- serveModel(sctx, ln, cfg, "", server.Config{Logger: log}, func() { close(loaded) })
	}()
	select {
	case <-loaded:
	case err := <-served:
		cancel()
		return "", nil, fmt.Errorf("in-process server: %w", err)
	case <-ctx.Done():
		cancel()
		<-served
		return "", nil, ctx.Err()
	}
	return "http://" + ln.Addr().String(), sync.OnceValue(func() error {
		cancel()
		if err := <-served; err != nil {
			return fmt.Errorf("in-process server: %w", err)
		}
		return nil
	}), nil
}
