package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
)

// ReadinessProbe is the HTTP check that marks a worker READY: a GET of Path
// must answer 200 with a JSON body.
type ReadinessProbe struct {
	// Path defaults to the worker kind's ReadinessPath (NewWorker sets
	// it): /health for corral and llama-server, else /v1/models.
	Path string `yaml:"path"`
}

// probeReady runs the readiness probe against baseURL.
func probeReady(ctx context.Context, client *http.Client, baseURL string, p ReadinessProbe) error {
	path := p.Path
	if path == "" {
		path = "/v1/models"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+path, nil)
	if err != nil {
		return fmt.Errorf("readiness probe: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("readiness probe: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("readiness probe: read body: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readiness probe: GET %s: status %d", path, resp.StatusCode)
	}
	if !json.Valid(body) {
		return fmt.Errorf("readiness probe: GET %s: body is not JSON", path)
	}
	return nil
}

// procStat is what corral reads from /proc/<pid>/stat.
type procStat struct {
	state    byte   // R, S, D, T (stopped), Z (zombie), ...
	pgrp     int    // process group id
	cpuTicks uint64 // utime + stime in clock ticks
}

// parseProcStat parses the contents of /proc/<pid>/stat.
func parseProcStat(b []byte) (procStat, error) {
	// The command name (field 2) is in parentheses and may itself contain
	// spaces and parentheses: the fields that follow start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("parse stat: no command name")
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state), f[2] field 5 (pgrp), f[11], f[12] fields 14, 15.
	if len(f) < 13 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("parse stat: %d fields after the command name", len(f))
	}
	pgrp, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return procStat{}, fmt.Errorf("parse stat: pgrp: %w", err)
	}
	utime, err := strconv.ParseUint(string(f[11]), 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("parse stat: utime: %w", err)
	}
	stime, err := strconv.ParseUint(string(f[12]), 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("parse stat: stime: %w", err)
	}
	return procStat{state: f[0][0], pgrp: pgrp, cpuTicks: utime + stime}, nil
}

// groupCPU sums the CPU time of the live (non-zombie) members of process
// group pgid, so that servers that fork helpers (vLLM's engine core) count
// as a whole. It reports how many live members it found.
func groupCPU(pgid int) (ticks uint64, live int) {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue // the process exited while we looked
		}
		st, err := parseProcStat(b)
		if err != nil || st.pgrp != pgid || st.state == 'Z' {
			continue
		}
		ticks += st.cpuTicks
		live++
	}
	return ticks, live
}
