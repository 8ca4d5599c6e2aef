package supervisor

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// WorkerKind names the server a worker runs, which decides the default
// readiness probe. An empty kind in a WorkerConfig is detected from the
// command (DetectKind).
type WorkerKind string

// Known worker kinds.
const (
	// KindCorral is corral serve: /health answers 503 {"status":"loading"}
	// until the model is loaded, then 200 {"status":"ok"}.
	KindCorral WorkerKind = "corral"
	// KindLlamaServer is llama.cpp's llama-server: /health answers 503
	// while the model loads and 200 {"status":"ok"} once it is loaded,
	// but /v1/models answers 200 with JSON already during the load.
	KindLlamaServer WorkerKind = "llama-server"
	// KindVLLM is vLLM's OpenAI server, which listens only once its engine
	// is up; its /health answers 200 with an empty body, so the probe is
	// /v1/models.
	KindVLLM WorkerKind = "vllm"
	// KindOther is any other OpenAI-compatible server: the reference
	// design's probe, /v1/models.
	KindOther WorkerKind = "other"
)

// DetectKind guesses the kind of server argv starts: llama-server by the
// program's name, vLLM by a "vllm" program or a vllm module, corral by a
// program named corral* whose first argument is "serve". Anything else is
// KindOther.
func DetectKind(argv []string) WorkerKind {
	if len(argv) == 0 {
		return KindOther
	}
	base := filepath.Base(argv[0])
	switch {
	case strings.HasPrefix(base, "llama-server"):
		return KindLlamaServer
	case strings.HasPrefix(base, "corral") && len(argv) > 1 && argv[1] == "serve":
		return KindCorral
	}
	for _, a := range argv[:min(len(argv), 3)] {
		if filepath.Base(a) == "vllm" || strings.HasPrefix(a, "vllm.") {
			return KindVLLM
		}
	}
	return KindOther
}

// ReadinessPath is the default readiness probe path of a kind, the one
// that proves the model is loaded: /health for corral and llama-server
// (200 only once loaded; llama-server's /v1/models answers 200 while it
// still loads), /v1/models for vLLM and other servers.
func (k WorkerKind) ReadinessPath() string {
	switch k {
	case KindCorral, KindLlamaServer:
		return "/health"
	}
	return "/v1/models"
}

// ServeKeyEnv is the environment variable whose API key specification
// (as --api-key's: the key, then optional attributes) corral serve accepts
// besides its --api-key and --api-key-file keys: the supervisor gives a
// corral worker its generated key (WorkerConfig.GenerateKey) through it.
const ServeKeyEnv = "CORRAL_SERVE_API_KEY"

// KeyEnv is the environment variable from which a server of kind k takes
// an API key when its command line gives none: ServeKeyEnv for corral,
// LLAMA_API_KEY for llama-server, VLLM_API_KEY for vLLM; "" for other
// servers.
func (k WorkerKind) KeyEnv() string {
	switch k {
	case KindCorral:
		return ServeKeyEnv
	case KindLlamaServer:
		return "LLAMA_API_KEY"
	case KindVLLM:
		return "VLLM_API_KEY"
	}
	return ""
}

// valid reports whether k is a known kind.
func (k WorkerKind) valid() bool {
	switch k {
	case KindCorral, KindLlamaServer, KindVLLM, KindOther:
		return true
	}
	return false
}

// remoteBaseURL checks the URL of a remote worker and returns it without a
// trailing slash.
func remoteBaseURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("url %q: want http(s)://host[:port][/prefix]", raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// apiKeyFrom reads the API key named by a worker's api_key_env. The key
// itself never appears in errors.
func apiKeyFrom(env string) (string, error) {
	if env == "" {
		return "", nil
	}
	key := os.Getenv(env)
	if key == "" {
		return "", fmt.Errorf("api_key_env: environment variable %s is unset or empty", env)
	}
	return key, nil
}

// bearer is an http.RoundTripper that sends an API key as
// "Authorization: Bearer" on every request to the worker: readiness
// probes, job requests and proxied chat completions alike.
type bearer struct {
	key  string
	next http.RoundTripper
}

// RoundTrip adds the header to a copy of req.
func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}

// withKey wraps rt to send key, if there is one.
func withKey(rt http.RoundTripper, key string) http.RoundTripper {
	if key == "" {
		return rt
	}
	return bearer{key: key, next: rt}
}
