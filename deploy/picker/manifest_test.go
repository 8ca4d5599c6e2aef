package picker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/gateway-api-inference-extension/cmd/epp/runner"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config/loader"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	extractormetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/extractor/metrics"
	sourcemetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/source/metrics"
	runserver "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/server"
)

const manifestFile = "../kubernetes/inferencepool.yaml"

// object is a Kubernetes object as far as these tests read it.
type object struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec yaml.Node         `yaml:"spec"`
	Data map[string]string `yaml:"data"`
}

type grpcProbe struct {
	GRPC struct {
		Port    int    `yaml:"port"`
		Service string `yaml:"service"`
	} `yaml:"grpc"`
}

type eppDeployment struct {
	Template struct {
		Spec struct {
			Containers []struct {
				Image string   `yaml:"image"`
				Args  []string `yaml:"args"`
				Env   []struct {
					Name string `yaml:"name"`
				} `yaml:"env"`
				Ports []struct {
					Name          string `yaml:"name"`
					ContainerPort int    `yaml:"containerPort"`
				} `yaml:"ports"`
				ReadinessProbe grpcProbe `yaml:"readinessProbe"`
				LivenessProbe  grpcProbe `yaml:"livenessProbe"`
				VolumeMounts   []struct {
					Name      string `yaml:"name"`
					MountPath string `yaml:"mountPath"`
				} `yaml:"volumeMounts"`
			} `yaml:"containers"`
			Volumes []struct {
				Name      string `yaml:"name"`
				ConfigMap struct {
					Name string `yaml:"name"`
				} `yaml:"configMap"`
			} `yaml:"volumes"`
		} `yaml:"spec"`
	} `yaml:"template"`
}

func readManifest(t *testing.T) map[string]object {
	t.Helper()
	b, err := os.ReadFile(manifestFile)
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]object{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var o object
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", manifestFile, err)
		}
		objs[o.Kind+"/"+o.Metadata.Name] = o
	}
	return objs
}

// pickerArgs returns the picker container's arguments with the
// Deployment's $(VAR) references expanded as the kubelet would, and the
// text of the configuration file they name (from the mounted ConfigMap).
func pickerArgs(t *testing.T) (args []string, config []byte) {
	t.Helper()
	objs := readManifest(t)
	o, ok := objs["Deployment/corral-epp"]
	if !ok {
		t.Fatal("no Deployment/corral-epp")
	}
	var d eppDeployment
	if err := o.Spec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	c := d.Template.Spec.Containers[0]
	if !strings.HasSuffix(c.Image, ":"+PinnedVersion) {
		t.Errorf("picker image %s, want the version this module pins (%s)", c.Image, PinnedVersion)
	}
	for _, a := range c.Args {
		for _, e := range c.Env {
			a = strings.ReplaceAll(a, "$("+e.Name+")", "default")
		}
		if strings.Contains(a, "$(") {
			t.Errorf("argument %q names a variable the container does not set", a)
		}
		args = append(args, a)
	}
	// The configuration file: a path under the mount of a ConfigMap volume.
	var file string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--config-file="); ok {
			file = v
		}
	}
	for _, m := range c.VolumeMounts {
		key, ok := strings.CutPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range d.Template.Spec.Volumes {
			if v.Name == m.Name {
				cm, ok := objs["ConfigMap/"+v.ConfigMap.Name]
				if !ok || cm.Data[key] == "" {
					t.Fatalf("--config-file=%s: ConfigMap %q has no key %q", file, v.ConfigMap.Name, key)
				}
				return args, []byte(cm.Data[key])
			}
		}
	}
	t.Fatalf("--config-file=%q is not in a mounted ConfigMap", file)
	return nil, nil
}

// TestManifestFlags parses the picker container's arguments with the
// picker's own flag set at the pinned version and runs the checks its
// runner runs before it starts (Complete, Validate): an unknown flag, a
// bad value or a flag that version refuses (the metric flags it
// deprecated) fails here as the picker would fail at start. The probes
// name the health services the runner answers, on its health port.
func TestManifestFlags(t *testing.T) {
	args, _ := pickerArgs(t)
	opts := runserver.NewOptions()
	fs := pflag.NewFlagSet("epp", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	opts.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("the picker %s refuses %q: %v", PinnedVersion, args, err)
	}
	if err := opts.Complete(); err != nil {
		t.Fatal(err)
	}
	if err := opts.Validate(); err != nil {
		t.Fatalf("the picker %s refuses %q: %v", PinnedVersion, args, err)
	}
	fs.Visit(func(f *pflag.Flag) {
		if f.Deprecated != "" {
			t.Errorf("--%s is deprecated at %s: %s", f.Name, PinnedVersion, f.Deprecated)
		}
	})

	o := readManifest(t)["Deployment/corral-epp"]
	var d eppDeployment
	if err := o.Spec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	c := d.Template.Spec.Containers[0]
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["grpc"] != opts.GRPCPort || ports["grpc-health"] != opts.GRPCHealthPort || ports["metrics"] != opts.MetricsPort {
		t.Errorf("container ports %v; the picker listens on grpc %d, health %d, metrics %d", ports, opts.GRPCPort, opts.GRPCHealthPort, opts.MetricsPort)
	}
	for _, p := range []struct {
		name  string
		probe grpcProbe
		want  string
	}{{"readiness", c.ReadinessProbe, runner.ReadinessCheckService}, {"liveness", c.LivenessProbe, runner.LivenessCheckService}} {
		if p.probe.GRPC.Port != opts.GRPCHealthPort || p.probe.GRPC.Service != p.want {
			t.Errorf("%s probe %+v, want service %q on port %d", p.name, p.probe.GRPC, p.want, opts.GRPCHealthPort)
		}
	}
}

