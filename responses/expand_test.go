package responses

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/corral-llm/corral/wire"
)

// The findings of issue 31 about what a Responses request expands to: a
// small request that refers to large stored items, or continues a long
// chain of stored responses, is refused for the conversation it would
// become, before that is built.

// reasoningItem is a reasoning item with n bytes of text.
func reasoningItem(id string, n int) string {
	return `{"type":"reasoning","id":"` + id + `","summary":[],"content":[{"type":"reasoning_text","text":"` + strings.Repeat("r", n) + `"}]}`
}

// junkMessage is a user message "hi" with an unknown field of n bytes.
func junkMessage(id string, n int) string {
	return `{"type":"message","id":"` + id + `","role":"user","content":"hi","junk":"` + strings.Repeat("j", n) + `"}`
}

// refsTo is an input array of n item_references to each of ids in turn.
func refsTo(n int, ids ...string) string {
	refs := make([]string, 0, n*len(ids))
	for range n {
		for _, id := range ids {
			refs = append(refs, `{"type":"item_reference","id":"`+id+`"}`)
		}
	}
	return "[" + strings.Join(refs, ",") + "]"
}

// countingPrior counts the lookups of each item.
type countingPrior struct {
	Prior
	lookups map[string]int
}

func (p *countingPrior) Item(id string) (json.RawMessage, error) {
	p.lookups[id]++
	return p.Prior.Item(id)
}

// allocated is the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// wantLimit checks that e is the 400 of a limit, naming the corral serve
// flag, at a parameter starting with param.
func wantLimit(t *testing.T, what string, e *Error, param, flag string) {
	t.Helper()
	if e == nil || e.Status != 400 || e.Code != "limit_exceeded" || !strings.HasPrefix(e.Param, param) || !strings.Contains(e.Message, "corral serve --"+flag) {
		t.Errorf("%s: %+v, want a 400 limit_exceeded at %s… naming --%s", what, e, param, flag)
	}
}

// TestTranslateReferenceAmplification: 200 references (a 9 KB body) to a
// stored reasoning item of 1 MB would be 200 MB of reasoning, and took
// 2 MB of copies each. The references count against --max-prompt-bytes
// as they are resolved, and the item is read once.
func TestTranslateReferenceAmplification(t *testing.T) {
	p := &countingPrior{Prior: fakePrior{items: map[string]string{"rs_big": reasoningItem("rs_big", 1<<20)}}, lookups: map[string]int{}}
	r, de := Decode([]byte(`{"input":` + refsTo(200, "rs_big") + `}`))
	if de != nil {
		t.Fatal(de)
	}
	var e *Error
	alloc := allocated(func() { _, e = Translate(r, p, Limits{}) })
	wantLimit(t, "200 references to 1 MB", e, "input[", "max-prompt-bytes")
	t.Logf("200 references to 1 MB: %d KB allocated", alloc>>10)
	if alloc > 16<<20 {
		t.Errorf("200 references to 1 MB allocated %d MB", alloc>>20)
	}
	if p.lookups["rs_big"] != 1 {
		t.Errorf("the referenced item was looked up %d times", p.lookups["rs_big"])
	}
}

// TestTranslateReferenceParsedOnce: a stored item is parsed once however
// often a request refers to it. A message with a 4 MB unknown field,
// referred to 1,000 times (a 43 KB body), took 11 s of CPU parsing it
// again each time.
func TestTranslateReferenceParsedOnce(t *testing.T) {
	p := &countingPrior{Prior: fakePrior{items: map[string]string{"msg_junk": junkMessage("msg_junk", 4<<20)}}, lookups: map[string]int{}}
	r, de := Decode([]byte(`{"input":` + refsTo(1000, "msg_junk") + `}`))
	if de != nil {
		t.Fatal(de)
	}
	tr, e := Translate(r, p, Limits{})
	if e != nil {
		t.Fatal(e)
	}
	if len(tr.Messages) != 1000 || string(tr.Messages[999].Content) != `"hi"` {
		t.Errorf("%d messages, the last %+v", len(tr.Messages), tr.Messages[len(tr.Messages)-1])
	}
	if p.lookups["msg_junk"] != 1 {
		t.Errorf("the referenced item was looked up and parsed %d times", p.lookups["msg_junk"])
	}
}

