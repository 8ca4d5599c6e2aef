package process

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config is how a worker's child process is run and where its output goes
// besides the log ring. Its YAML keys sit at the worker level (the
// supervisor's WorkerConfig inlines it).
type Config struct {
	// LogFile receives every line of the child's stdout and stderr, so
	// that crash output outlives the ring and the supervisor. "" (the
	// default) writes the lines to the supervisor's stderr, each prefixed
	// with "[name] "; "none" keeps them in the ring only; anything else is
	// a file path ({name} is replaced by the worker's name) whose lines
	// carry a timestamp and the same prefix.
	LogFile string `yaml:"log_file"`
	// LogMaxBytes is the size at which LogFile is rotated. Default 10 MiB.
	LogMaxBytes int64 `yaml:"log_max_bytes"`
	// LogFiles is how many rotated files (LogFile.1 … LogFile.N, newest
	// first) are kept besides LogFile itself. Default 3; 0 keeps none.
	LogFiles *int `yaml:"log_files"`
	// PIDNamespace is "auto" (the default): on Linux, start the child as
	// the first process of its own PID namespace where the kernel allows
	// it, so that nothing it forks outlives it or the supervisor; "off"
	// never does.
	PIDNamespace string `yaml:"pid_namespace"`
}

// Defaults of Config.
const (
	defaultLogMaxBytes = 10 << 20
	defaultLogFiles    = 3
	logFileNone        = "none"
)

// The values of Config.PIDNamespace.
const (
	PIDNamespaceAuto = "auto" // a PID namespace where the kernel allows it
	PIDNamespaceOff  = "off"  // never a PID namespace
)

// Options is what Start needs to know about a worker besides its command:
// where the child's lines and the process notes go, the port to check for
// stale holders and whether to isolate the child.
type Options struct {
	name   string
	port   int
	pidns  string
	log    *slog.Logger
	sink   *logSink // nil: ring only
	redact *Redactor
	warned sync.Once
}

// NewOptions checks pc and fills its defaults for the worker called name,
// whose child listens on port; log (which names the worker) receives the
// supervisor's own reports about the child.
func NewOptions(name string, port int, pc Config, log *slog.Logger) (*Options, error) {
	o := &Options{name: name, port: port, pidns: pc.PIDNamespace, log: log}
	switch o.pidns {
	case "":
		o.pidns = PIDNamespaceAuto
	case PIDNamespaceAuto, PIDNamespaceOff:
	default:
		return nil, fmt.Errorf("worker %s: pid_namespace %q is neither auto nor off", name, pc.PIDNamespace)
	}
	maxBytes, keep := pc.LogMaxBytes, defaultLogFiles
	if maxBytes == 0 {
		maxBytes = defaultLogMaxBytes
	}
	if pc.LogFiles != nil {
		keep = *pc.LogFiles
	}
	if maxBytes < 0 || keep < 0 {
		return nil, fmt.Errorf("worker %s: log_max_bytes %d and log_files %d must not be negative", name, pc.LogMaxBytes, keep)
	}
	switch pc.LogFile {
	case logFileNone:
	case "":
		o.sink = &logSink{prefix: "[" + name + "] ", out: os.Stderr, log: o.log}
	default:
		o.sink = &logSink{
			prefix: "[" + name + "] ", stamp: true, log: o.log,
			path: strings.ReplaceAll(pc.LogFile, "{name}", name), maxBytes: maxBytes, keep: keep,
		}
	}
	return o, nil
}

// SetStderr sends the child's lines to out instead of the supervisor's
// stderr, where that is their sink (log_file unset); tests use it. Call it
// before Start.
func (o *Options) SetStderr(out io.Writer) {
	if o.sink != nil && o.sink.path == "" {
		o.sink.out = out
	}
}

// SetRedactor makes r hide secrets in the child's lines (in the ring and
// the log sink), in the command line noted at each start and in the
// command lines of stale port holders. Call it before Start.
func (o *Options) SetRedactor(r *Redactor) { o.redact = r }

// logSink writes a child's lines to a stream or to a size-rotated file.
// It is safe for concurrent use. A file is opened at the first line and
// closed by close (when the child has exited); the next line reopens it.
type logSink struct {
	prefix string
	stamp  bool         // start lines with an RFC 3339 timestamp
	log    *slog.Logger // where write errors are reported
	now    func() time.Time

	mu       sync.Mutex
	out      io.Writer // the stream, or the open file
	path     string    // "" for a stream
	maxBytes int64
	keep     int
	file     *os.File
	size     int64
	failed   bool // a write error was reported; the next success clears it
}

// streamMu keeps lines of different sinks writing to one stream whole.
var streamMu sync.Mutex

// line writes one line (without its newline).
func (s *logSink) line(text string) {
	if s == nil {
		return
	}
	var b strings.Builder
	if s.stamp {
		now := time.Now
		if s.now != nil {
			now = s.now
		}
		b.WriteString(now().UTC().Format("2006-01-02T15:04:05.000Z07:00"))
		b.WriteByte(' ')
	}
	b.WriteString(s.prefix)
	b.WriteString(text)
	b.WriteByte('\n')
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.path == "" {
		streamMu.Lock()
		_, err = io.WriteString(s.out, b.String())
		streamMu.Unlock()
	} else {
		err = s.writeFileLocked(b.String())
	}
	switch {
	case err != nil && !s.failed:
		s.failed = true
		s.log.Warn("child log: write failed; lines go to the ring only until it works again", "error", err)
	case err == nil:
		s.failed = false
	}
}

// note writes a line of the supervisor's own about the child.
func (s *logSink) note(format string, args ...any) {
	s.line("corral: " + fmt.Sprintf(format, args...))
}

// writeFileLocked appends line to the file, rotating it first when the
// line would take it past maxBytes (a line longer than that still goes
// whole into a fresh file).
func (s *logSink) writeFileLocked(line string) error {
	if s.file == nil {
		if err := s.openLocked(); err != nil {
			return err
		}
	}
	if s.size > 0 && s.maxBytes > 0 && s.size+int64(len(line)) > s.maxBytes {
		if err := s.rotateLocked(); err != nil {
			return err
		}
	}
	n, err := s.file.WriteString(line)
	s.size += int64(n)
	if err != nil {
		return fmt.Errorf("write %s: %w", s.path, err)
	}
	return nil
}

// openLocked opens (appends to) the current file.
func (s *logSink) openLocked() error {
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("open child log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("open child log: %w", err)
	}
	s.file, s.size = f, fi.Size()
	return nil
}

// rotateLocked shifts path.N-1 … path.1 and path up by one, dropping the
// oldest, and opens a fresh path.
func (s *logSink) rotateLocked() error {
	var errs []error
	if err := s.file.Close(); err != nil {
		errs = append(errs, err)
	}
	s.file = nil
	rotated := func(i int) string { return s.path + "." + strconv.Itoa(i) }
	if err := os.Remove(rotated(s.keep)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for i := s.keep - 1; i >= 1; i-- {
		if err := os.Rename(rotated(i), rotated(i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if s.keep > 0 {
		if err := os.Rename(s.path, rotated(1)); err != nil {
			errs = append(errs, err)
		}
	} else if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("rotate child log %s: %w", s.path, err)
	}
	return s.openLocked()
}

// close closes the file, if one is open.
func (s *logSink) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file != nil {
		if err := s.file.Close(); err != nil {
			s.log.Warn("child log: close failed", "error", err)
		}
		s.file = nil
	}
}
