package picker

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config/loader"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datastore"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/flowcontrol"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metadata"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/requestcontrol"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/scheduling"
)

// Picker is the endpoint picker assembled from its own packages as its
// runner assembles it (cmd/epp/runner's setup), less what needs a
// kube-apiserver: its datastore holds a pool given here and is fed pods
// through its own API (PodUpdateOrAddIfNotExist) instead of a pod
// reconciler; its data layer scrapes each pod's /metrics; its director,
// scheduler and ext_proc server are the runner's.
type Picker struct {
	handle  fwkplugin.Handle
	ds      datastore.Datastore
	runtime *datalayer.Runtime
	server  *handlers.StreamingServer
	pool    *datalayer.EndpointPool
}

// Pool names the endpoints a Picker routes among: pods on the hosts
// (IP addresses), each serving on Port, labelled for the pool's selector.
type Pool struct {
	Namespace, Name string
	Hosts           []string
	Port            int
	// Refresh is the data layer's scrape interval (the runner's
	// --refresh-metrics-interval; 0: its default, 50ms).
	Refresh time.Duration
}

var gatesOnce sync.Once

// NewPicker loads config (an EndpointPickerConfig, as --config-text) and
// builds the picker for the pool's endpoints. Its data layer polls until
// ctx ends or Stop. The picker's packages log through controller-runtime's
// global logger, which NewPicker sets to log.
func NewPicker(ctx context.Context, config []byte, p Pool, log logr.Logger) (*Picker, error) {
	ctrllog.SetLogger(log)
	ctx = ctrllog.IntoContext(ctx, log)
	RegisterPlugins()
	gatesOnce.Do(func() {
		loader.RegisterFeatureGate(datalayer.ExperimentalDatalayerFeatureGate)
		loader.RegisterFeatureGate(datalayer.EnableLegacyMetricsFeatureGate)
		loader.RegisterFeatureGate(flowcontrol.FeatureGate)
	})
	raw, gates, err := loader.LoadRawConfig(config, log)
	if err != nil {
		return nil, fmt.Errorf("picker config: %w", err)
	}
	if gates[datalayer.EnableLegacyMetricsFeatureGate] || gates[flowcontrol.FeatureGate] {
		return nil, fmt.Errorf("picker config: the %s and %s feature gates are not assembled here", datalayer.EnableLegacyMetricsFeatureGate, flowcontrol.FeatureGate)
	}
	refresh := p.Refresh
	if refresh <= 0 {
		refresh = 50 * time.Millisecond
	}
	runtime := datalayer.NewRuntime(refresh)
	pool := datalayer.NewEndpointPool(p.Namespace, p.Name)
	pool.Selector = map[string]string{"app.kubernetes.io/name": p.Name}
	pool.TargetPorts = []int{p.Port}
	ds := datastore.NewDatastore(ctx, runtime, 0).WithEndpointPool(pool)

	podNames := func() []types.NamespacedName {
		var names []types.NamespacedName
		for _, ep := range ds.PodList(datastore.AllPodsPredicate) {
			names = append(names, ep.GetMetadata().NamespacedName)
		}
		return names
	}
	handle := fwkplugin.NewEppHandle(ctx, podNames)
	cfg, err := loader.InstantiateAndConfigure(raw, handle, log)
	if err != nil {
		return nil, fmt.Errorf("picker config: %w", err)
	}
	rc := requestcontrol.NewConfig()
	rc.AddPlugins(handle.GetAllPlugins()...)
	dag, err := datalayer.ValidateAndOrderDataDependencies(handle.GetAllPlugins())
	if err != nil {
		return nil, fmt.Errorf("picker config: %w", err)
	}
	rc.OrderPrepareDataPlugins(dag)
	parser := handlers.NewParser(cfg.ParserConfig)
	if err := runtime.Configure(cfg.DataConfig, true, "", log); err != nil {
		return nil, fmt.Errorf("picker data layer: %w", err)
	}
	// Start binds notification sources to a controller manager; a
	// configuration with one cannot run without Kubernetes.
	if err := runtime.Start(ctx, nil); err != nil {
		return nil, fmt.Errorf("picker data layer: %w", err)
	}
	candidates := requestcontrol.NewDatastoreEndpointCandidates(ds)
	admission := requestcontrol.NewLegacyAdmissionController(cfg.SaturationDetector, candidates)
	director := requestcontrol.NewDirectorWithConfig(ds, scheduling.NewSchedulerWithConfig(cfg.SchedulerConfig), admission, parser, candidates, rc)
	pk := &Picker{handle: handle, ds: ds, runtime: runtime, server: handlers.NewStreamingServer(ds, director, parser), pool: pool}
	for i, host := range p.Hosts {
		pk.ds.PodUpdateOrAddIfNotExist(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: fmt.Sprintf("%s-%d", p.Name, i), Labels: pool.Selector},
			Status:     corev1.PodStatus{PodIP: host, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
	}
	return pk, nil
}

// Plugin returns the plugin of the configuration named name, nil if none.
func (pk *Picker) Plugin(name string) fwkplugin.Plugin { return pk.handle.Plugin(name) }

// Endpoints returns the picker's endpoints, host:port, and whether each
// has metrics scraped since it was added.
func (pk *Picker) Endpoints() map[string]bool {
	out := map[string]bool{}
	for _, ep := range pk.ds.PodList(datastore.AllPodsPredicate) {
		m := ep.GetMetadata()
		out[net.JoinHostPort(m.Address, m.Port)] = !ep.GetMetrics().UpdateTime.IsZero()
	}
	return out
}

// Serve serves the picker's ext_proc service on lis until Stop.
func (pk *Picker) Serve(lis net.Listener) (*grpc.Server, <-chan error) {
	srv := grpc.NewServer()
	extProcPb.RegisterExternalProcessorServer(srv, pk.server)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	return srv, done
}

// Stop ends the data layer's polling.
func (pk *Picker) Stop() {
	_ = pk.runtime.Stop()
}

// EndpointKey is the header in which the picker names the endpoint it
// picked, host:port (the Inference Extension's protocol).
const EndpointKey = metadata.DestinationEndpointKey

// splitEndpoints parses the header's value: one or more host:port,
// comma-separated (the first is the pick, the rest fallbacks).
func splitEndpoints(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
