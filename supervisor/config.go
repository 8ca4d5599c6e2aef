package supervisor

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/corral-llm/corral/supervisor/agent"
)

// Config is the YAML configuration of corral supervise; example.yaml
// documents every field.
type Config struct {
	// Host and Port are where the HTTP face listens (flags override).
	Host string
	Port int
	// MaxJobBytes is Options.MaxJobBytes (max_job_bytes; 0: the default).
	MaxJobBytes int64
	// MaxJobBytesPerKey is Options.MaxJobBytesPerKey
	// (max_job_bytes_per_key; 0: the default).
	MaxJobBytesPerKey int64
	Workers           []WorkerConfig
}

// fileYAML is the document layout.
type fileYAML struct {
	Host              string       `yaml:"host"`
	Port              int          `yaml:"port"`
	MaxJobBytes       int64        `yaml:"max_job_bytes"`
	MaxJobBytesPerKey int64        `yaml:"max_job_bytes_per_key"`
	Workers           []workerYAML `yaml:"workers"`
}

// workerYAML adds what only the file has to WorkerConfig.
type workerYAML struct {
	WorkerConfig `yaml:",inline"`
	// Args are appended to Command (handy with the default command).
	Args []string `yaml:"args"`
	// Tools are normal tools, each run by its own command.
	Tools []toolYAML `yaml:"tools"`
}

// toolYAML is a normal tool and the command that runs it.
type toolYAML struct {
	agent.ToolDef `yaml:",inline"`
	Command       []string `yaml:"command"`
}

// DefaultServeCommand is the worker command used when a worker sets none:
// corral's own serve, given the corral binary's path. Args follow it.
func DefaultServeCommand(corral string) []string {
	return []string{corral, "serve", "--host", "{host}", "--port", "{port}",
		"-np", "{slots}", "--alias", "{model}"}
}

// defaultWorkerYAML holds the defaults of fields a worker leaves out.
func defaultWorkerYAML() workerYAML {
	return workerYAML{WorkerConfig: WorkerConfig{
		Timeouts:     DefaultTimeouts(),
		RepeatedLine: agent.RepeatedLineGuard{MinChars: 16, Repeats: 8},
	}}
}

// LoadConfig reads a YAML configuration file; corral is the path of the
// corral binary for DefaultServeCommand.
func LoadConfig(path, corral string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	cfg, err := ParseConfig(data, corral)
	if err != nil {
		return nil, fmt.Errorf("load config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig parses a YAML configuration. Unknown keys are errors. A
// worker's omitted timeouts keep their DefaultTimeouts values ("0s" disables
// one), and its repeated-line guard defaults to 16 characters × 8.
func ParseConfig(data []byte, corral string) (*Config, error) {
	// Pass 1: strict, to report unknown keys with their line.
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f fileYAML
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	// Pass 2: decode each worker over its defaults.
	var nodes struct {
		Workers []yaml.Node `yaml:"workers"`
	}
	if err := yaml.Unmarshal(data, &nodes); err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	if len(nodes.Workers) == 0 {
		return nil, errors.New("parse config: no workers")
	}
	if f.MaxJobBytes < 0 || f.MaxJobBytesPerKey < 0 {
		return nil, fmt.Errorf("parse config: max_job_bytes %d and max_job_bytes_per_key %d must not be negative", f.MaxJobBytes, f.MaxJobBytesPerKey)
	}
	cfg := &Config{Host: f.Host, Port: f.Port, MaxJobBytes: f.MaxJobBytes, MaxJobBytesPerKey: f.MaxJobBytesPerKey}
	for i := range nodes.Workers {
		wy := defaultWorkerYAML()
		if err := nodes.Workers[i].Decode(&wy); err != nil {
			return nil, fmt.Errorf("parse config: worker %d: %w", i+1, err)
		}
		wc, err := wy.workerConfig(corral)
		if err != nil {
			return nil, fmt.Errorf("parse config: worker %d: %w", i+1, err)
		}
		cfg.Workers = append(cfg.Workers, wc)
	}
	return cfg, nil
}

// workerConfig resolves the command and the tools of a worker.
func (wy workerYAML) workerConfig(corral string) (WorkerConfig, error) {
	wc := wy.WorkerConfig
	if len(wc.Command) == 0 && wc.URL == "" {
		if corral == "" {
			return wc, errors.New("no command and no corral binary for the default")
		}
		wc.Command = DefaultServeCommand(corral)
	}
	if wc.URL != "" && len(wy.Args) > 0 {
		return wc, errors.New("args given to a remote worker (url), which runs no command")
	}
	if wc.URL == "" {
		wc.Command = append(append([]string(nil), wc.Command...), wy.Args...)
	}
	if len(wy.Tools) > 0 {
		runner := agent.CommandTools{}
		for _, t := range wy.Tools {
			if len(t.Command) == 0 {
				return wc, fmt.Errorf("tool %q has no command", t.Function.Name)
			}
			if t.Type == "" {
				t.Type = "function"
			}
			wc.NormalTools = append(wc.NormalTools, t.ToolDef)
			runner[t.Function.Name] = t.Command
		}
		wc.ToolRunner = runner
	}
	for i := range wc.ExitTools {
		if wc.ExitTools[i].Type == "" {
			wc.ExitTools[i].Type = "function"
		}
	}
	return wc, nil
}