// TestTranslateReferencedBytes: what the stored items a request refers to
// hold counts against --max-prompt-bytes, text or not: three messages
// with 4 MB unknown fields are more to parse than a prompt may be; a
// stored additional_tools item's tools count each time it is referred to.
func TestTranslateReferencedBytes(t *testing.T) {
	p := fakePrior{items: map[string]string{
		"msg_0": junkMessage("msg_0", 4e6), "msg_1": junkMessage("msg_1", 4e6), "msg_2": junkMessage("msg_2", 4e6),
		"tools": `{"type":"additional_tools","id":"tools","tools":[{"type":"web_search","junk":"` + strings.Repeat("j", 4<<20) + `"}]}`,
	}}
	for _, c := range []struct{ name, input string }{
		{"three 4 MB items", refsTo(1, "msg_0", "msg_1", "msg_2")},
		{"4 MB of tools 100 times", refsTo(100, "tools")},
	} {
		r, de := Decode([]byte(`{"input":` + c.input + `}`))
		if de != nil {
			t.Fatal(de)
		}
		_, e := Translate(r, p, Limits{})
		wantLimit(t, c.name, e, "input[", "max-prompt-bytes")
	}
	// Two of the messages are within it.
	r, _ := Decode([]byte(`{"input":` + refsTo(1, "msg_0", "msg_1") + `}`))
	if _, e := Translate(r, p, Limits{}); e != nil {
		t.Errorf("two 4 MB items: %v", e)
	}
}

// chain is a conversation continued with previous_response_id through
// a real Store, as the core does it.
type chain struct {
	t    *testing.T
	st   *Store
	lim  Limits
	last string // the id of the last stored response
	n    int
}

// turn sends input (a JSON array) continuing the chain, answers it with
// "ok" and stores the response.
func (c *chain) turn(input string) *Error {
	c.t.Helper()
	body := `{"input":` + input + `}`
	if c.last != "" {
		body = `{"previous_response_id":"` + c.last + `","input":` + input + `}`
	}
	r, de := Decode([]byte(body))
	if de != nil {
		c.t.Fatal(de)
	}
	tr, e := Translate(r, c.st.Prior("alice"), c.lim)
	if e != nil {
		return e
	}
	c.n++
	id := fmt.Sprint("resp_", c.n)
	storeAnswer(c.t, c.st, id, r, tr)
	c.last = id
	return nil
}

// TestTranslateChain: a chain of previous_response_id grows the
// conversation a turn at a time; what it has grown to counts against
// --max-prompt-bytes and --max-messages, though each request is small.
func TestTranslateChain(t *testing.T) {
	// 1 MB of reasoning a turn, which ChatML does not render.
	c := &chain{t: t, st: NewStore(StoreOptions{})}
	var e *Error
	for i := range 12 {
		if e = c.turn(`[` + reasoningItem(fmt.Sprint("rs_", i), 1<<20) + `,{"role":"user","content":"go on"}]`); e != nil {
			if i < 7 {
				t.Errorf("turn %d of 1 MB: %v", i, e)
			}
			break
		}
	}
	wantLimit(t, "12 turns of 1 MB", e, "input[0]", "max-prompt-bytes")

	// Two messages a turn: the question and the answer.
	c = &chain{t: t, st: NewStore(StoreOptions{}), lim: Limits{MaxItems: 10}}
	for i := range 8 {
		if e = c.turn(`[{"role":"user","content":"go on"}]`); e != nil {
			if i < 5 {
				t.Errorf("turn %d of 2 messages: %v", i, e)
			}
			break
		}
	}
	wantLimit(t, "8 turns of 2 messages", e, "input[0]", "max-messages")
}

// storeAnswer stores under alice's key, as id, the response "ok" to r
// (translated as tr), as the server records a finished response.
func storeAnswer(t *testing.T, st *Store, id string, r *Request, tr *Translation) {
	t.Helper()
	s := NewStream(NewResponse(id, "m", 1, r, tr), tr.Namespaces)
	s.Start()
	s.Delta(wire.Delta{Content: str("ok")})
	s.End(End{FinishReason: "stop"}, 2)
	rec, err := Record(r, tr, s.Response())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put("alice", id, rec); err != nil {
		t.Fatal(err)
	}
}
