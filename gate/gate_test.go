package gate

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	userSecret  = "sk-user-0123456789"
	adminSecret = "sk-admin-0123456789"
)

// whoami answers with the caller the gate let through.
var whoami = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	c := FromContext(r.Context())
	json.NewEncoder(w).Encode(map[string]any{"id": c.ID(), "admin": c.Admin()})
})

func mustKeys(t *testing.T, specs ...string) *Keys {
	t.Helper()
	ks, err := LoadKeys(specs, "")
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

func mustPolicy(t *testing.T, ks *Keys, hosts, origins []string) Policy {
	t.Helper()
	p, err := NewPolicy(ks, hosts, origins)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type answer struct {
	status int
	header http.Header
	body   map[string]any
}

func do(t *testing.T, h http.Handler, r *http.Request) answer {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	a := answer{status: w.Code, header: w.Header()}
	if w.Body.Len() > 0 {
		if err := json.Unmarshal(w.Body.Bytes(), &a.body); err != nil {
			t.Fatalf("%s %s: body %q: %v", r.Method, r.URL, w.Body, err)
		}
	}
	return a
}

func TestNoKeysEveryoneIsAdmin(t *testing.T) {
	g := New(Config{Logger: slog.New(slog.DiscardHandler)}, whoami)
	a := do(t, g, httptest.NewRequest("POST", "/v1/chat/completions", nil))
	if a.status != 200 || a.body["admin"] != true || a.body["id"] != "" {
		t.Fatalf("got %d %v", a.status, a.body)
	}
}

func TestKeys(t *testing.T) {
	var logs bytes.Buffer
	ks := mustKeys(t, userSecret+" name=alice", adminSecret+" role=admin")
	g := New(Config{
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Policy: mustPolicy(t, ks, nil, nil),
		Public: func(r *http.Request) bool { return r.URL.Path == "/health" },
	}, whoami)
	for _, tc := range []struct {
		name, path, header, value string
		status                    int
		id                        string
		admin                     bool
	}{
		{"no key", "/v1/models", "", "", 401, "", false},
		{"wrong key", "/v1/models", "Authorization", "Bearer sk-nobody-000000", 401, "", false},
		{"wrong scheme", "/v1/models", "Authorization", "Basic " + userSecret, 401, "", false},
		{"bearer user", "/v1/models", "Authorization", "Bearer " + userSecret, 200, "alice", false},
		{"bearer, any case", "/v1/models", "Authorization", "bearer " + userSecret, 200, "alice", false},
		{"x-api-key admin", "/v1/messages", "X-Api-Key", adminSecret, 200, "key-", true},
		{"public without key", "/health", "", "", 200, "", false},
		{"public with key", "/health", "Authorization", "Bearer " + adminSecret, 200, "key-", true},
	} {
		r := httptest.NewRequest("GET", tc.path, nil)
		if tc.header != "" {
			r.Header.Set(tc.header, tc.value)
		}
		a := do(t, g, r)
		if a.status != tc.status {
			t.Errorf("%s: status %d, want %d (%v)", tc.name, a.status, tc.status, a.body)
			continue
		}
		if tc.status == 401 {
			if a.header.Get("WWW-Authenticate") == "" || a.body["error"] == nil {
				t.Errorf("%s: 401 without WWW-Authenticate or error body: %v %v", tc.name, a.header, a.body)
			}
			continue
		}
		id, _ := a.body["id"].(string)
		if !strings.HasPrefix(id, tc.id) || (tc.id == "" && id != "") || a.body["admin"] != tc.admin {
			t.Errorf("%s: caller %v, want id %q… admin %v", tc.name, a.body, tc.id, tc.admin)
		}
	}
	if strings.Contains(logs.String(), userSecret) || strings.Contains(logs.String(), adminSecret) {
		t.Errorf("a key reached the log:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), `"key":"alice"`) {
		t.Errorf("the request log does not name the key:\n%s", logs.String())
	}
}

func TestParseKey(t *testing.T) {
	for _, bad := range []string{"", "short", "role=admin sk-0123456789", "sk-0123456789 role=root",
		"sk-0123456789 priority=x", "sk-0123456789 name=a/b", "sk-0123456789 tpm=-1", "sk-0123456789 colour=red", "sk-0123456789 role"} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
	k, err := ParseKey("sk-0123456789 role=admin name=ops priority=-5 concurrency=3 tpm=1000")
	if err != nil || k.Role != RoleAdmin || k.ID != "ops" || *k.Priority != -5 || k.MaxConcurrent != 3 || k.TokensPerMinute != 1000 {
		t.Fatalf("got %+v, %v", k, err)
	}
	if _, err := LoadKeys([]string{"sk-0123456789", "sk-0123456789 name=again"}, ""); err == nil {
		t.Error("the same secret twice was accepted")
	}
}

func TestKeyFileReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("# team keys\nsk-first-000000 name=first\n\n")
	ks, err := LoadKeys([]string{"sk-flag-0000000"}, file)
	if err != nil {
		t.Fatal(err)
	}
	if ks.Len() != 2 || ks.Lookup("sk-first-000000") == nil || ks.Lookup("sk-flag-0000000") == nil {
		t.Fatalf("keys after load: %d", ks.Len())
	}
	write("sk-second-00000 name=second role=admin\n")
	if err := ks.Reload(); err != nil {
		t.Fatal(err)
	}
	if ks.Lookup("sk-first-000000") != nil || ks.Lookup("sk-second-00000") == nil || ks.Lookup("sk-flag-0000000") == nil {
		t.Error("reload did not replace the file's keys (and keep the flag's)")
	}
	write("sk-third-000000 role=superuser\n")
	if err := ks.Reload(); err == nil || !strings.Contains(err.Error(), ":1:") {
		t.Errorf("bad file: err %v, want one naming line 1", err)
	}
	if ks.Lookup("sk-second-00000") == nil {
		t.Error("a failed reload dropped the keys in use")
	}
}

func TestConcurrencyLimit(t *testing.T) {
	ks := mustKeys(t, userSecret+" concurrency=1")
	entered, release := make(chan struct{}), make(chan struct{})
	g := New(Config{Logger: slog.New(slog.DiscardHandler), Policy: mustPolicy(t, ks, nil, nil)},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hold" {
				entered <- struct{}{}
				<-release
			}
		}))
	req := func(path string) *http.Request {
		r := httptest.NewRequest("POST", path, nil)
		r.Header.Set("Authorization", "Bearer "+userSecret)
		return r
	}
	done := make(chan int)
	go func() { done <- do(t, g, req("/hold")).status }()
	<-entered
	a := do(t, g, req("/other"))
	if a.status != 429 || a.header.Get("Retry-After") == "" {
		t.Errorf("second request while one is in flight: %d, Retry-After %q", a.status, a.header.Get("Retry-After"))
	}
	close(release)
	if s := <-done; s != 200 {
		t.Errorf("held request: %d", s)
	}
	if a := do(t, g, req("/other")); a.status != 200 {
		t.Errorf("after the first ended: %d", a.status)
	}
}

