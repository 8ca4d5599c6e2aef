package wire

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestTopLogprobsKeepTheirOrder: the {token: logprob} object is written
// in the slice's order, a repeated text once, and read back in order.
func TestTopLogprobsKeepTheirOrder(t *testing.T) {
	in := TopLogprobs{{"z", -0.5}, {"a", -1.25}, {"z", -3}, {"\xff", -4}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"z":-0.5,"a":-1.25,"\ufffd":-4}`; string(b) != want {
		t.Fatalf("got %s, want %s", b, want)
	}
	var out []TopLogprobs
	if err := json.Unmarshal([]byte(`[`+string(b)+`,null]`), &out); err != nil {
		t.Fatal(err)
	}
	if want := (TopLogprobs{{"z", -0.5}, {"a", -1.25}, {"\ufffd", -4}}); len(out) != 2 || !slices.Equal(out[0], want) || out[1] != nil {
		t.Fatalf("read back %v, want [%v nil]", out, want)
	}
}
