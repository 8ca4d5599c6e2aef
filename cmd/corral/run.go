package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/term"

	"github.com/corral-llm/corral/store"
	"github.com/corral-llm/corral/wire"
)

// hostEnv names the environment variable with corral run's default server
// (host:port or a URL).
const hostEnv = "CORRAL_HOST"

// replPrompt is what the interactive chat shows before each line.
const replPrompt = ">>> "

// errInterrupted ends corral run on Ctrl-C outside the interactive chat.
var errInterrupted = errors.New("interrupted")

// runRun chats with a model in the terminal, as `ollama run` does. It talks
// to the server at --url over the OpenAI chat API; when nothing listens
// there it serves the model in this process (startLocal) and talks to
// that, so there is one code path. With a prompt, or with stdin not a
// terminal, it writes one answer and exits; otherwise it is a chat that
// keeps the conversation, where Ctrl-C cancels the answer being written.
func runRun(ctx context.Context, args []string) (err error) {
	// SIGINT is ours from the start (main leaves it to us): it ends the
	// command until the chat starts, then cancels answers.
	intr := watchInterrupts()
	defer intr.stop()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	intr.set(func() { cancel(errInterrupted) })

	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: corral run [flags] MODEL [PROMPT]\n\n"+
			"MODEL is a GGUF file or a model id in %s. Without PROMPT, and with stdin\n"+
			"a terminal, it is an interactive chat (type /? for its commands).\n\nflags:\n", store.DefaultDir())
		fs.PrintDefaults()
	}
	url := fs.String("url", defaultRunURL(), "server `URL` (default $"+hostEnv+"); when nothing listens there, the model runs in this process")
	system := fs.String("system", "", "system message `text`")
	params := chatParams{}
	for _, f := range []struct{ flag, param, usage string }{
		{"max-tokens", "num_predict", "most tokens per answer"},
		{"temperature", "temperature", "sampling temperature"},
		{"seed", "seed", "sampling seed"},
	} {
		fs.Func(f.flag, f.usage+" (default: the server's)", func(s string) error { return params.set(f.param, s) })
	}
	if err = fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("MODEL is required")
	}
	model := fs.Arg(0)
	if err = fs.Parse(fs.Args()[1:]); err != nil { // flags may follow MODEL too
		return err
	}
	prompt := strings.Join(fs.Args(), " ")
	stdinTTY := term.IsTerminal(int(os.Stdin.Fd()))
	interactive := prompt == "" && stdinTTY
	if !stdinTTY {
		in, err := readAll(ctx, os.Stdin)
		if err != nil {
			return err
		}
		if s := strings.TrimSpace(string(in)); s != "" && prompt != "" {
			prompt = s + "\n\n" + prompt
		} else if s != "" {
			prompt = s
		}
	}
	if !interactive && prompt == "" {
		return errors.New("no prompt: give one as an argument or on stdin")
	}

	c := &chatClient{http: &http.Client{}, model: chatModelID(model), system: *system, params: params, out: os.Stdout, errOut: os.Stderr}
	base, stop, err := c.connect(ctx, normalizeURL(*url), model)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return err
	}
	c.base = base
	if stop != nil {
		defer func() {
			if serr := stop(); err == nil {
				err = serr
			}
		}()
	}
	if !interactive {
		return c.oneShot(ctx, prompt)
	}
	c.stats = term.IsTerminal(int(os.Stdout.Fd()))
	return c.repl(ctx, os.Stdin, intr)
}

