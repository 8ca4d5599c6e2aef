package openai

import (
	"encoding/json"
	"slices"

	"github.com/corral-llm/corral/serving"
)

// Fields of OpenAI's API that corral knows but does not implement. A
// request that uses one gets a 400 naming it, rather than an answer that
// silently lacks what it asked for; fields corral does not know at all
// (vendor extensions) stay accepted and ignored.

// chatUnsupported are such fields of /v1/chat/completions.
type chatUnsupported struct {
	Audio            json.RawMessage `json:"audio"`
	Modalities       []string        `json:"modalities"`
	Prediction       json.RawMessage `json:"prediction"`
	Functions        json.RawMessage `json:"functions"`
	FunctionCall     json.RawMessage `json:"function_call"`
	WebSearchOptions json.RawMessage `json:"web_search_options"`
}

// check refuses a field set to anything but what corral does anyway.
func (u *chatUnsupported) check() *serving.Error {
	switch {
	case !serving.IsNull(u.Audio):
		return serving.Invalid("audio", "'audio' output is not supported: corral serves text models")
	case u.Modalities != nil && !slices.Equal(u.Modalities, []string{"text"}):
		return serving.Invalid("modalities", "'modalities' other than [\"text\"] are not supported: corral serves text models")
	case !serving.IsNull(u.Prediction):
		return serving.Invalid("prediction", "'prediction' (predicted outputs) is not supported")
	case !serving.IsNull(u.Functions):
		return serving.Invalid("functions", "'functions' is not supported: send 'tools'")
	case !serving.IsNull(u.FunctionCall):
		return serving.Invalid("function_call", "'function_call' is not supported: send 'tool_choice'")
	case !serving.IsNull(u.WebSearchOptions):
		return serving.Invalid("web_search_options", "'web_search_options' is not supported: corral does not search the web")
	}
	return nil
}

// completionUnsupported are such fields of /v1/completions.
type completionUnsupported struct {
	Echo   bool   `json:"echo"`
	BestOf *int   `json:"best_of"`
	Suffix string `json:"suffix"`
}

// check refuses a field set to anything but what corral does anyway.
func (u *completionUnsupported) check() *serving.Error {
	switch {
	case u.Echo:
		return serving.Invalid("echo", "'echo' is not supported")
	case u.BestOf != nil && *u.BestOf != 1:
		return serving.Invalid("best_of", "'best_of' must be 1: this server generates one choice per request")
	case u.Suffix != "":
		return serving.Invalid("suffix", "'suffix' (fill-in-the-middle) is not supported")
	}
	return nil
}
