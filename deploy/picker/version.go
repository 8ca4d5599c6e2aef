package picker

// PinnedVersion is the Gateway API Inference Extension release whose
// picker this module runs (go.mod requires the same) and whose image
// deploy/kubernetes/inferencepool.yaml deploys. v1.5.0 is the last release
// whose module holds the picker itself (cmd/epp, pkg/epp); from v1.6.0 on
// the picker lives in llm-d's router, which the Go module proxy here does
// not serve.
const PinnedVersion = "v1.5.0"
