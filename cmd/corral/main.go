// Command corral serves language models over an OpenAI-compatible HTTP API,
// benchmarks servers, writes synthetic models and supervises worker processes.
//
//	corral serve     -m MODEL [flags]    serve a GGUF model
//	corral bench     [flags]             load-test a server
//	corral synth     --shape 135m -o F   write a random-weight model
//	corral supervise --config FILE       run and supervise worker processes
//	corral supervise restart NAME        restart a supervised worker (leaves FAILED)
//	corral pull      REF                 download a model into the model directory
//	corral ls                            list the models in the model directory
//	corral rm        MODEL               remove a model from the model directory
//	corral show      MODEL               describe a model
//	corral run       MODEL [PROMPT]      chat with a model in the terminal
//	corral version                       the build, and the CPU it runs on
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
	"pull":      runPull,
	"ls":        runList,
	"rm":        runRemove,
	"show":      runShow,
	"run":       runRun,
	"version":   runVersion,
}

// ownSignals are the commands that handle SIGINT themselves (corral run:
// Ctrl-C cancels the answer being written, not the program).
var ownSignals = map[string]bool{"run": true}

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
	ctx, stop := context.Background(), func() {}
	if !ownSignals[os.Args[1]] {
		ctx, stop = onSignals(os.Args[1])
	}
	err := run(ctx, os.Args[2:])
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "corral %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// onSignals returns a context that ends at the first SIGINT or SIGTERM,
// which asks the command to shut down gracefully (corral serve drains and
// lets running requests finish). A second signal exits at once with
// status 1. stop ends the watch: its goroutine exits and the signals get
// their default behavior back.
func onSignals(cmd string) (ctx context.Context, stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	quit := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for n := 0; ; n++ {
			select {
			case sig := <-sigs:
				if n > 0 {
					fmt.Fprintf(os.Stderr, "corral %s: %v again: exiting now\n", cmd, sig)
					os.Exit(1)
				}
				fmt.Fprintf(os.Stderr, "corral %s: %v: shutting down; signal again to exit now\n", cmd, sig)
				cancel()
			case <-quit:
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(quit)
		<-exited
		cancel()
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: corral <command> [flags]

commands:
  serve      serve a GGUF model over an OpenAI-compatible HTTP API
  bench      load-test an OpenAI-compatible or llama.cpp server
  synth      write a random-weight llama model of a given shape
  supervise  run and supervise worker processes behind a job API
             ("corral supervise restart [--url URL] NAME" restarts a worker)
  pull       download a model (Hugging Face or a URL) into the model directory
  ls         list the models in the model directory
  rm         remove a model from the model directory
  show       describe a model: architecture, parameters, template
  run        chat with a model in the terminal
  version    the build, and which CPU features it uses

"corral <command> -h" lists a command's flags.
`)
}
