// Command voice talks with a corral server out loud: each line typed is a
// user turn, and the answer is spoken chunk by chunk with espeak-ng as it
// arrives over /v1/voice, the server pausing the generation until a chunk
// has been spoken. Typing a line while it speaks barges in: the rest of
// the answer is dropped, and the conversation keeps what was heard.
//
//	apt-get install espeak-ng
//	make run                                  # in another terminal
//	go run ./examples/voice -url http://127.0.0.1:8080
//
// It prints the time to first audio of each answer. Without espeak-ng
// (-say "") it prints the chunks and waits the time a speaker would take.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/corral-llm/corral/voice"
	"github.com/corral-llm/corral/wire"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8080", "corral server `URL`")
	say := flag.String("say", "espeak-ng", "text-to-speech `command` (the text is its last argument); empty: print only")
	cps := flag.Float64("cps", 15, "without -say: characters per second to wait for")
	system := flag.String("system", "You are a friendly voice assistant. Answer in short sentences.", "system message")
	maxTokens := flag.Int("max-tokens", 200, "longest answer in tokens")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c, err := voice.Dial(ctx, "ws"+strings.TrimPrefix(strings.TrimRight(*url, "/"), "http")+"/v1/voice", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	msgs := []wire.Message{{Role: "system", Content: *system}}
	sp := speaker{cmd: *say, cps: *cps}
	fmt.Print("you> ")
	next := ""
	for {
		line := next
		if line == "" {
			var ok bool
			if line, ok = <-lines; !ok {
				return
			}
		}
		if strings.TrimSpace(line) == "" {
			fmt.Print("you> ")
			next = ""
			continue
		}
		msgs = append(msgs, wire.Message{Role: "user", Content: line})
		err := c.Create(ctx, map[string]any{"messages": msgs, "max_tokens": *maxTokens, "chunking": map[string]any{}})
		if err != nil {
			log.Fatal(err)
		}
		msgs = nil // the server keeps the conversation
		if next, err = answer(ctx, c, sp, lines); err != nil {
			log.Fatal(err)
		}
		if next == "" {
			fmt.Print("you> ")
		}
	}
}

// answer speaks one answer's chunks as they come. A line on lines barges
// in: answer returns it, the next turn.
func answer(ctx context.Context, c *voice.Client, sp speaker, lines <-chan string) (bargeIn string, err error) {
	start := time.Now()
	heard := 0
	for {
		ev, err := c.Next(ctx)
		if err != nil {
			return "", err
		}
		switch ev.Type {
		case voice.TypeChunk:
			if *ev.Index == 0 {
				fmt.Printf("[first audio after %v]\n", time.Since(start).Round(time.Millisecond))
			}
			fmt.Print(ev.Text)
			n, line := sp.speak(ctx, ev.Text, lines)
			heard += n
			if line != nil {
				fmt.Println(" [interrupted]")
				bargeIn = *line
				if err := c.Interrupt(ctx, heard); err != nil {
					return "", err
				}
				continue
			}
			if err := c.Continue(ctx); err != nil {
				return "", err
			}
		case voice.TypeDone:
			m := ev.Metrics
			fmt.Printf("\n[%s: %d chunks, first chunk %.0f ms, %d of %d prompt tokens cached]\n",
				ev.FinishReason, m.Chunks, m.FirstChunkMS, m.CachedTokens, ev.Usage.PromptTokens)
			return bargeIn, nil
		case voice.TypeError:
			fmt.Printf("\n[error: %s]\n", ev.Error.Message)
			return bargeIn, nil
		}
	}
}

// speaker says text with a text-to-speech command, or waits as long as a
// speaker would.
type speaker struct {
	cmd string
	cps float64
}

// speak says text unless a line arrives first; it returns how many
// characters were heard (estimated from the time spoken) and the line
// that interrupted it, if one did.
func (s speaker) speak(ctx context.Context, text string, lines <-chan string) (heard int, interrupted *string) {
	n := utf8.RuneCountInString(text)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		if s.cmd == "" {
			t := time.NewTimer(time.Duration(float64(n) / s.cps * float64(time.Second)))
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			return
		}
		exec.CommandContext(ctx, s.cmd, strings.TrimSpace(text)).Run()
	}()
	for {
		select {
		case <-finished:
			return n, nil
		case line, ok := <-lines:
			if !ok { // stdin ended: no more barge-ins
				lines = nil
				continue
			}
			cancel()
			<-finished
			return min(n, int(time.Since(start).Seconds()*s.cps)), &line
		}
	}
}
