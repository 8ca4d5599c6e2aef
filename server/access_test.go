package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	ollama "github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/server"
)

// The gate in front of the real server: API keys as the official SDKs send
// them, the browser checks, TLS.

// headerTransport adds a header to every request, as a client configured
// with a key does.
type headerTransport struct {
	base        http.RoundTripper
	name, value string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.name, h.value)
	return h.base.RoundTrip(r)
}

func TestAPIKeysThroughClients(t *testing.T) {
	ts := e2etest.Start(t, testmodel.TinyStories656K, e2etest.Options{Server: server.Config{Policy: e2etest.KeyPolicy(t, nil, nil, e2etest.APIKey+" name=tester")}})
	ctx := context.Background()
	params := openai.CompletionNewParams{Model: "tiny", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(4)}

	// openai-go with a wrong key: a 401 in OpenAI's shape.
	bad := openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("sk-wrong-000000000"), option.WithMaxRetries(0), option.WithHTTPClient(ts.Client))
	_, err := bad.Completions.New(ctx, params)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "invalid_api_key" {
		t.Fatalf("wrong key: %v", err)
	}
	good := openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey(e2etest.APIKey), option.WithMaxRetries(0), option.WithHTTPClient(ts.Client))
	if c, err := good.Completions.New(ctx, params); err != nil || len(c.Choices) != 1 || c.Choices[0].Text == "" {
		t.Fatalf("right key: %v %+v", err, c)
	}

	// Ollama's client: no key, then the key as a Bearer header.
	base, _ := url.Parse(ts.URL)
	noKey := ollama.NewClient(base, ts.Client)
	_, err = noKey.List(ctx)
	var authErr ollama.AuthorizationError
	if !errors.As(err, &authErr) || authErr.StatusCode != 401 {
		t.Fatalf("ollama without a key: %#v", err)
	}
	keyed := ollama.NewClient(base, &http.Client{Transport: headerTransport{ts.Client.Transport, "Authorization", "Bearer " + e2etest.APIKey}})
	if list, err := keyed.List(ctx); err != nil || len(list.Models) != 1 {
		t.Fatalf("ollama with the key: %v %+v", err, list)
	}

	// The health check and the page stay open.
	for _, p := range []string{"/health", "/"} {
		resp, err := ts.Client.Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s without a key: %d", p, resp.StatusCode)
		}
	}
	// The live view and the metrics do not.
	for _, p := range []string{"/v1/live", "/metrics", "/slots"} {
		resp, err := ts.Client.Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("GET %s without a key: %d", p, resp.StatusCode)
		}
	}
}

// A web page elsewhere posts text/plain (no preflight) to unload the model:
// refused, and the model stays loaded. The same with DNS rebinding: the
// page's own host name, pointing at 127.0.0.1.
func TestBrowserCannotUnload(t *testing.T) {
	ts := e2etest.StartRegistry(t, server.Config{})
	ctx := context.Background()
	base, _ := url.Parse(ts.URL)
	client := ollama.NewClient(base, ts.Client)
	greedy := map[string]any{"num_predict": 2, "temperature": 0, "seed": 42, "ignore_eos": true}
	if err := client.Generate(ctx, &ollama.GenerateRequest{Model: "tiny", Prompt: "Hi", Options: greedy}, func(ollama.GenerateResponse) error { return nil }); err != nil {
		t.Fatal(err)
	}
	unload := `{"model":"tiny","keep_alive":0}`
	_, port, _ := net.SplitHostPort(base.Host)
	for _, tc := range []struct {
		name, host, origin, site string
	}{
		{"cross-site page", "", "https://evil.example", "cross-site"},
		{"rebound page", "evil.example:" + port, "http://evil.example:" + port, "same-origin"},
	} {
		req, _ := http.NewRequest("POST", ts.URL+"/api/generate", strings.NewReader(unload))
		req.Header.Set("Content-Type", "text/plain")
		req.Header.Set("Origin", tc.origin)
		req.Header.Set("Sec-Fetch-Site", tc.site)
		if tc.host != "" {
			req.Host = tc.host
		}
		resp, err := ts.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || !strings.Contains(string(body), `"error"`) {
			t.Errorf("%s: %d %s, want 403 in Ollama's shape", tc.name, resp.StatusCode, body)
		}
	}
	ps, err := client.ListRunning(ctx)
	if err != nil || len(ps.Models) != 1 {
		t.Errorf("after the pages' requests the model is not loaded: %v %+v", err, ps)
	}
}

func TestVoiceSocketOrigin(t *testing.T) {
	ts := e2etest.Start(t, testmodel.TinyStories656K, e2etest.Options{Server: server.Config{Policy: e2etest.KeyPolicy(t, nil, []string{"https://app.example"})}})
	ctx := context.Background()
	ws := "ws" + strings.TrimPrefix(ts.URL, "http") + "/v1/voice"
	for _, tc := range []struct {
		origin string
		ok     bool
	}{
		{"https://evil.example", false},
		{"https://app.example", true},
		{ts.URL, true},
	} {
		conn, resp, err := websocket.Dial(ctx, ws, &websocket.DialOptions{HTTPClient: ts.Client, HTTPHeader: http.Header{"Origin": {tc.origin}}})
		if conn != nil {
			conn.Close(websocket.StatusNormalClosure, "")
		}
		if (err == nil) != tc.ok {
			code := 0
			if resp != nil {
				code = resp.StatusCode
			}
			t.Errorf("origin %s: err %v (status %d), want ok=%v", tc.origin, err, code, tc.ok)
		}
	}
}

// writeTestCert writes a self-signed certificate for 127.0.0.1 and returns
// the files and a pool that trusts it.
func writeTestCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "corral test"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	kb, _ := x509.MarshalECPrivateKey(key)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, pool
}

// HTTPS with HTTP/2, and a streamed answer over it.
func TestTLS(t *testing.T) {
	certFile, keyFile, pool := writeTestCert(t)
	cf, err := gate.LoadCertFiles(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := e2etest.Start(t, testmodel.TinyStories656K, e2etest.Options{Server: server.Config{TLS: cf.TLSConfig()}})
	url := "https" + strings.TrimPrefix(ts.URL, "http")
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	defer hc.CloseIdleConnections()
	client := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0), option.WithHTTPClient(hc))
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:       "tiny",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me a story.")},
		MaxTokens:   openai.Int(8),
		Temperature: openai.Float(0),
		Seed:        openai.Int(42),
	}, option.WithJSONSet("ignore_eos", true))
	n := 0
	for stream.Next() {
		n++
	}
	if err := stream.Err(); err != nil || n == 0 {
		t.Fatalf("stream over TLS: %d chunks, %v", n, err)
	}
	resp, err := hc.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.TLS == nil {
		t.Errorf("health over TLS: %s, TLS %v", resp.Proto, resp.TLS != nil)
	}
	// Plain HTTP to the TLS port is not served.
	if resp, err := ts.Client.Get(ts.URL + "/health"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("plain HTTP answered 200 on the TLS port")
		}
	}
}
