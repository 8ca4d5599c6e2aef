package llamacpp

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/corral-llm/corral/internal/servetest"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/wire"
)

// A field of the wrong type is named as the client sent it, whatever Go
// struct it is decoded into.
func TestTypeErrorNamesField(t *testing.T) {
	for _, tc := range []struct {
		h     func(*serving.Core, http.ResponseWriter, *http.Request)
		body  string
		param string
	}{
		{Tokenize, `{"content": "x", "model": 5}`, "model"},
		{Detokenize, `{"tokens": [1], "model": true}`, "model"},
		{ApplyTemplate, `{"messages": [{"role": "user", "content": "x"}], "tools": 3}`, "tools"},
		{ApplyTemplate, `{"messages": [{"role": "user", "content": "x"}], "reasoning_effort": 3}`, "reasoning_effort"},
		{Completion, `{"prompt": "x", "temperature": "hot"}`, "temperature"},
	} {
		w := servetest.Serve(t, servetest.NewEngine(), tc.h, tc.body)
		var env struct {
			Error *wire.ErrorObject `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil || env.Error == nil || w.Code != http.StatusBadRequest {
			t.Fatalf("%s: %d %s", tc.body, w.Code, w.Body)
		}
		if env.Error.Param == nil || *env.Error.Param != tc.param {
			t.Errorf("%s: param %v, want %q (%s)", tc.body, env.Error.Param, tc.param, env.Error.Message)
		}
	}
}