func TestTokensPerMinute(t *testing.T) {
	ks := mustKeys(t, userSecret+" tpm=60")
	g := New(Config{Logger: slog.New(slog.DiscardHandler), Policy: mustPolicy(t, ks, nil, nil)},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { Charge(r.Context(), 600) }))
	req := func() *http.Request {
		r := httptest.NewRequest("POST", "/v1/completions", nil)
		r.Header.Set("X-Api-Key", userSecret)
		return r
	}
	if a := do(t, g, req()); a.status != 200 {
		t.Fatalf("first request: %d", a.status)
	}
	a := do(t, g, req())
	if a.status != 429 {
		t.Fatalf("after spending 10 minutes' worth: %d", a.status)
	}
	// 60 tokens a minute, 540 short: about nine minutes.
	if ra, _ := strconv.Atoi(a.header.Get("Retry-After")); ra < 500 || ra > 600 {
		t.Errorf("Retry-After %q, want about 540", a.header.Get("Retry-After"))
	}
}

// TestKeptLease: a request whose handler keeps its place (Keep) for work
// that goes on after the answer counts among its key's requests in
// flight until the work releases it, and charges its tokens through the
// lease after that; unmetered requests go through meanwhile, and count
// for nothing.
func TestKeptLease(t *testing.T) {
	ks := mustKeys(t, userSecret+" concurrency=1 tpm=60")
	var kept *Lease
	g := New(Config{Logger: slog.New(slog.DiscardHandler), Policy: mustPolicy(t, ks, nil, nil),
		Unmetered: func(r *http.Request) bool { return r.Method == http.MethodGet }},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/job":
				if kept = Keep(r.Context()); kept == nil || Keep(r.Context()) != nil {
					t.Errorf("Keep: %v, then a second lease", kept)
				}
			case "/status":
				if Keep(r.Context()) != nil {
					t.Error("an unmetered request has a lease")
				}
				Charge(r.Context(), 1000) // nothing to charge it to
			}
		}))
	req := func(method, path string) *http.Request {
		r := httptest.NewRequest(method, path, nil)
		r.Header.Set("Authorization", "Bearer "+userSecret)
		return r
	}
	if a := do(t, g, req("POST", "/job")); a.status != 200 {
		t.Fatalf("job: %d", a.status)
	}
	if a := do(t, g, req("POST", "/job")); a.status != 429 || a.header.Get("Retry-After") != "1" {
		t.Fatalf("a second job while the first one's lease is kept: %d, Retry-After %q", a.status, a.header.Get("Retry-After"))
	}
	for range 3 {
		if a := do(t, g, req("GET", "/status")); a.status != 200 {
			t.Fatalf("an unmetered request while the key's place is taken: %d", a.status)
		}
	}
	kept.Release()
	kept.Release() // once only: a second release must not free another place
	kept.Charge(600)
	a := do(t, g, req("POST", "/job"))
	if a.status != 429 || a.header.Get("Retry-After") == "1" {
		t.Fatalf("a job after the first one charged 10 minutes' tokens: %d, Retry-After %q", a.status, a.header.Get("Retry-After"))
	}
	if a := do(t, g, req("GET", "/status")); a.status != 200 {
		t.Fatalf("an unmetered request of a key out of tokens: %d", a.status)
	}
	if a := do(t, g, httptest.NewRequest("GET", "/status", nil)); a.status != 401 {
		t.Fatalf("an unmetered request without a key: %d", a.status)
	}
	var nilLease *Lease
	nilLease.Charge(1)
	nilLease.Release()
	if Keep(context.Background()) != nil {
		t.Fatal("Keep outside a request")
	}
}

