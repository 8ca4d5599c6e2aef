package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/kvevents"
	"github.com/corral-llm/corral/kvevents/kvtest"
	"github.com/corral-llm/corral/serving"
)

// TestKVEventsEndpointFollowsHTTP: tcp://*:PORT listens where the HTTP
// listener does; an explicit endpoint is kept as written.
func TestKVEventsEndpointFollowsHTTP(t *testing.T) {
	loop := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	all := &net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}
	lan := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 8080}
	for _, tt := range []struct {
		flag string
		http *net.TCPAddr
		want string
	}{
		{"tcp://*:5557", loop, "bind:tcp://127.0.0.1:5557"},
		{"tcp://*:5557", lan, "bind:tcp://10.0.0.5:5557"},
		{"tcp://*:5557", all, "bind:tcp://*:5557"},
		{"bind:tcp://*:5557", loop, "bind:tcp://*:5557"},
		{"bind:tcp://127.0.0.1:5557", all, "bind:tcp://127.0.0.1:5557"},
		{"tcp://indexer:5557", loop, "connect:tcp://indexer:5557"},
	} {
		ep, err := kvevents.ParseEndpoint(tt.flag)
		if err != nil {
			t.Fatal(err)
		}
		if got := kvEventsEndpoint(ep, tt.http).String(); got != tt.want {
			t.Errorf("--kv-events %s with HTTP on %v: %s; want %s", tt.flag, tt.http, got, tt.want)
		}
	}
}

// TestKVEventsTokensDefault: --kv-events-tokens auto leaves token ids out
// when the server has tenants: API keys, or --cache-isolation key.
func TestKVEventsTokensDefault(t *testing.T) {
	for _, tt := range []struct {
		flag      string
		keys      bool
		isolation serving.CacheIsolation
		omit      bool
	}{
		{"auto", false, serving.CacheIsolationNone, false},
		{"auto", true, serving.CacheIsolationNone, true},
		{"auto", false, serving.CacheIsolationKey, true},
		{"on", true, serving.CacheIsolationKey, false},
		{"off", false, serving.CacheIsolationNone, true},
	} {
		if omit, err := kvEventsOmitTokens(tt.flag, tt.keys, tt.isolation); err != nil || omit != tt.omit {
			t.Errorf("%s, keys %v, isolation %q: omit %v, %v; want %v", tt.flag, tt.keys, tt.isolation, omit, err, tt.omit)
		}
	}
}

// TestServeKVEventsKeepKeyedPromptsFromSubscribers is issue 31's finding
// 2 as an attack: with API keys and the --kv-events defaults, a raw ZMTP
// client that subscribes to every topic sees a keyed tenant's prompt
// cached (the hash of its first block) but cannot read its tokens. With
// --kv-events-tokens on (the control) it reads them.
func TestServeKVEventsKeepKeyedPromptsFromSubscribers(t *testing.T) {
	for _, tt := range []struct {
		name   string
		args   []string
		tokens bool
	}{
		{"defaults", nil, false},
		{"tokens on", []string{"--kv-events-tokens=on"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, zport, _ := net.SplitHostPort(closedAddr(t))
			const key = "sk-alice-0123456789"
			url := startServe(t, append([]string{"--api-key", key + " name=alice", "--kv-events", "tcp://*:" + zport}, tt.args...)...)
			sub, err := kvtest.Dial("127.0.0.1:"+zport, patience)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			if err := sub.Subscribe(""); err != nil {
				t.Fatal(err)
			}
			sub.SetReadDeadline(time.Now().Add(patience))
			if _, err := sub.Sync(); err != nil {
				t.Fatal(err)
			}

			prompt := strings.Repeat("The launch code of tenant alice is swordfish seven. ", 4)
			var tok struct {
				Tokens []int32 `json:"tokens"`
			}
			post(t, url+"/tokenize", key, map[string]any{"content": prompt, "add_special": true}, &tok)
			if len(tok.Tokens) < kvevents.BlockSize {
				t.Fatalf("a prompt of %d tokens: less than a block", len(tok.Tokens))
			}
			first := kvevents.Sum(kvevents.Root(""), tok.Tokens[:kvevents.BlockSize], nil)
			post(t, url+"/completion", key, map[string]any{"prompt": prompt, "n_predict": 4, "temperature": 0}, nil)

			// Read until the prompt's first block is told stored.
			for {
				m, err := sub.Recv()
				if err != nil {
					t.Fatalf("the prompt's first block never told: %v", err)
				}
				b, err := kvtest.Decode(m.Payload)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range b.Events {
					if e.Kind != "BlockStored" {
						continue
					}
					if got := len(e.Tokens) > 0; got != tt.tokens || !e.TokensField {
						t.Fatalf("a BlockStored event with %d token ids (field there: %v); want token ids: %v", len(e.Tokens), e.TokensField, tt.tokens)
					}
					for i, h := range e.Hashes {
						if !bytes.Equal(h, first[:]) {
							continue
						}
						if tt.tokens {
							for j, id := range e.Tokens[i*kvevents.BlockSize : (i+1)*kvevents.BlockSize] {
								if id != uint64(tok.Tokens[j]) {
									t.Fatalf("token %d of the first block: %d; the prompt's is %d", j, id, tok.Tokens[j])
								}
							}
						}
						return
					}
				}
			}
		})
	}
}

// post posts body as JSON to url with the API key key, and decodes the
// answer into out (nil: none).
func post(t *testing.T, url, key string, body, out any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, a)
	}
	if out != nil {
		if err := json.Unmarshal(a, out); err != nil {
			t.Fatalf("POST %s: %v: %s", url, err, a)
		}
	}
}
