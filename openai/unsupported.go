package openai

import (
	"encoding/json"
	"slices"
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
func (u *chatUnsupported) check() *Error {
	switch {
	case !isNull(u.Audio):
		return invalid("audio", "'audio' output is not supported: corral serves text models")
	case u.Modalities != nil && !slices.Equal(u.Modalities, []string{"text"}):
		return invalid("modalities", "'modalities' other than [\"text\"] are not supported: corral serves text models")
	case !isNull(u.Prediction):
		return invalid("prediction", "'prediction' (predicted outputs) is not supported")
	case !isNull(u.Functions):
		return invalid("functions", "'functions' is not supported: send 'tools'")
	case !isNull(u.FunctionCall):
		return invalid("function_call", "'function_call' is not supported: send 'tool_choice'")
	case !isNull(u.WebSearchOptions):
		return invalid("web_search_options", "'web_search_options' is not supported: corral does not search the web")
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
func (u *completionUnsupported) check() *Error {
	switch {
	case u.Echo:
		return invalid("echo", "'echo' is not supported")
	case u.BestOf != nil && *u.BestOf != 1:
		return invalid("best_of", "'best_of' must be 1: this server generates one choice per request")
	case u.Suffix != "":
		return invalid("suffix", "'suffix' (fill-in-the-middle) is not supported")
	}
	return nil
}
