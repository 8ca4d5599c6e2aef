// Command route measures routing among three corral serve processes on
// 127.0.0.2, .3 and .4: round robin, the endpoint picker's queue and
// KV-cache scorers, those with its prefix scorer (the manifest's
// configuration), and those with the precise prefix-cache scorer fed by
// the processes' KV events (deploy/picker's precise.go), on a workload of multi-turn conversations that share a
// long system prompt; then the same with one process given a backlog of
// long prompts. It prints a Markdown table. scripts/route.sh runs it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/corral-llm/corral/deploy/picker"
)

// config is a picker configuration measured: the manifest's weights
// (queue 2, KV cache 2) with a prefix scorer ("": none, "prefix" the
// picker's, "precise" the one on KV events, whose indexer binds zmq and
// which renders prompts on the corral at render) of weight prefixWeight.
func config(scorer string, prefixWeight int, zmq, render string) []byte {
	c := picker.Config{Queue: 2, KVCache: 2, ZMQEndpoint: zmq, RenderURL: render}
	switch scorer {
	case "prefix":
		c.Prefix = prefixWeight
	case "precise":
		c.Precise = prefixWeight
	}
	return c.YAML()
}

type options struct {
	bin, model                 string
	conversations, turns, conc int
	systemTokens, maxTokens    int
	backlog, backlogTokens     int
	prefixWeight               int
	rows                       string
	serveArgs                  []string
}

func main() {
	var o options
	flag.StringVar(&o.bin, "corral", "bin/corral", "the corral binary")
	flag.StringVar(&o.model, "model", "", "the GGUF model the three processes serve")
	flag.IntVar(&o.conversations, "conversations", 32, "conversations")
	flag.IntVar(&o.turns, "turns", 4, "turns of each conversation")
	flag.IntVar(&o.conc, "c", 8, "conversations at once")
	flag.IntVar(&o.systemTokens, "system-tokens", 1000, "tokens of the shared system prompt (at least)")
	flag.IntVar(&o.maxTokens, "max-tokens", 8, "tokens generated per turn")
	flag.IntVar(&o.backlog, "backlog", 6, "long-prompt requests kept in flight on the first process for the skewed rows")
	flag.IntVar(&o.backlogTokens, "backlog-tokens", 3000, "tokens of each backlog prompt (at least)")
	flag.IntVar(&o.prefixWeight, "prefix-weight", 3, "the prefix scorers' weight (the manifest's: 3)")
	flag.StringVar(&o.rows, "rows", "rr,qkv,prefix,precise,rr-skew,prefix-skew,precise-skew", "rows to measure, comma-separated")
	serve := flag.String("serve-args", "--threads=1 --parallel=4 --ctx-size=32768", "flags of each corral serve")
	flag.Parse()
	o.serveArgs = strings.Fields(*serve)
	if o.model == "" {
		fmt.Fprintln(os.Stderr, "route: -model is required")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "route:", err)
		os.Exit(1)
	}
}

// row is one measured configuration.
type row struct {
	name           string
	prompt, cached float64 // the conversations' prompt tokens, those found cached
	ttft           []time.Duration
	perPod         []int
	failed         int
}

func run(o options) error {
	hosts := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	fmt.Printf("| routing | prompt tokens served from cache | TTFT p50 | TTFT p99 | requests per process | failed |\n|---|---|---|---|---|---|\n")
	modes := map[string]string{"rr": "round robin", "qkv": "queue + kv-cache", "prefix": "queue + kv-cache + prefix", "precise": "queue + kv-cache + precise prefix (KV events)"}
	for _, id := range strings.Split(o.rows, ",") {
		base, skew := strings.CutSuffix(id, "-skew")
		mode, ok := modes[base]
		if !ok {
			return fmt.Errorf("unknown row %q", id)
		}
		r, err := measure(o, hosts, mode, skew)
		if err != nil {
			return fmt.Errorf("%s: %w", mode, err)
		}
		// Each row as it is measured: a long run shows what it has.
		fmt.Printf("| %s | %.1f %% (%.0f of %.0f) | %s | %s | %v | %d |\n", r.name, 100*r.cached/max(r.prompt, 1), r.cached, r.prompt,
			pct(r.ttft, 50), pct(r.ttft, 99), r.perPod, r.failed)
	}
	return nil
}

