package registry

import (
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
)

// EstimateFromFile is a Config.Estimate: the memory spec's engine will
// take, estimated from its GGUF header (see engine.EstimateMemory).
func EstimateFromFile(spec Spec) (int64, error) {
	md, err := gguf.ReadMetadata(spec.Engine.ModelPath)
	if err != nil {
		return 0, err
	}
	fp, err := engine.EstimateMemory(md, spec.Engine)
	if err != nil {
		return 0, err
	}
	return fp.Total(), nil
}