// TestLeaseReleasedOnce: the place of a request that kept it comes back
// once the work releases it, and not twice however many releases race
// with the request's end.
func TestLeaseReleasedOnce(t *testing.T) {
	ks := mustKeys(t, userSecret+" concurrency=2")
	leases := make(chan *Lease, 2)
	g := New(Config{Logger: slog.New(slog.DiscardHandler), Policy: mustPolicy(t, ks, nil, nil)},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/job" {
				leases <- Keep(r.Context())
			}
		}))
	req := func(path string) *http.Request {
		r := httptest.NewRequest("POST", path, nil)
		r.Header.Set("Authorization", "Bearer "+userSecret)
		return r
	}
	for range 2 {
		if a := do(t, g, req("/job")); a.status != 200 {
			t.Fatalf("job: %d", a.status)
		}
	}
	if a := do(t, g, req("/other")); a.status != 429 {
		t.Fatalf("a request beside two kept leases: %d", a.status)
	}
	first := <-leases
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); first.Release() }()
	}
	wg.Wait()
	if a := do(t, g, req("/other")); a.status != 200 {
		t.Fatalf("a request after one lease was released: %d", a.status)
	}
	if a := do(t, g, req("/job")); a.status != 200 {
		t.Fatalf("a job after one lease was released: %d", a.status)
	}
	if a := do(t, g, req("/other")); a.status != 429 {
		t.Fatalf("a request beside two kept leases again (released twice?): %d", a.status)
	}
	(<-leases).Release()
	(<-leases).Release()
}

// A real listener on 127.0.0.1, as a browser reaches it after DNS
// rebinding: any Host header but local names is refused.
func TestHostCheck(t *testing.T) {
	for _, tc := range []struct {
		allowed []string
		host    string
		status  int
	}{
		{nil, "localhost", 200},
		{nil, "127.0.0.1", 200},
		{nil, "app.localhost", 200},
		{nil, "evil.example", 403},
		{[]string{"evil.example"}, "evil.example", 200},
		{[]string{"*.corp.example"}, "llm.corp.example", 200},
		{[]string{"*.corp.example"}, "localhost", 403},
	} {
		g := New(Config{Logger: slog.New(slog.DiscardHandler), Policy: mustPolicy(t, nil, tc.allowed, nil)}, whoami)
		ts := httptest.NewServer(g)
		_, port, _ := strings.Cut(strings.TrimPrefix(ts.URL, "http://"), ":")
		r, _ := http.NewRequest("GET", ts.URL+"/v1/models", nil)
		r.Host = tc.host + ":" + port
		resp, err := ts.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ts.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("allowed %v, Host %s: %d %s, want %d", tc.allowed, tc.host, resp.StatusCode, body, tc.status)
		}
	}
}

