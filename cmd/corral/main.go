// Command corral serves language models over an OpenAI-compatible HTTP API,
// benchmarks servers, writes synthetic models and supervises worker processes.
//
//	corral serve     -m MODEL [flags]    serve a GGUF model
//	corral bench     [flags]             load-test a server
//	corral synth     --shape 135m -o F   write a random-weight model
//	corral supervise --config FILE       run and supervise worker processes
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

var commands = map[string]func(ctx context.Context, args []string) error{
	"serve":     runServe,
	"bench":     runBench,
	"synth":     runSynth,
	"supervise": runSupervise,
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	run, ok := commands[os.Args[1]]
	if !ok {
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[2:]); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "corral %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: corral <command> [flags]

commands:
  serve      serve a GGUF model over an OpenAI-compatible HTTP API
  bench      load-test an OpenAI-compatible or llama.cpp server
  synth      write a random-weight llama model of a given shape
  supervise  run and supervise worker processes behind a job API

"corral <command> -h" lists a command's flags.
`)
}