// readAll reads r to its end, or until ctx ends (Ctrl-C): a prompt cut
// short is not sent. On ctx's end the read goes on in its goroutine,
// blocked on r, until the process exits right after.
func readAll(ctx context.Context, r io.Reader) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(r)
		done <- result{b, err}
	}()
	select {
	case res := <-done:
		if res.err != nil {
			return nil, fmt.Errorf("read stdin: %w", res.err)
		}
		return res.b, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// defaultRunURL is $CORRAL_HOST, else corral serve's default address.
func defaultRunURL() string {
	if h := os.Getenv(hostEnv); h != "" {
		return h
	}
	return "http://127.0.0.1:8080"
}

// normalizeURL makes a base URL of host:port or a URL.
func normalizeURL(u string) string {
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	return strings.TrimRight(u, "/")
}

// chatModelID is the id to request for the model ref names: a GGUF file's
// name without .gguf (as corral serve names it), else ref less .gguf.
func chatModelID(ref string) string {
	if st, err := os.Stat(ref); err == nil && st.Mode().IsRegular() {
		ref = filepath.Base(ref)
	}
	return strings.TrimSuffix(ref, ".gguf")
}

// connect returns the base URL of a server for model: url when something
// answers there (once it has loaded its model), else an in-process server
// of model (a file or an id in the model directory), whose stop function
// it returns too.
func (c *chatClient) connect(ctx context.Context, url, model string) (base string, stop func() error, err error) {
	err = c.waitReady(ctx, url)
	if err == nil {
		return url, nil, nil
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return "", nil, err
	}
	path, rerr := store.Resolve(store.DefaultDir(), model)
	if rerr != nil {
		return "", nil, fmt.Errorf("no server at %s, and no model to run here: %w", url, rerr)
	}
	// Only warnings and errors of the engine, so as not to clutter the chat.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return startLocal(ctx, path, log)
}

// interrupts routes SIGINT (Ctrl-C): to the function set, when there is
// one, else to the idle function.
type interrupts struct {
	sigs chan os.Signal
	done chan struct{}

	mu     sync.Mutex
	action func() // nil: idle
	idle   func()
}

// watchInterrupts takes SIGINT over until stop.
func watchInterrupts() *interrupts {
	in := &interrupts{sigs: make(chan os.Signal, 1), done: make(chan struct{})}
	signal.Notify(in.sigs, os.Interrupt)
	go func() {
		defer close(in.done)
		for range in.sigs {
			in.mu.Lock()
			if in.action != nil {
				in.action()
			} else if in.idle != nil {
				in.idle()
			}
			in.mu.Unlock()
		}
	}()
	return in
}

// set makes f what an interrupt does.
func (in *interrupts) set(f func()) {
	in.mu.Lock()
	in.action = f
	in.mu.Unlock()
}

// toIdle makes the idle function what an interrupt does, and then calls f
// while no interrupt is handled, so that the two do not interleave.
func (in *interrupts) toIdle(idle, f func()) {
	in.mu.Lock()
	in.action, in.idle = nil, idle
	f()
	in.mu.Unlock()
}

// stop gives SIGINT its default behavior back.
func (in *interrupts) stop() {
	signal.Stop(in.sigs)
	close(in.sigs)
	<-in.done
}

// oneShot writes the answer to prompt and a newline.
func (c *chatClient) oneShot(ctx context.Context, prompt string) error {
	text, _, err := c.send(ctx, prompt)
	if !strings.HasSuffix(text, "\n") && (text != "" || err == nil) {
		fmt.Fprintln(c.out)
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// repl is the interactive chat: it reads lines from in until EOF (Ctrl-D)
// or /bye, answering each line that is not a command.
func (c *chatClient) repl(ctx context.Context, in io.Reader, intr *interrupts) error {
	atPrompt := func() {
		fmt.Fprint(c.out, "\nUse Ctrl + d or /bye to exit.\n"+replPrompt)
	}
	r := bufio.NewReader(in)
	for {
		intr.toIdle(atPrompt, func() { fmt.Fprint(c.out, replPrompt) })
		line, err := r.ReadString('\n')
		if err != nil {
			fmt.Fprintln(c.out)
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("read stdin: %w", err)
		}
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case strings.HasPrefix(line, "/"):
			if c.command(line) {
				return nil
			}
		default:
			c.turn(ctx, line, intr)
		}
	}
}

// turn answers one line of the chat. Ctrl-C cancels the answer, which then
// stays out of the history with the line that asked for it; so does an
// answer that fails.
func (c *chatClient) turn(ctx context.Context, line string, intr *interrupts) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	intr.set(cancel)
	text, st, err := c.send(actx, line)
	if text != "" && !strings.HasSuffix(text, "\n") {
		fmt.Fprintln(c.out) // end its line (a cancelled answer's after the terminal's "^C")
	}
	switch {
	case actx.Err() != nil:
		return
	case err != nil:
		fmt.Fprintf(c.errOut, "Error: %v\n", err)
		return
	}
	c.history = append(c.history, wire.Message{Role: "user", Content: line}, wire.Message{Role: "assistant", Content: text})
	if c.stats && st.tokens > 0 {
		s := fmt.Sprintf("%d tokens", st.tokens)
		if st.tokens == 1 {
			s = "1 token"
		}
		if st.rate > 0 {
			s += fmt.Sprintf(", %.1f tokens/s", st.rate)
		}
		fmt.Fprintf(c.out, "\x1b[2m(%s)\x1b[0m\n", s) // dim
	}
	fmt.Fprintln(c.out)
}

// command runs a chat command line (it starts with "/"), reporting
// whether it asks to exit.
func (c *chatClient) command(line string) (exit bool) {
	cmd, rest, _ := strings.Cut(line, " ")
	rest = strings.TrimSpace(rest)
	switch cmd {
	case "/bye":
		return true
	case "/clear":
		c.history = nil
		fmt.Fprintln(c.out, "Cleared session context.")
	case "/set":
		c.setCommand(rest)
	case "/show":
		c.show()
	case "/?", "/help":
		fmt.Fprint(c.out, chatHelp)
	default:
		fmt.Fprintf(c.errOut, "Unknown command '%s'. Type /? for help\n", cmd)
	}
	return false
}

// chatHelp lists the chat commands.
var chatHelp = `Available commands:
  /set parameter NAME VALUE  set a parameter: ` + strings.Join(chatParamNames(), ", ") + `
  /set system TEXT           set the system message
  /show                      show the model, system message and parameters
  /clear                     forget the conversation
  /bye                       exit (also Ctrl + d)
  /?, /help                  this help

Ctrl + c stops an answer.
`

// setCommand runs "/set ARGS".
func (c *chatClient) setCommand(args string) {
	what, rest, _ := strings.Cut(args, " ")
	rest = strings.TrimSpace(rest)
	switch what {
	case "parameter":
		name, value, _ := strings.Cut(rest, " ")
		value = strings.TrimSpace(value)
		if name == "" || value == "" {
			fmt.Fprintln(c.errOut, "Usage: /set parameter NAME VALUE")
			return
		}
		if err := c.params.set(name, value); err != nil {
			fmt.Fprintf(c.errOut, "Error: %v\n", err)
			return
		}
		fmt.Fprintf(c.out, "Set parameter '%s' to '%s'\n", name, value)
	case "system":
		c.system = rest
		fmt.Fprintln(c.out, "Set system message.")
	default:
		fmt.Fprintln(c.errOut, "Usage: /set parameter NAME VALUE, or /set system TEXT")
	}
}

// show runs "/show".
func (c *chatClient) show() {
	fmt.Fprintf(c.out, "Model: %s\n", c.model)
	if c.system != "" {
		fmt.Fprintf(c.out, "System: %s\n", c.system)
	}
	if len(c.params) == 0 {
		fmt.Fprintln(c.out, "No parameters set.")
		return
	}
	fmt.Fprintln(c.out, "Parameters:")
	for _, p := range chatParamTable {
		if v, ok := c.params[p.name]; ok {
			fmt.Fprintf(c.out, "  %-12s %v\n", p.name, v)
		}
	}
}
