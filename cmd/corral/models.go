package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/registry"
	"github.com/corral-llm/corral/store"
)

// templateLines is how much of a chat template corral show prints
// without --template.
const templateLines = 10

// runPull downloads a model into the model directory, reporting progress
// on stderr, and prints its path on stdout.
func runPull(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("pull", flag.ContinueOnError)
	dir := dirFlag(fs)
	name := fs.String("name", "", "save the model as `ID` (default: the file name without .gguf)")
	maxSize := fs.String("max-size", fmt.Sprintf("%dGiB", store.DefaultMaxSize>>30), "largest file to download: a file announced larger is refused, one whose size is not announced is cut there (bytes with a unit: 256GiB, 500GB; 0: no limit)")
	insecure := fs.Bool("insecure", false, "allow plain http:// (the URL, $HF_ENDPOINT, redirects); by default only https")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: corral pull [flags] REF

REF is one of
  org/repo:QUANT                a Hugging Face repository's GGUF file of that
                                quantization (bartowski/SmolLM2-135M-Instruct-GGUF:Q8_0)
  org/repo                      its Q4_K_M file, else its only GGUF file
  hf://org/repo/path/file.gguf  a file of a Hugging Face repository
  https://host/path/file.gguf   any URL

The download is checked against the SHA-256 the hub publishes. An
interrupted pull resumes where it stopped. $HF_TOKEN, when set, is sent to
the hub (gated and private repositories); $HF_ENDPOINT names a mirror of
huggingface.co. Only https is used, unless --insecure. The model's path is
printed on stdout.

flags:
`)
		fs.PrintDefaults()
	}
	refs, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(refs) != 1 {
		return errors.New("want one model reference (corral pull -h)")
	}
	limit, err := registry.ParseBytes(*maxSize, 0)
	if err != nil {
		return fmt.Errorf("--max-size: %w", err)
	}
	if limit == 0 {
		limit = -1 // no limit
	}
	path, err := store.Pull(ctx, refs[0], *dir, store.PullOptions{
		Progress: os.Stderr,
		Terminal: term.IsTerminal(int(os.Stderr.Fd())),
		Name:     *name,
		MaxSize:  limit,
		Insecure: *insecure,
	})
	if err != nil {
		return err
	}
	fmt.Println(path)
	return nil
}

// runList prints the models in the model directory, newest first.
func runList(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("ls", flag.ContinueOnError)
	dir := dirFlag(fs)
	rest, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("unexpected arguments %q", rest)
	}
	models, err := store.List(*dir)
	if err != nil {
		return err
	}
	now := time.Now()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "ID\tSIZE\tQUANT\tCONTEXT\tARCH\tMODIFIED")
	var broken []error
	for _, m := range models {
		ctxLen, quant, arch := "-", orDash(m.Quant), orDash(m.Architecture)
		if m.Context > 0 {
			ctxLen = strconv.Itoa(m.Context)
		}
		if m.Err != nil {
			quant, arch = "?", "?"
			broken = append(broken, fmt.Errorf("%s: %w", m.ID, m.Err))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, registry.FormatBytes(m.Size), quant, ctxLen, arch, ago(now.Sub(m.Modified)))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write list: %w", err)
	}
	for _, err := range broken {
		fmt.Fprintf(os.Stderr, "corral ls: %v\n", err)
	}
	return nil
}

// runRemove deletes models from the model directory.
func runRemove(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("rm", flag.ContinueOnError)
	dir := dirFlag(fs)
	ids, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return errors.New("want the ids of the models to remove (corral ls lists them)")
	}
	var errs []error
	for _, id := range ids {
		if err := store.Remove(*dir, id); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Printf("deleted %s\n", id)
	}
	return errors.Join(errs...)
}

// runShow describes a model of the model directory, or a GGUF file.
func runShow(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("show", flag.ContinueOnError)
	dir := dirFlag(fs)
	whole := fs.Bool("template", false, "print the whole chat template, and nothing else")
	refs, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(refs) != 1 {
		return errors.New("want one model: an id in the model directory, or a GGUF file")
	}
	path, err := store.Resolve(*dir, refs[0])
	if err != nil {
		return err
	}
	m, md, err := store.Inspect(path)
	if err != nil {
		return err
	}
	if *whole {
		if md.ChatTemplate == "" {
			return fmt.Errorf("%s has no chat template", m.ID)
		}
		fmt.Print(md.ChatTemplate)
		if !strings.HasSuffix(md.ChatTemplate, "\n") {
			fmt.Println()
		}
		return nil
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 4, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "    %s\t%v\n", k, v) }
	fmt.Fprintln(tw, "  Model")
	if md.Name != "" {
		row("name", md.Name)
	}
	row("architecture", orDash(md.Architecture))
	row("parameters", gguf.ParameterLabel(uint64(m.Parameters)))
	row("quantization", orDash(m.Quant))
	row("context length", md.ContextLength)
	row("embedding length", md.EmbeddingLength)
	row("layers", md.BlockCount)
	switch {
	case md.HeadCount == 0:
		row("heads", "per layer")
	case md.HeadCountKV > 0 && md.HeadCountKV != md.HeadCount:
		row("heads", fmt.Sprintf("%d (%d KV)", md.HeadCount, md.HeadCountKV))
	default:
		row("heads", md.HeadCount)
	}
	row("vocab size", md.VocabSize)
	row("file", fmt.Sprintf("%s (%s)", path, registry.FormatBytes(m.Size)))
	// The projector corral serve would find beside it.
	mmproj := findProjector(path, slog.New(slog.DiscardHandler))
	if mmproj != "" {
		row("projector", mmproj)
	}
	// What corral serve reserves for it with its defaults, less --cache-ram.
	if fp, err := engine.EstimateMemory(md, engine.Config{ModelPath: path, MMProj: mmproj}); err == nil {
		proj := ""
		if fp.Projector > 0 {
			proj = ", projector " + registry.FormatBytes(fp.Projector)
		}
		row("memory (serve defaults)", fmt.Sprintf("%s: weights %s, KV %s, compute %s, other %s%s; plus --cache-ram",
			registry.FormatBytes(fp.Total()), registry.FormatBytes(fp.Weights), registry.FormatBytes(fp.KV),
			registry.FormatBytes(fp.Compute), registry.FormatBytes(fp.Overhead), proj))
	} else {
		row("memory (serve defaults)", err)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write description: %w", err)
	}
	fmt.Println()
	fmt.Println("  Template")
	writeTemplate(os.Stdout, md.ChatTemplate, refs[0])
	return nil
}

// writeTemplate prints the first lines of a chat template, indented.
func writeTemplate(w io.Writer, tmpl, ref string) {
	if tmpl == "" {
		fmt.Fprintln(w, "    (none: corral serve uses chatml unless --chat-template names another)")
		return
	}
	lines := strings.Split(strings.TrimRight(tmpl, "\n"), "\n")
	for _, l := range lines[:min(len(lines), templateLines)] {
		fmt.Fprintf(w, "    %s\n", l)
	}
	if n := len(lines) - templateLines; n > 0 {
		fmt.Fprintf(w, "    … %d more lines (corral show --template %s prints it whole)\n", n, ref)
	}
}

// dirFlag defines --dir, the model directory.
func dirFlag(fs *flag.FlagSet) *string {
	return fs.String("dir", store.DefaultDir(), "model `directory` ($CORRAL_MODELS sets the default)")
}

// parseArgs parses args with fs and returns the positional arguments.
// Flags may follow them too (corral rm a b --dir D); after "--" every
// argument is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// orDash returns s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ago says how long ago something happened d ago, as ollama list does:
// "5 minutes ago", "2 days ago".
func ago(d time.Duration) string {
	const day = 24 * time.Hour
	plural := func(n int64, unit string) string {
		if n == 1 {
			return "1 " + unit + " ago"
		}
		return fmt.Sprintf("%d %ss ago", n, unit)
	}
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return plural(int64(d/time.Minute), "minute")
	case d < 2*day:
		return plural(int64(d/time.Hour), "hour")
	case d < 60*day:
		return plural(int64(d/day), "day")
	case d < 730*day:
		return plural(int64(d/(30*day)), "month")
	default:
		return plural(int64(d/(365*day)), "year")
	}
}
