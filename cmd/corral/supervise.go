package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/supervisor"
)

// runSupervise runs the workers of a YAML configuration and serves the job
// API until ctx ends, then stops every worker. "corral supervise restart
// NAME" instead asks a running supervisor to restart a worker.
func runSupervise(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "restart" {
		return runSuperviseRestart(ctx, args[1:], os.Stdout)
	}
	fs := flag.NewFlagSet("supervise", flag.ContinueOnError)
	configPath := fs.String("config", "", "YAML configuration `file` (see supervisor/example.yaml)")
	host := fs.String("host", "", "listen address (default: the file's host, else 127.0.0.1)")
	port := fs.Int("port", 0, "listen port (default: the file's port, else 8090)")
	maxBody := fs.Int64("max-body", supervisor.DefaultMaxBody, "largest request body in `bytes` (a job's prompts and params, a chat completion); larger → 413")
	logs := addLogFlags(fs)
	acc := addAccessFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := logs.logger(os.Stderr)
	if err != nil {
		return err
	}
	if *configPath == "" {
		return errors.New("--config is required")
	}
	access, err := acc.setup(log)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find corral binary: %w", err)
	}
	cfg, err := supervisor.LoadConfig(*configPath, self)
	if err != nil {
		return err
	}
	for i := range cfg.Workers {
		if cfg.Workers[i].Logger == nil {
			cfg.Workers[i].Logger = log
		}
	}
	addr := listenAddr(cfg, *host, *port)
	sup, err := supervisor.New(cfg.Workers, supervisor.Options{MaxJobBytes: cfg.MaxJobBytes, MaxJobBytesPerKey: cfg.MaxJobBytesPerKey,
		MaxBody: *maxBody, Keys: access.policy.Keys.Len() > 0})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	if err := sup.Start(ctx); err != nil {
		ln.Close()
		return err
	}
	access.announce(ln, log)
	hup, stopHUP := context.WithCancel(ctx)
	waitHUP := reloadKeysOnHUP(hup, access.policy.Keys, log)
	defer func() { stopHUP(); waitHUP() }()
	h := sup.Gated(gate.Config{Logger: log, Policy: access.policy,
		Quiet: func(r *http.Request) bool { return r.URL.Path == "/metrics" }})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, TLSConfig: access.tls}
	served := make(chan error, 1)
	if access.tls != nil {
		go func() { served <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { served <- srv.Serve(ln) }()
	}
	log.Info("supervising", "addr", ln.Addr().String(), "workers", len(cfg.Workers))

	select {
	case <-ctx.Done():
	case err = <-served:
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shutErr := srv.Shutdown(stopCtx)
	if err == nil {
		<-served
	}
	return errors.Join(err, shutErr, sup.Stop(stopCtx))
}

// runSuperviseRestart is "corral supervise restart [--url URL] NAME": POST
// /v1/workers/NAME/restart on a running supervisor, which restarts the
// worker with reason manual (and so leaves FAILED).
func runSuperviseRestart(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("supervise restart", flag.ContinueOnError)
	base := fs.String("url", "http://127.0.0.1:8090", "the supervisor's base `URL`")
	key := fs.String("api-key", os.Getenv("CORRAL_API_KEY"), "an admin API `key` of the supervisor (default $CORRAL_API_KEY)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: corral supervise restart [--url URL] NAME")
		fs.PrintDefaults()
	}
	// Flags may come before or after the name.
	var names []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		names, args = append(names, fs.Arg(0)), fs.Args()[1:]
	}
	if len(names) != 1 {
		fs.Usage()
		return errors.New("restart: want exactly one worker name")
	}
	u := strings.TrimRight(*base, "/") + "/v1/workers/" + url.PathEscape(names[0]) + "/restart"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	if *key != "" {
		req.Header.Set("Authorization", "Bearer "+*key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return fmt.Errorf("restart: read answer: %w", err)
	}
	var ans struct {
		OK     bool   `json:"ok"`
		Error  string `json:"error"`
		Worker string `json:"worker"`
	}
	if err := json.Unmarshal(body, &ans); err != nil || resp.StatusCode != http.StatusOK || !ans.OK {
		return fmt.Errorf("restart %s: %s: %s", names[0], resp.Status, bytes.TrimSpace(body))
	}
	fmt.Fprintf(out, "worker %s: restart requested\n", ans.Worker)
	return nil
}

// listenAddr applies the flags over the file's host and port.
func listenAddr(cfg *supervisor.Config, host string, port int) string {
	if host == "" {
		host = cfg.Host
	}
	if host == "" {
		host = "127.0.0.1"
	}
	if port == 0 {
		port = cfg.Port
	}
	if port == 0 {
		port = 8090
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}
