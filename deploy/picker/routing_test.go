package picker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestRouting runs the picker, configured by the manifest's ConfigMap,
// as the ext_proc server in front of three corral serve processes on
// 127.0.0.2, .3 and .4, with the gateway in Envoy's place. Every request
// is answered through the picker (whole and streamed); each one lands on
// the process the picker named (the processes' own request counters
// match the gateway's picks); and the turns of a conversation, whose
// prompts share their beginning, go to one process: the prefix scorer's
// doing, since nothing else tells the idle processes apart.
func TestRouting(t *testing.T) {
	_, config := pickerArgs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	servers, hosts, port := startPool(t, ctx)
	gw, _ := startPicker(t, ctx, config, hosts, port)
	gsrv := httptest.NewServer(gw)
	t.Cleanup(gsrv.Close)

	// The picker records a request's prefix in its index asynchronously
	// (approximateprefix's PreRequest), so on a loaded machine the next
	// turn may be scheduled before the index has the last one: one stray
	// turn per conversation is allowed. Without the prefix scorer the
	// idle processes tie and the picker chooses at random; round robin
	// spreads every conversation.
	const conversations, turns = 4, 4
	for c := range conversations {
		before := gw.Picks()
		prompt := fmt.Sprintf("Conversation %d. Once upon a time there was a little girl named Lily who lived in a small house near the forest with her mother and her dog.", c)
		for turn := range turns {
			prompt += fmt.Sprintf(" Turn %d: she went outside to play.", turn)
			text := post(t, gsrv.URL, `{"model":"tiny","prompt":`+strconv.Quote(prompt)+`,"max_tokens":4}`)
			var got struct {
				Choices []struct{ Text string } `json:"choices"`
			}
			if err := json.Unmarshal([]byte(text), &got); err != nil || len(got.Choices) != 1 {
				t.Fatalf("conversation %d turn %d: %v %s", c, turn, err, text)
			}
		}
		after := gw.Picks()
		most := 0
		var used []string
		for ep, n := range after {
			if d := n - before[ep]; d > 0 {
				used = append(used, fmt.Sprintf("%s:%d", ep, d))
				most = max(most, d)
			}
		}
		if most < turns-1 {
			t.Errorf("conversation %d went to %v, want one process for (all but one of) its %d turns", c, used, turns)
		}
	}

	// A stream goes through the picker as it comes.
	text := post(t, gsrv.URL, `{"model":"tiny","prompt":"Once upon a time","max_tokens":4,"stream":true}`)
	if !strings.Contains(text, "data: ") || !strings.HasSuffix(strings.TrimSpace(text), "data: [DONE]") {
		t.Errorf("stream through the gateway: %q", text)
	}

	// Each process served exactly what the picker sent it.
	picks := gw.Picks()
	total := 0
	for _, n := range picks {
		total += n
	}
	if total != conversations*turns+1 {
		t.Errorf("picks %v, want %d requests", picks, conversations*turns+1)
	}
	served := map[string]int{}
	for deadline := time.Now().Add(time.Minute); ; {
		for _, s := range servers {
			served[s.Addr] = requestsServed(t, s.Addr)
		}
		if maps.Equal(served, withZeros(picks, servers)) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the processes' counters, not synchronizing
	}
	if want := withZeros(picks, servers); !maps.Equal(served, want) {
		t.Errorf("the processes served %v; the picker sent %v", served, want)
	}
}

// startPool starts three corral serve processes, on 127.0.0.2, .3 and
// .4 and one port, each with --parallel=2 and args.
func startPool(t *testing.T, ctx context.Context, args ...string) (servers []*Corral, hosts []string, port string) {
	t.Helper()
	hosts = []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	port, err := FreePort(hosts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		servers = append(servers, startCorral(t, ctx, h, port, append([]string{"--parallel=2"}, args...)...))
	}
	return servers, hosts, port
}

// startPicker builds the picker for the pods on hosts:port with config,
// serves its ext_proc on loopback, waits until its data layer has scraped
// every pod, and returns it and a gateway that asks it.
func startPicker(t *testing.T, ctx context.Context, config []byte, hosts []string, port string) (*Gateway, *Picker) {
	t.Helper()
	p, _ := strconv.Atoi(port)
	pk, err := NewPicker(ctx, config, Pool{Namespace: "default", Name: "corral", Hosts: hosts, Port: p}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pk.Stop)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, done := pk.Serve(lis)
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("ext_proc server: %v", err)
		}
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		eps := pk.Endpoints()
		ready := len(eps) == len(hosts)
		for _, scraped := range eps {
			ready = ready && scraped
		}
		if ready {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the picker's endpoints never got metrics: %v", eps)
		case <-tick.C:
		}
	}
	return &Gateway{ExtProc: extProcPb.NewExternalProcessorClient(conn)}, pk
}

// post sends a completion through the gateway and returns the answer's
// body, failing t unless it is a 200.
func post(t *testing.T, base, body string) string {
	t.Helper()
	resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s", body, resp.StatusCode, b)
	}
	return string(b)
}

// requestsServed sums corral_requests_total over the models of the
// corral at addr.
func requestsServed(t *testing.T, addr string) int {
	t.Helper()
	return int(metricSum(t, addr, "corral_requests_total"))
}

// metricSum sums the series of the family name that the corral at addr
// exports.
func metricSum(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		v := rest[strings.LastIndexByte(rest, ' ')+1:]
		f, _ := strconv.ParseFloat(v, 64)
		n += f
	}
	return n
}

func withZeros(picks map[string]int, servers []*Corral) map[string]int {
	out := map[string]int{}
	for _, s := range servers {
		out[s.Addr] = picks[s.Addr]
	}
	return out
}
