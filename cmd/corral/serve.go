package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/openai"
	"github.com/corral-llm/corral/server"
)

// runServe serves one GGUF model over the OpenAI-compatible HTTP API. It
// listens at once, answering /health with 503 {"status":"loading"} while
// the model loads, and shuts down gracefully when ctx ends (the first
// SIGTERM or SIGINT): /health answers 503 {"status":"draining"}, queued
// requests fail with 503, running ones have -shutdown-timeout to finish.
func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var cfg engine.Config
	fs.StringVar(&cfg.ModelPath, "m", "", "GGUF model `file` (required)")
	fs.StringVar(&cfg.ModelPath, "model", "", "GGUF model `file` (same as -m)")
	fs.IntVar(&cfg.CtxSize, "c", 0, "KV cache size in `tokens`, shared by the slots (0: the model's training context per slot)")
	fs.IntVar(&cfg.CtxSize, "ctx-size", 0, "same as -c")
	fs.IntVar(&cfg.Parallel, "np", 4, "number of slots decoded together")
	fs.IntVar(&cfg.Parallel, "parallel", 4, "same as -np")
	fs.IntVar(&cfg.Threads, "t", 0, "CPU threads for compute (0: all cores)")
	fs.IntVar(&cfg.Threads, "threads", 0, "same as -t")
	fs.IntVar(&cfg.BatchSize, "b", 512, "per-step token budget")
	fs.IntVar(&cfg.BatchSize, "batch-size", 512, "same as -b")
	fs.IntVar(&cfg.PrefillBudget, "prefill-budget", engine.DefaultPrefillBudget, "most prompt tokens per step while other slots decode; within it a step is kept at about twice a decode-only step (-1: the whole -b)")
	fa := fs.String("flash-attn", "auto", "flash attention: on, off or auto (on for CPU: faster decoding, slower prompts over a long cached prefix)")
	fs.StringVar(fa, "fa", "auto", "same as -flash-attn")
	cacheRAM := fs.Int64("cache-ram", 2048, "host memory in `MiB` for the KV of prefixes pushed out of the slots (0: none)")
	fs.IntVar(&cfg.MaxQueue, "max-queue", 256, "requests that may wait for a slot; more get 503")
	fs.DurationVar(&cfg.MaxQueueWait, "max-queue-wait", 0, "fail requests that waited this long for a slot (0: no limit)")
	host := fs.String("host", "127.0.0.1", "listen `address`")
	port := fs.Int("port", 8080, "listen port")
	tmpl := fs.String("chat-template", "", "built-in chat template `name` to use instead of the model's ("+strings.Join(chat.Names(), ", ")+")")
	alias := fs.String("alias", "", "model id in the API (default: the file name without .gguf)")
	logRequests := fs.Bool("log-requests", false, "log every request body")
	logLevel := fs.String("log-level", "info", "log `level`: debug, info, warn or error")
	maxBody := fs.Int64("max-body", server.DefaultMaxBody, "largest request body in `bytes`")
	var scfg server.Config
	fs.DurationVar(&scfg.ShutdownTimeout, "shutdown-timeout", server.DefaultShutdownTimeout, "on SIGTERM/SIGINT, how long running requests may finish")
	fs.DurationVar(&scfg.KeepAlive, "sse-keepalive", openai.DefaultKeepAlive, "longest silence of an event stream; a waiting one gets its headers, then \": ping\" comments")
	fs.DurationVar(&scfg.WriteTimeout, "write-timeout", openai.DefaultWriteTimeout, "longest wait for a client to accept a write; then its request is cancelled")
	fs.DurationVar(&scfg.BodyTimeout, "body-timeout", server.DefaultBodyTimeout, "longest time to receive a request body; then 408")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.HostCacheBytes = *cacheRAM << 20
	switch *fa {
	case "on", "auto":
	case "off":
		cfg.NoFlashAttn = true
	default:
		return fmt.Errorf("-flash-attn %q: want on, off or auto", *fa)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.ModelPath == "" {
		return errors.New("-m FILE is required")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	if *tmpl != "" {
		// Fail before the slow model load, not after.
		if _, err := chat.Lookup(*tmpl); err != nil {
			return err
		}
	}
	cfg.Name = *alias
	if cfg.Name == "" {
		cfg.Name = strings.TrimSuffix(filepath.Base(cfg.ModelPath), ".gguf")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	scfg.MaxBody, scfg.LogRequests, scfg.Logger = *maxBody, *logRequests, log
	srv := server.New(scfg)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, ln) }()
	log.Info("listening; loading model", "addr", ln.Addr().String(), "model", cfg.ModelPath)

	eng, err := engine.New(sctx, cfg)
	if err != nil {
		stop()
		<-served
		return err
	}
	api, err := openai.New(eng, openai.Options{ChatTemplate: *tmpl, Logger: log})
	if err != nil {
		stop()
		<-served
		eng.Close()
		return err
	}
	srv.SetAPI(api)
	info := eng.Info()
	log.Info("model loaded; ready", "model", info.Name, "arch", info.Architecture, "slots", cfg.Parallel, "slot_ctx", info.SlotCtx)

	err = <-served // after ctx ends and in-flight requests drained, or a serve error
	if cerr := eng.Close(); err == nil {
		err = cerr
	}
	return err
}