func pct(ds []time.Duration, p int) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, (len(s)*p+99)/100-1)
	return s[max(i, 0)].Round(time.Millisecond).String()
}

// measure starts three fresh processes (empty caches), routes the
// workload through the gateway in mode, and reads the processes' prefix
// cache counters.
func measure(o options, hosts []string, mode string, skew bool) (row, error) {
	r := row{name: mode}
	scorer := ""
	switch {
	case strings.Contains(mode, "precise"):
		scorer = "precise"
	case strings.Contains(mode, "prefix"):
		scorer = "prefix"
	}
	if scorer != "" && o.prefixWeight != 3 {
		r.name += fmt.Sprintf(" (weight %d)", o.prefixWeight)
	}
	if skew {
		r.name += ", first process backlogged"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	port, err := picker.FreePort(hosts...)
	if err != nil {
		return r, err
	}
	dir, err := os.MkdirTemp("", "route-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	if err := os.Symlink(o.model, dir+"/m.gguf"); err != nil {
		return r, err
	}
	args := append([]string{"--models-dir=" + dir, "--log-level=error"}, o.serveArgs...)
	var zmq string
	if scorer == "precise" {
		zport, err := picker.FreePort("127.0.0.1")
		if err != nil {
			return r, err
		}
		zmq = "tcp://127.0.0.1:" + zport
		args = append(args, "--kv-events="+zmq)
	}
	var servers []*picker.Corral
	defer func() {
		for _, s := range servers {
			s.Stop()
		}
	}()
	for _, h := range hosts {
		s, err := picker.StartCorral(ctx, o.bin, h, port, nil, args...)
		if err != nil {
			return r, err
		}
		servers = append(servers, s)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	system, err := text(client, servers[0].Addr, "Once upon a time there was a kind old king who lived in a castle by the sea, and every morning he walked", o.systemTokens)
	if err != nil {
		return r, err
	}
	var long string
	if skew {
		if long, err = text(client, servers[0].Addr, "The little dog ran across the big green field to find his friend the cat, who was sleeping under a tree", o.backlogTokens); err != nil {
			return r, err
		}
	}
	gw := &picker.Gateway{Client: client}
	for _, s := range servers {
		gw.Endpoints = append(gw.Endpoints, s.Addr)
	}
	if mode != "round robin" {
		pk, err := picker.NewPicker(ctx, config(scorer, o.prefixWeight, zmq, "http://"+servers[0].Addr), picker.Pool{Namespace: "default", Name: "corral", Hosts: hosts, Port: atoi(port)}, logr.Discard())
		if err != nil {
			return r, err
		}
		defer pk.Stop()
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return r, err
		}
		srv, done := pk.Serve(lis)
		defer func() { srv.Stop(); <-done }()
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return r, err
		}
		defer conn.Close()
		gw.ExtProc = extProcPb.NewExternalProcessorClient(conn)
		// Scraped, and (precise) every process's KV events subscribed.
		for !allScraped(pk) || (zmq != "" && !allSubscribed(client, servers)) {
			select {
			case <-ctx.Done():
				return r, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	glis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return r, err
	}
	gsrv := &http.Server{Handler: gw}
	go gsrv.Serve(glis)
	defer gsrv.Close()
	base := "http://" + glis.Addr().String()

	// The backlog: long prompts sent straight to the first process, kept
	// in flight until the conversations are done.
	bctx, bstop := context.WithCancel(ctx)
	defer bstop()
	var bwg sync.WaitGroup
	if skew {
		for i := range o.backlog {
			bwg.Add(1)
			go func() {
				defer bwg.Done()
				for n := 0; bctx.Err() == nil; n++ {
					_, _, _, _ = stream(bctx, client, "http://"+servers[0].Addr, fmt.Sprintf("%d %d. %s", i, n, long), 32)
				}
			}()
		}
		// The conversations start once the backlog is there for the
		// picker to see: in the process's metrics, then in the picker's
		// next scrapes (every 50 ms).
		for inFlight(client, servers[0].Addr) < o.backlog {
			select {
			case <-ctx.Done():
				return r, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The conversations, o.conc at once, each turn after the last.
	var mu sync.Mutex
	work := make(chan int)
	var wg sync.WaitGroup
	for range o.conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				history := system + "\n"
				for t := range o.turns {
					history += fmt.Sprintf("User %d asks question %d: what happened next in the story?\nAssistant:", c, t)
					ttft, out, u, err := stream(ctx, client, base, history, o.maxTokens)
					mu.Lock()
					if err != nil {
						r.failed++
					} else {
						r.ttft = append(r.ttft, ttft)
						r.prompt += float64(u.Prompt)
						r.cached += float64(u.Details.Cached)
					}
					mu.Unlock()
					history += out + "\n"
				}
			}
		}()
	}
	for c := range o.conversations {
		work <- c
	}
	close(work)
	wg.Wait()
	bstop()
	bwg.Wait()
	for _, s := range servers {
		r.perPod = append(r.perPod, gw.Picks()[s.Addr])
	}
	return r, nil
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

func allScraped(pk *picker.Picker) bool {
	eps := pk.Endpoints()
	for _, ok := range eps {
		if !ok {
			return false
		}
	}
	return len(eps) > 0
}

// inFlight is the requests running and waiting at the corral at addr.
func inFlight(client *http.Client, addr string) int {
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	n := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "vllm:num_requests_running{") || strings.HasPrefix(line, "vllm:num_requests_waiting{") {
			f, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			n += f
		}
	}
	return int(n)
}

// allSubscribed reports whether every server's KV events have a
// subscriber (corral_kv_events_subscribers).
func allSubscribed(client *http.Client, servers []*picker.Corral) bool {
	for _, s := range servers {
		resp, err := client.Get("http://" + s.Addr + "/metrics")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "\ncorral_kv_events_subscribers 1") {
			return false
		}
	}
	return true
}

