package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/corral-llm/corral/supervisor"
)

// runSupervise runs the workers of a YAML configuration and serves the job
// API until ctx ends, then stops every worker.
func runSupervise(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("supervise", flag.ContinueOnError)
	configPath := fs.String("config", "", "YAML configuration `file` (see supervisor/example.yaml)")
	host := fs.String("host", "", "listen address (default: the file's host, else 127.0.0.1)")
	port := fs.Int("port", 0, "listen port (default: the file's port, else 8090)")
	logs := addLogFlags(fs)
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
	sup, err := supervisor.New(cfg.Workers)
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
	srv := &http.Server{Handler: sup.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
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