// TestManifestConfigReadsCorral loads the picker's configuration from the
// manifest with the picker's own loader (every plugin instantiated, the
// scheduling profile and data layer built), then runs the configured
// metrics data source and extractor against a real corral serve after a
// request: the extractor must find every metric it is configured to read
// (it fails on a missing family) and fill in the queue, KV-cache and
// cache-shape fields the scorers and the prefix index use.
func TestManifestConfigReadsCorral(t *testing.T) {
	_, text := pickerArgs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	handle := loadConfig(t, ctx, text)
	named := handle.GetAllPluginsWithNames()
	src, ok := named[sourcemetrics.MetricsDataSourceType].(fwkdl.PollingDataSource)
	if !ok {
		t.Fatalf("no polling %s among the plugins: %v", sourcemetrics.MetricsDataSourceType, named)
	}
	ext, ok := named[extractormetrics.MetricsExtractorType].(fwkdl.Extractor)
	if !ok {
		t.Fatalf("no %s among the plugins", extractormetrics.MetricsExtractorType)
	}

	c := startCorral(t, ctx, "127.0.0.1", "")
	complete(t, "http://"+c.Addr, "Once upon a time")
	ep := fwkdl.NewEndpoint(&fwkdl.EndpointMetadata{
		NamespacedName: types.NamespacedName{Namespace: "default", Name: "corral-0"},
		PodName:        "corral-0", Address: c.Host, Port: c.Port, MetricsHost: c.Addr,
	}, fwkdl.NewMetrics())
	data, err := src.Poll(ctx, ep)
	if err != nil {
		t.Fatalf("the picker's metrics source on corral's /metrics: %v", err)
	}
	if err := ext.Extract(ctx, data, ep); err != nil {
		t.Fatalf("the picker's extractor on corral's /metrics: %v", err)
	}
	// What it read is what that scrape said.
	families := data.(sourcemetrics.PrometheusMetricMap)
	gauge := func(name string) float64 {
		f := families[name]
		if f == nil || len(f.GetMetric()) != 1 {
			t.Fatalf("corral's /metrics: %s is %v, want one series", name, f)
		}
		return f.GetMetric()[0].GetGauge().GetValue()
	}
	m := ep.GetMetrics()
	if m.UpdateTime.IsZero() || m.CacheBlockSize != 16 || m.CacheNumBlocks <= 0 ||
		m.WaitingQueueSize != int(gauge("vllm:num_requests_waiting")) || m.RunningRequestsSize != int(gauge("vllm:num_requests_running")) ||
		m.KVCacheUsagePercent != gauge("vllm:kv_cache_usage_perc") {
		t.Errorf("the picker read %+v from corral", m)
	}
}

// loadConfig loads an EndpointPickerConfig as the runner does
// (parseConfigurationPhaseOne and Two): feature gates registered, plugins
// registered, raw config loaded, then instantiated and configured.
func loadConfig(t *testing.T, ctx context.Context, text []byte) fwkplugin.Handle {
	t.Helper()
	RegisterPlugins()
	raw, _, err := loader.LoadRawConfig(text, logr.Discard())
	if err != nil {
		t.Fatalf("the picker %s refuses the configuration: %v", PinnedVersion, err)
	}
	handle := fwkplugin.NewEppHandle(ctx, func() []types.NamespacedName { return nil })
	if _, err := loader.InstantiateAndConfigure(raw, handle, logr.Discard()); err != nil {
		t.Fatalf("the picker %s refuses the configuration: %v", PinnedVersion, err)
	}
	if _, err := datalayer.ValidateAndOrderDataDependencies(handle.GetAllPlugins()); err != nil {
		t.Fatal(err)
	}
	return handle
}

// startCorral starts corral serve on host and port ("": a free one) with
// the tiny test model, and stops it when t ends.
func startCorral(t *testing.T, ctx context.Context, host, port string, args ...string) *Corral {
	t.Helper()
	bin, err := CorralBinary(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	models, err := ModelsDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(models, "tinystories-656k-q8_0.gguf"), filepath.Join(dir, "tiny.gguf")); err != nil {
		t.Fatal(err)
	}
	c, err := StartCorral(ctx, bin, host, port, os.Stderr, append([]string{"--models-dir=" + dir, "--threads=1", "--log-level=warn"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("corral serve on %s: %v", c.Addr, err)
		}
	})
	return c
}

// complete sends one short completion to base and fails t unless it is
// answered 200.
func complete(t *testing.T, base, prompt string) {
	t.Helper()
	body := `{"model":"tiny","prompt":` + strconv.Quote(prompt) + `,"max_tokens":4}`
	resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("completion: %d %s", resp.StatusCode, b)
	}
}