// text repeats seed until the corral at addr tokenizes it to at least n
// tokens.
func text(client *http.Client, addr, seed string, n int) (string, error) {
	var b strings.Builder
	for i := 0; ; i++ {
		fmt.Fprintf(&b, "%s %d. ", seed, i)
		if i%8 != 7 {
			continue
		}
		body, _ := json.Marshal(map[string]any{"content": b.String()})
		resp, err := client.Post("http://"+addr+"/tokenize", "application/json", bytes.NewReader(body))
		if err != nil {
			return "", err
		}
		var tok struct{ Tokens []int }
		err = json.NewDecoder(resp.Body).Decode(&tok)
		resp.Body.Close()
		if err != nil {
			return "", err
		}
		if len(tok.Tokens) >= n {
			return b.String(), nil
		}
	}
}

// usage is a completion's prompt tokens and those found cached.
type usage struct {
	Prompt  int `json:"prompt_tokens"`
	Details struct {
		Cached int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// stream sends a streamed completion and returns the time to its first
// text, the text and the usage.
func stream(ctx context.Context, client *http.Client, base, prompt string, maxTokens int) (time.Duration, string, usage, error) {
	var u usage
	body, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt, "max_tokens": maxTokens, "stream": true, "ignore_eos": true,
		"stream_options": map[string]bool{"include_usage": true}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return 0, "", u, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", u, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		slog.Warn("route: request failed", "status", resp.StatusCode, "body", string(b))
		return 0, "", u, fmt.Errorf("%d", resp.StatusCode)
	}
	var ttft time.Duration
	var out strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev struct {
			Choices []struct{ Text string } `json:"choices"`
			Usage   *usage                  `json:"usage"`
		}
		if json.Unmarshal([]byte(data), &ev) == nil && ev.Usage != nil {
			u = *ev.Usage
		}
		if len(ev.Choices) > 0 && ev.Choices[0].Text != "" {
			if ttft == 0 {
				ttft = time.Since(start)
			}
			out.WriteString(ev.Choices[0].Text)
		}
	}
	if ttft == 0 {
		ttft = time.Since(start)
	}
	return ttft, out.String(), u, sc.Err()
}
