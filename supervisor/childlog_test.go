package supervisor

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestChildLogFileRotation runs a child that prints and crashes until the
// worker is FAILED: its lines are in the log file with the worker's
// prefix, the last crash is in the current file, and rotation keeps
// log_files old files of at most log_max_bytes each.
func TestChildLogFileRotation(t *testing.T) {
	dir := t.TempDir()
	const maxBytes, keep = 400, 2
	script := `for i in 1 2 3 4 5; do echo "line $i of a crashing child"; done; echo "dying $$" >&2; exit 3`
	w := shellWorker(t, script, func(c *WorkerConfig) {
		c.Timeouts.MaxRestartsPerWindow = 4
		c.LogFile, c.LogMaxBytes, c.LogFiles = filepath.Join(dir, "{name}.log"), maxBytes, new(int)
		*c.LogFiles = keep
	})
	stopWorker(t, w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	waitState(t, w, WorkerFailed, 30*time.Second)

	names, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"sh.log", "sh.log.1", "sh.log.2"}
	if len(names) != len(want) {
		t.Fatalf("files %q, want %q", names, want)
	}
	var all strings.Builder
	line := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \[sh\] (stdout: line \d of a crashing child|stderr: dying \d+|corral: .*)$`)
	for i, name := range want {
		path := filepath.Join(dir, name)
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() == 0 || fi.Size() > maxBytes {
			t.Errorf("%s: %d bytes, want 1…%d", name, fi.Size(), maxBytes)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for sc := bufio.NewScanner(f); sc.Scan(); {
			lines = append(lines, sc.Text())
		}
		f.Close()
		for _, l := range lines {
			if !line.MatchString(l) {
				t.Errorf("%s: unexpected line %q", name, l)
			}
		}
		text := strings.Join(lines, "\n")
		all.WriteString(text)
		if i == 0 && !strings.HasSuffix(text, "exit status 3") {
			// The current file ends with the fifth and last crash.
			t.Errorf("current file does not end with the last crash:\n%s", text)
		}
	}
	// stdout and stderr are read apart, so the stderr line may land in
	// the file before a rotation: look for it in all of them.
	if !strings.Contains(all.String(), "[sh] stderr: dying") {
		t.Errorf("no file has the child's stderr")
	}
}

// TestChildLogStderr checks the default sink: the supervisor's stderr,
// each line prefixed with the worker's name.
func TestChildLogStderr(t *testing.T) {
	w := shellWorker(t, `echo hello; echo oops >&2; exit 3`, func(c *WorkerConfig) { c.Timeouts.MaxRestartsPerWindow = 1 })
	var out lockedBuffer
	w.procOpts.SetStderr(&out)
	stopWorker(t, w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	waitState(t, w, WorkerFailed, 30*time.Second)
	text := out.String()
	for _, want := range []string{"[sh] stdout: hello\n", "[sh] stderr: oops\n", "[sh] corral: started pid ", " exit status 3\n"} {
		if strings.Count(text, want) != 2 {
			t.Errorf("stderr holds %d × %q, want 2 (two runs):\n%s", strings.Count(text, want), want, text)
		}
	}
}

func TestProcessConfigErrors(t *testing.T) {
	for _, mutate := range []func(*WorkerConfig){
		func(c *WorkerConfig) { c.PIDNamespace = "on" },
		func(c *WorkerConfig) { c.LogMaxBytes = -1 },
		func(c *WorkerConfig) { c.LogFiles = new(int); *c.LogFiles = -1 },
	} {
		cfg := WorkerConfig{Name: "w", Command: []string{"true"}, Port: 1}
		mutate(&cfg)
		if _, err := NewWorker(cfg); err == nil {
			t.Errorf("NewWorker accepted %+v", cfg.Config)
		}
	}
	cfg, err := ParseConfig([]byte(`workers:
  - name: w
    port: 9000
    command: [srv]
    log_file: /var/log/corral/{name}.log
    log_max_bytes: 1048576
    log_files: 0
    pid_namespace: "off"
`), "")
	if err != nil {
		t.Fatal(err)
	}
	pc := cfg.Workers[0].Config
	if pc.LogFile != "/var/log/corral/{name}.log" || pc.LogMaxBytes != 1<<20 || pc.LogFiles == nil || *pc.LogFiles != 0 || pc.PIDNamespace != "off" {
		t.Fatalf("parsed %+v", pc)
	}
}

// lockedBuffer is a bytes.Buffer for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
