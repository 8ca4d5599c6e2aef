package responses

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/corral-llm/corral/serving"
)

// TestCheckLimits: a body over the core's limits is refused before the
// model is leased, with the limit's code and the flag that sets it.
func TestCheckLimits(t *testing.T) {
	lim := serving.Limits{MaxTools: 2, MaxMessages: 3, MaxPromptBytes: 32}.WithDefaults()
	fn := `{"type":"function","name":"f%d","parameters":{"type":"object"}}`
	tools := func(n int) string {
		var ts []string
		for i := range n {
			ts = append(ts, fmt.Sprintf(fn, i))
		}
		return "[" + strings.Join(ts, ",") + "]"
	}
	item := `{"role":"user","content":"hi"}`
	items := func(n int) string { return "[" + strings.Repeat(item+",", n-1) + item + "]" }
	long, _ := json.Marshal(strings.Repeat("x", 33))
	for _, c := range []struct {
		body, param, flag string // flag "": accepted
	}{
		{`{"model":"m","input":"hi","tools":` + tools(2) + `}`, "", ""},
		{`{"model":"m","input":"hi","tools":` + tools(3) + `}`, "tools", "max-tools"},
		{`{"model":"m","input":` + items(3) + `}`, "", ""},
		{`{"model":"m","input":` + items(4) + `}`, "input", "max-messages"},
		{`{"model":"m","input":` + string(long) + `}`, "input", "max-prompt-bytes"},
		{`{"model":"m","input":"hi","instructions":` + string(long) + `}`, "instructions", "max-prompt-bytes"},
	} {
		var body createRequest
		if err := json.Unmarshal([]byte(c.body), &body); err != nil {
			t.Fatal(err)
		}
		e := body.Check(&lim)
		switch {
		case c.flag == "" && e != nil:
			t.Errorf("%s: %v", c.body, e)
		case c.flag != "" && (e == nil || e.Status != 400 || e.Code != "limit_exceeded" || e.Param != c.param || !strings.Contains(e.Message, "--"+c.flag)):
			t.Errorf("%s: %+v, want a 400 limit_exceeded naming %s and --%s", c.body, e, c.param, c.flag)
		}
	}
	// A body Decode refused keeps its error for Check.
	var body createRequest
	if err := json.Unmarshal([]byte(`{"model":"m","input":"hi","tools":{}}`), &body); err != nil {
		t.Fatal(err)
	}
	if e := body.Check(&lim); e == nil || e.Status != 400 || e.Param != "tools" {
		t.Errorf("tools of the wrong type: %+v", e)
	}
}
