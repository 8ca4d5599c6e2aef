package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
