// Package picker runs the Gateway API Inference Extension's endpoint
// picker (EPP), the real one at the version deploy/kubernetes pins, in
// front of corral processes on this machine: no kube-apiserver, no Envoy.
//
// It lives in its own Go module so that the picker's dependency tree
// (Kubernetes' client libraries, controller-runtime, Envoy's API) stays out
// of corral's module and binary. Its tests check the manifests against
// Kubernetes' own schemas and strict decoding, and against the picker's
// own flag set and configuration loader, and route requests among real
// `corral serve` processes through the picker's scheduler.
package picker