func TestCrossOrigin(t *testing.T) {
	changed := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { changed++ })
	plain := New(Config{Logger: slog.New(slog.DiscardHandler)}, h)
	trusting := New(Config{Logger: slog.New(slog.DiscardHandler), Policy: mustPolicy(t, nil, nil, []string{"https://app.example"})}, h)
	post := func(origin, site string) *http.Request {
		r := httptest.NewRequest("POST", "http://localhost:8080/api/generate", strings.NewReader(`{"model":"m","keep_alive":0}`))
		r.Header.Set("Content-Type", "text/plain")
		r.Header.Set("Origin", origin)
		r.Header.Set("Sec-Fetch-Site", site)
		return r
	}
	if a := do(t, plain, post("https://evil.example", "cross-site")); a.status != 403 || changed != 0 {
		t.Errorf("cross-site text/plain POST: %d, handler ran %d times", a.status, changed)
	}
	if a := do(t, plain, post("http://localhost:8080", "same-origin")); a.status != 200 || changed != 1 {
		t.Errorf("same-origin POST: %d", a.status)
	}
	a := do(t, trusting, post("https://app.example", "cross-site"))
	if a.status != 200 || a.header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Errorf("trusted origin: %d, ACAO %q", a.status, a.header.Get("Access-Control-Allow-Origin"))
	}
	if a := do(t, trusting, post("https://evil.example", "cross-site")); a.status != 403 || a.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("untrusted origin next to a trusted one: %d %v", a.status, a.header)
	}
	pre := func(origin string) *http.Request {
		r := httptest.NewRequest("OPTIONS", "/v1/chat/completions", nil)
		r.Header.Set("Origin", origin)
		r.Header.Set("Access-Control-Request-Method", "POST")
		r.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
		return r
	}
	a = do(t, trusting, pre("https://app.example"))
	if a.status != 204 || a.header.Get("Access-Control-Allow-Headers") != "authorization, content-type" || !strings.Contains(a.header.Get("Access-Control-Allow-Methods"), "POST") {
		t.Errorf("preflight of a trusted origin: %d %v", a.status, a.header)
	}
	if a := do(t, trusting, pre("https://evil.example")); a.status != 403 || a.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight of another origin: %d %v", a.status, a.header)
	}
}

func TestOriginAllowed(t *testing.T) {
	var got []bool
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = append(got, OriginAllowed(r)) })
	g := New(Config{Logger: slog.New(slog.DiscardHandler), Policy: mustPolicy(t, nil, nil, []string{"https://app.example"})}, h)
	for _, tc := range []struct {
		origin, host string
		want         bool
	}{
		{"", "localhost:8080", true},
		{"http://localhost:8080", "localhost:8080", true},
		{"http://localhost:9999", "localhost:8080", false},
		{"https://app.example", "localhost:8080", true},
		{"https://evil.example", "localhost:8080", false},
	} {
		got = nil
		r := httptest.NewRequest("GET", "/v1/voice", nil)
		r.Host = tc.host
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		do(t, g, r)
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("Origin %q Host %q: %v, want %v", tc.origin, tc.host, got, tc.want)
		}
	}
	// Rebinding: the page's origin and Host agree, on a loopback
	// connection; the Host check refuses the upgrade, and OriginAllowed
	// alone would refuse it too.
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if OriginAllowed(r) {
			w.WriteHeader(200)
			return
		}
		w.WriteHeader(403)
	}))
	defer ts.Close()
	g2 := New(Config{Logger: slog.New(slog.DiscardHandler)}, ts.Config.Handler)
	ts.Config.Handler = g2
	r, _ := http.NewRequest("GET", ts.URL+"/v1/voice", nil)
	r.Host = "evil.example"
	r.Header.Set("Origin", "http://evil.example")
	resp, err := ts.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("rebound page's WebSocket: %d", resp.StatusCode)
	}
}

func TestCallerContext(t *testing.T) {
	if c := FromContext(context.Background()); !c.Admin() || c.ID() != "" {
		t.Errorf("outside a gate: %+v", c)
	}
	k, _ := ParseKey("sk-0123456789 priority=3")
	c := FromContext(WithCaller(context.Background(), Caller{Key: k}))
	if p, ok := c.Priority(); !ok || p != 3 || c.Admin() {
		t.Errorf("user key with priority 3: %v %v admin %v", p, ok, c.Admin())
	}
	if (Caller{anonymous: true}).Admin() {
		t.Error("an anonymous caller is admin")
	}
}

// writeCert writes a fresh self-signed certificate for name and its key.
func writeCert(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		DNSNames: []string{name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}

func TestCertFilesReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeCert(t, dir, "one.example")
	c, err := LoadCertFiles(certFile, keyFile, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	c.every = 0
	name := func() string {
		cert, err := c.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(cert.Certificate[0])
		return leaf.Subject.CommonName
	}
	if n := name(); n != "one.example" {
		t.Fatalf("first: %s", n)
	}
	writeCert(t, dir, "two.example")
	later := time.Now().Add(time.Minute)
	os.Chtimes(certFile, later, later)
	os.Chtimes(keyFile, later, later)
	if n := name(); n != "two.example" {
		t.Errorf("after renewal: %s", n)
	}
	os.WriteFile(certFile, []byte("half written"), 0o600)
	even := later.Add(time.Minute)
	os.Chtimes(certFile, even, even)
	if n := name(); n != "two.example" {
		t.Errorf("after a broken write: %s, want the last good one", n)
	}
}
