package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/registry"
)

// The Kubernetes manifests of deploy/kubernetes are checked against their
// schemas by deploy/picker's TestManifestSchemas. These tests check what a
// schema cannot: that the Deployment's command line is one corral serve
// accepts, that its probes answer as the manifests expect, that the pool
// and the picker point at the right ports and names, and that the
// metrics the picker reads are ones corral exports.

const manifestDir = "../../deploy/kubernetes"

// object is a Kubernetes object as far as these tests read it.
type object struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec yaml.Node `yaml:"spec"`
	Data yaml.Node `yaml:"data"`
}

type container struct {
	Name    string   `yaml:"name"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

type deploymentSpec struct {
	Template struct {
		Metadata struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec struct {
			Containers []container `yaml:"containers"`
		} `yaml:"spec"`
	} `yaml:"template"`
}

// manifests reads every object of the directory's YAML files, by kind
// and name.
func manifests(t *testing.T) map[string]object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", manifestDir, err)
	}
	objs := map[string]object{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var o object
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			objs[o.Kind+"/"+o.Metadata.Name] = o
		}
	}
	return objs
}

func decodeSpec[T any](t *testing.T, objs map[string]object, key string) T {
	t.Helper()
	o, ok := objs[key]
	if !ok {
		t.Fatalf("no %s among the manifests", key)
	}
	var v T
	if err := o.Spec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return v
}

// quantity parses a Kubernetes memory quantity with a binary suffix.
func quantity(t *testing.T, q string) int64 {
	t.Helper()
	for suffix, mult := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40} {
		if n, ok := strings.CutSuffix(q, suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("quantity %q: %v", q, err)
			}
			return v * mult
		}
	}
	t.Fatalf("quantity %q: want a Ki, Mi, Gi or Ti suffix", q)
	return 0
}

func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// TestManifestsFitTogether: the pool selects the corral pods on their
// port, its extension is the picker's Service, and the memory budget
// fits the memory the pod is given.
func TestManifestsFitTogether(t *testing.T) {
	objs := manifests(t)
	corral := decodeSpec[deploymentSpec](t, objs, "Deployment/corral")
	c := corral.Template.Spec.Containers[0]
	pool := decodeSpec[struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		TargetPorts []struct {
			Number int `yaml:"number"`
		} `yaml:"targetPorts"`
		EndpointPickerRef struct {
			Name string `yaml:"name"`
			Port struct {
				Number int `yaml:"number"`
			} `yaml:"port"`
		} `yaml:"endpointPickerRef"`
	}](t, objs, "InferencePool/corral")
	for k, v := range pool.Selector.MatchLabels {
		if corral.Template.Metadata.Labels[k] != v {
			t.Errorf("the pool selects %s=%s, which the corral pods do not have (%v)", k, v, corral.Template.Metadata.Labels)
		}
	}
	if len(c.Ports) == 0 || len(pool.TargetPorts) != 1 || pool.TargetPorts[0].Number != c.Ports[0].ContainerPort ||
		flagValue(c.Args, "port") != strconv.Itoa(c.Ports[0].ContainerPort) {
		t.Errorf("pool port %+v, container ports %+v, --port %q", pool.TargetPorts, c.Ports, flagValue(c.Args, "port"))
	}
	epp := decodeSpec[struct {
		Ports []struct {
			Port int `yaml:"port"`
		} `yaml:"ports"`
	}](t, objs, "Service/"+pool.EndpointPickerRef.Name)
	if len(epp.Ports) == 0 || epp.Ports[0].Port != pool.EndpointPickerRef.Port.Number {
		t.Errorf("the pool's extension %s:%d, its Service's ports %+v", pool.EndpointPickerRef.Name, pool.EndpointPickerRef.Port.Number, epp.Ports)
	}
	limit := quantity(t, c.Resources.Limits["memory"])
	// The manifest gives bytes, so the budget reads next to the limit.
	budget, err := registry.ParseBytes(flagValue(c.Args, "memory-budget"), 0)
	if err != nil {
		t.Fatalf("--memory-budget: %v", err)
	}
	if req := quantity(t, c.Resources.Requests["memory"]); req != limit {
		t.Errorf("memory request %d != limit %d: the pod may land where the budget does not fit", req, limit)
	}
	if budget <= 0 || budget > limit*8/10 {
		t.Errorf("memory budget %d of a %d limit: leave room for the rest of the process", budget, limit)
	}
}

// TestManifestServes runs corral serve with the Deployment's own command
// line (on a loopback port, with the test model in its models directory),
// then asks what the probes and the picker ask: the readiness path answers
// 200 once the model is loaded, the liveness path 200, and /metrics has
// every metric the picker is told to read.
func TestManifestServes(t *testing.T) {
	objs := manifests(t)
	c := decodeSpec[deploymentSpec](t, objs, "Deployment/corral").Template.Spec.Containers[0]
	if len(c.Command) < 2 || c.Command[0] != "corral" || c.Command[1] != "serve" {
		t.Fatalf("command %q, want corral serve", c.Command)
	}
	dir := t.TempDir()
	if err := os.Symlink(testmodel.Path(t, testmodel.TinyStories656K), filepath.Join(dir, "tiny.gguf")); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	// Later flags win: the same command line, on loopback, a free port,
	// the test model, one thread.
	// The keys come from a Secret: here, a file with one key.
	if flagValue(c.Args, "api-key-file") == "" {
		t.Fatal("the Deployment listens on 0.0.0.0 without --api-key-file")
	}
	keyFile := filepath.Join(dir, "keys")
	if err := os.WriteFile(keyFile, []byte("sk-manifest-test-0123 name=test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append(append([]string(nil), c.Args...), "--host=127.0.0.1", "--port="+port, "--models-dir="+dir, "--threads=1", "--log-level=warn", "--api-key-file="+keyFile)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runServe(ctx, args) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("corral serve %q: %v", args, err)
		}
	})
	base := "http://127.0.0.1:" + port
	client := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	get := func(path string) (int, string) {
		resp, err := client.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	path := func(name string, p *probe) string {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port != c.Ports[0].Name {
			t.Fatalf("%s probe %+v: want an HTTP probe on port %q", name, p, c.Ports[0].Name)
		}
		return p.HTTPGet.Path
	}
	ready, live := path("readiness", c.ReadinessProbe), path("liveness", c.LivenessProbe)
	// The model loads on the first request (several models may share the
	// budget); readiness is the server's. Poll it as the kubelet does.
	for {
		code, body := get(ready)
		if code == http.StatusOK {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("corral serve exited: %v (last readiness answer %d %s)", err, code, body)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if code, body := get(live); code != http.StatusOK {
		t.Fatalf("liveness %s: %d %s", live, code, body)
	}
	// One request, so that every model-labelled family has the model.
	complete := func(key string) int {
		req, _ := http.NewRequest("POST", base+"/v1/completions", strings.NewReader(`{"model":"tiny","prompt":"Once upon a time","max_tokens":4}`))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := complete(""); code != http.StatusUnauthorized {
		t.Errorf("completion without a key: %d, want 401", code)
	}
	if code := complete("sk-manifest-test-0123"); code != http.StatusOK {
		t.Fatalf("completion: %d", code)
	}
	_, metrics := get("/metrics")
	n := 0
	for name, spec := range pickerMetrics(t, objs) {
		n++
		family, _, _ := strings.Cut(spec, "{")
		if !strings.Contains(metrics, "\n"+family+"{") {
			t.Errorf("the picker reads %s (%s), which /metrics lacks", spec, name)
		}
	}
	if n < 4 {
		t.Errorf("the picker is told of %d metrics, want the queue, running, KV-cache and cache-info ones", n)
	}
}

// pickerMetrics returns the metric specs the picker's ConfigMap gives its
// metrics extractor for the engine it assumes for corral's pods, by field.
// deploy/picker's tests go further: the picker's own packages load the
// same configuration and read a real corral's /metrics with it.
func pickerMetrics(t *testing.T, objs map[string]object) map[string]string {
	t.Helper()
	o, ok := objs["ConfigMap/corral-epp"]
	if !ok {
		t.Fatal("no ConfigMap/corral-epp among the manifests")
	}
	var data map[string]string
	if err := o.Data.Decode(&data); err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Plugins []struct {
			Type       string `yaml:"type"`
			Parameters struct {
				DefaultEngine string              `yaml:"defaultEngine"`
				EngineConfigs []map[string]string `yaml:"engineConfigs"`
			} `yaml:"parameters"`
		} `yaml:"plugins"`
	}
	if err := yaml.Unmarshal([]byte(data["epp.yaml"]), &cfg); err != nil {
		t.Fatalf("epp.yaml: %v", err)
	}
	specs := map[string]string{}
	for _, p := range cfg.Plugins {
		if p.Type != "core-metrics-extractor" {
			continue
		}
		for _, ec := range p.Parameters.EngineConfigs {
			if ec["name"] != p.Parameters.DefaultEngine {
				continue
			}
			for k, v := range ec {
				if strings.HasSuffix(k, "Spec") && v != "" {
					specs[k] = v
				}
			}
		}
	}
	return specs
}
