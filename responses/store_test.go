package responses

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/wire"
)

// blob is an entry whose response is n bytes long.
func blob(n int) *Stored {
	return &Stored{Response: []byte(strings.Repeat("x", n))}
}

// sizeOf is what the store counts for blob(n) stored as id.
func sizeOf(n int, id string) int64 { return blob(n).size() + entrySize(id) }

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// check verifies the store's bookkeeping: the byte counts are the sum of
// the entries, both lists hold every entry once, the item index points
// at live entries, and the budgets hold.
func (st *Store) check(t *testing.T) {
	t.Helper()
	st.mu.Lock()
	defer st.mu.Unlock()
	var total int64
	for k, e := range st.byKey {
		if e.key != k {
			t.Errorf("entry %v under key %v", e.key, k)
		}
		total += e.size
	}
	if total != st.bytes || st.lru.Len() != len(st.byKey) {
		t.Errorf("bytes %d counted %d; %d in the list, %d by key", total, st.bytes, st.lru.Len(), len(st.byKey))
	}
	n := 0
	for name, o := range st.owners {
		var b int64
		for el := o.lru.Front(); el != nil; el = el.Next() {
			e := el.Value.(*entry)
			if e.key.owner != name || st.byKey[e.key] != e {
				t.Errorf("owner %s lists %v", name, e.key)
			}
			b += e.size
			n++
		}
		if b != o.bytes || b > st.opt.MaxOwnerBytes {
			t.Errorf("owner %s: %d bytes counted %d, budget %d", name, b, o.bytes, st.opt.MaxOwnerBytes)
		}
	}
	if n != len(st.byKey) || st.bytes > st.opt.MaxBytes {
		t.Errorf("%d entries by owner, %d by key; %d bytes of %d", n, len(st.byKey), st.bytes, st.opt.MaxBytes)
	}
	for k, e := range st.items {
		if st.byKey[e.key] != e || e.stored.Items[k.id] == nil {
			t.Errorf("item %v points at a dead entry", k)
		}
	}
}

func TestStoreOwners(t *testing.T) {
	st := NewStore(StoreOptions{})
	if err := st.Put("alice", "resp_1", blob(100)); err != nil {
		t.Fatal(err)
	}
	if s, err := st.Get("alice", "resp_1"); err != nil || len(s.Response) != 100 {
		t.Errorf("get: %v", err)
	}
	if _, err := st.Get("bob", "resp_1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another owner's response: %v", err)
	}
	if err := st.Delete("bob", "resp_1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another owner deletes: %v", err)
	}
	if err := st.Delete("alice", "resp_1"); err != nil {
		t.Errorf("delete: %v", err)
	}
	if _, err := st.Get("alice", "resp_1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted: %v", err)
	}
	if n, b := st.Usage(); n != 0 || b != 0 {
		t.Errorf("usage after delete: %d entries, %d bytes", n, b)
	}
	st.Put("alice", "resp_2", blob(100))
	st.Put("alice", "resp_2", blob(200)) // replaced
	if n, b := st.Usage(); n != 1 || b != sizeOf(200, "resp_2") {
		t.Errorf("usage after a replacement: %d entries, %d bytes", n, b)
	}
	st.check(t)
}

func TestStoreTTL(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	st := NewStore(StoreOptions{TTL: time.Minute, Now: c.now})
	st.Put("a", "old", blob(100))
	c.add(30 * time.Second)
	st.Put("a", "new", blob(100))
	c.add(30 * time.Second)
	if _, err := st.Get("a", "old"); err != nil {
		t.Errorf("at its TTL: %v", err)
	}
	c.add(time.Second)
	if _, err := st.Get("a", "old"); !errors.Is(err, ErrNotFound) {
		t.Errorf("past its TTL: %v", err)
	}
	if _, err := st.Get("a", "new"); err != nil {
		t.Errorf("within its TTL: %v", err)
	}
	c.add(time.Minute)
	st.Put("b", "other", blob(100)) // drops the expired entry at the cold end
	if n, b := st.Usage(); n != 1 || b != sizeOf(100, "other") {
		t.Errorf("expired entries kept: %d entries, %d bytes", n, b)
	}
	st.check(t)
}

func TestStoreLRU(t *testing.T) {
	unit := sizeOf(100, "1")
	st := NewStore(StoreOptions{MaxBytes: 3 * unit})
	st.Put("a", "1", blob(100))
	st.Put("b", "2", blob(100))
	st.Put("a", "3", blob(100))
	st.Get("a", "1") // now 2 is the least recently used
	st.Put("b", "4", blob(100))
	for id, want := range map[string]bool{"1": true, "2": false, "3": true, "4": true} {
		owner := map[string]string{"1": "a", "2": "b", "3": "a", "4": "b"}[id]
		if _, err := st.Get(owner, id); (err == nil) != want {
			t.Errorf("%s kept: %v, want %v", id, err == nil, want)
		}
	}
	st.check(t)
	if err := st.Put("a", "big", blob(int(3*unit))); !errors.Is(err, ErrTooLarge) {
		t.Errorf("an entry over the budget: %v", err)
	}
	if n, _ := st.Usage(); n != 3 {
		t.Errorf("a refused entry evicted others: %d left", n)
	}
}

func TestStoreOwnerBudget(t *testing.T) {
	unit := sizeOf(100, "q")
	st := NewStore(StoreOptions{MaxBytes: 10 * unit, MaxOwnerBytes: 5 * unit / 2})
	st.Put("quiet", "q", blob(100))
	for i := range 10 {
		st.Put("noisy", fmt.Sprint(i), blob(100))
	}
	if _, err := st.Get("quiet", "q"); err != nil {
		t.Errorf("one owner evicted another's entry: %v", err)
	}
	if n, b := st.Usage(); n != 3 || b != 3*unit {
		t.Errorf("%d entries, %d bytes; want the noisy owner's last 2 and the quiet one's", n, b)
	}
	for _, id := range []string{"8", "9"} {
		if _, err := st.Get("noisy", id); err != nil {
			t.Errorf("newest %s: %v", id, err)
		}
	}
	st.check(t)
}

// TestStoreRecord stores a finished response and continues it, as the
// core will: previous_response_id and item_reference through Prior, for
// its owner only.
func TestStoreRecord(t *testing.T) {
	r, _ := Decode([]byte(`{"instructions":"sys","input":[{"type":"message","id":"msg_in","role":"user","content":"list files"}],"tools":[{"type":"function","name":"ls"}]}`))
	tr, e := Translate(r, nil, Limits{})
	if e != nil {
		t.Fatal(e)
	}
	s := NewStream(NewResponse("resp_1", "corral", 1, r, tr), tr.Namespaces)
	s.Start()
	s.Delta(wire.Delta{ReasoningContent: str("use ls")})
	s.Delta(wire.Delta{ToolCalls: []wire.ToolCallDelta{{Index: 0, ID: "call_1", Function: wire.FunctionCall{Name: "ls", Arguments: "{}"}}}})
	s.End(End{FinishReason: "tool_calls"}, 2)
	rec, err := Record(r, tr, s.Response())
	if err != nil {
		t.Fatal(err)
	}
	st := NewStore(StoreOptions{})
	if err := st.Put("alice", "resp_1", rec); err != nil {
		t.Fatal(err)
	}
	callItem := s.Response().Output[1].ID
	next, _ := Decode([]byte(`{"previous_response_id":"resp_1","input":[{"type":"item_reference","id":"msg_in"},{"type":"item_reference","id":"` + callItem + `"},{"type":"function_call_output","call_id":"call_1","output":"a b"}]}`))
	tr2, e := Translate(next, st.Prior("alice"), Limits{})
	if e != nil {
		t.Fatal(e)
	}
	want := []msg{{Role: "user", Content: "list files"}, {Role: "assistant", Reasoning: "use ls", Calls: []string{"call_1 ls {}"}},
		{Role: "user", Content: "list files"}, {Role: "assistant", Calls: []string{"call_1 ls {}"}}, {Role: "tool", Content: "a b", CallID: "call_1"}}
	if got := view(t, tr2.Messages); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("continued (instructions not carried over)\n got %+v\nwant %+v", got, want)
	}
	if _, e := Translate(next, st.Prior("bob"), Limits{}); e == nil || e.Status != 404 || e.Param != "previous_response_id" {
		t.Errorf("another owner's previous_response_id: %v", e)
	}
	st.Delete("alice", "resp_1")
	ref, _ := Decode([]byte(`{"input":[{"type":"item_reference","id":"msg_in"}]}`))
	if _, e := Translate(ref, st.Prior("alice"), Limits{}); e == nil || e.Status != 404 {
		t.Errorf("an item of a deleted response: %v", e)
	}
	st.check(t)
}

// TestStoreRecordReferences: a request's references, with their type or
// without, are not stored as items: the id still finds the item it
// refers to.
func TestStoreRecordReferences(t *testing.T) {
	st := NewStore(StoreOptions{})
	for i, body := range []string{
		`{"input":[{"type":"message","id":"msg_in","role":"user","content":"list files"}]}`,
		`{"input":[{"id":"msg_in"},{"type":"item_reference","id":"msg_in"},{"role":"user","content":"next"}]}`,
	} {
		r, _ := Decode([]byte(body))
		tr, e := Translate(r, st.Prior("alice"), Limits{})
		if e != nil {
			t.Fatal(e)
		}
		id := fmt.Sprint("resp_", i)
		storeAnswer(t, st, id, r, tr)
	}
	r, _ := Decode([]byte(`{"input":[{"id":"msg_in"}]}`))
	tr, e := Translate(r, st.Prior("alice"), Limits{})
	if e != nil || len(tr.Messages) != 1 || string(tr.Messages[0].Content) != `"list files"` {
		t.Errorf("msg_in after a request that referred to it: %+v %v", tr, e)
	}
	st.check(t)
}

// churn runs n goroutines of three owners that each store, read,
// continue and delete rounds times at once on st.
func churn(t *testing.T, st *Store, n, rounds int) {
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprint("owner", g%3)
			p := st.Prior(owner)
			for i := range rounds {
				id := fmt.Sprint("resp_", i%17)
				e := blob(100 + i%5*50)
				e.Items = map[string]json.RawMessage{fmt.Sprint("item_", i%7): []byte(`{"type":"message","role":"user","content":"x"}`)}
				if err := st.Put(owner, id, e); err != nil {
					t.Error(err)
					return
				}
				st.Get(owner, fmt.Sprint("resp_", (i+3)%17))
				p.Item(fmt.Sprint("item_", i%5))
				p.Conversation(id)
				if i%11 == 0 {
					st.Delete(owner, id)
				}
			}
		}()
	}
	wg.Wait()
}

// TestStoreConcurrent runs owners that store, read, continue and delete
// at once, past the budgets; run it under -race -count=20.
func TestStoreConcurrent(t *testing.T) {
	unit := sizeOf(200, "resp_10") // with an item: about 1.5 units
	st := NewStore(StoreOptions{MaxBytes: 10 * unit, MaxOwnerBytes: 4 * unit})
	churn(t, st, 8, 200)
	st.check(t)
	if _, b := st.Usage(); b > 10*unit {
		t.Errorf("%d bytes past the budget", b)
	}
}

// TestStoreMemory: the store counts what its entries take in memory,
// not just their bytes of text: map entries, the item index, message
// structs. Filled with responses of many small reasoning items, the heap
// it holds stays within 1.5 times its budget: it held 2.1 times here
// when it counted bytes of text and JSON only, and 3.6 times in the
// finding, through the server.
func TestStoreMemory(t *testing.T) {
	const budget = 8 << 20
	st := NewStore(StoreOptions{MaxBytes: budget, TTL: time.Hour})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for n := range 30 {
		var in strings.Builder
		in.WriteString(`{"input":[`)
		for i := range 3000 {
			fmt.Fprintf(&in, `{"type":"reasoning","id":"rs_%d_%d","summary":[],"content":[{"type":"reasoning_text","text":"x"}]},`, n, i)
		}
		in.WriteString(`{"role":"user","content":"go on"}]}`)
		r, de := Decode([]byte(in.String()))
		if de != nil {
			t.Fatal(de)
		}
		tr, e := Translate(r, nil, Limits{})
		if e != nil {
			t.Fatal(e)
		}
		id := fmt.Sprint("resp_", n)
		storeAnswer(t, st, id, r, tr)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	entries, counted := st.Usage()
	live := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d entries, %d KB counted, %d KB live: %.2f times the budget", entries, counted>>10, live>>10, float64(live)/budget)
	if entries == 30 || counted > budget {
		t.Fatalf("%d entries of 30 kept, %d bytes counted: the budget of %d did not apply", entries, counted, budget)
	}
	if live > budget*3/2 {
		t.Errorf("the store holds %d MB of heap for a budget of %d MB (%.1f times)", live>>20, budget>>20, float64(live)/budget)
	}
	// And it does not count so much more than there is that the budget
	// is wasted.
	if live < budget/3 {
		t.Errorf("the store holds %d MB of heap for a budget of %d MB: it counts %.1f times what it holds", live>>20, budget>>20, float64(counted)/float64(live))
	}
	runtime.KeepAlive(st)
}

// TestStoreRecordMedia: a stored conversation keeps its images and
// sounds as the parts they came as (a medium's marker holds a nonce of
// the process), and previous_response_id and item_reference read them
// back as media of the next request, numbered after its own.
func TestStoreRecordMedia(t *testing.T) {
	const png, wav = "data:image/png;base64,iVBO", "UklG"
	r, _ := Decode([]byte(`{"input":[{"type":"message","id":"msg_in","role":"user","content":[{"type":"input_text","text":"see"},{"type":"input_image","image_url":"` + png + `","detail":"high"},{"type":"input_audio","input_audio":{"data":"` + wav + `","format":"wav"}}]}]}`))
	tr, e := Translate(r, nil, Limits{})
	if e != nil {
		t.Fatal(e)
	}
	s := NewStream(NewResponse("resp_1", "corral", 1, r, tr), tr.Namespaces)
	s.Start()
	s.Delta(wire.Delta{Content: str("a gradient")})
	s.End(End{FinishReason: "stop"}, 2)
	rec, err := Record(r, tr, s.Response())
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(rec.Messages); strings.Contains(string(b), "media_marker") || !strings.Contains(string(b), `"input_image"`) || !strings.Contains(string(b), `"input_audio"`) {
		t.Errorf("stored messages %s; want the input_image and input_audio parts, no markers", b)
	}
	st := NewStore(StoreOptions{})
	if err := st.Put("alice", "resp_1", rec); err != nil {
		t.Fatal(err)
	}
	next, _ := Decode([]byte(`{"previous_response_id":"resp_1","input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/gif;base64,R0lG"}]},{"type":"item_reference","id":"msg_in"}]}`))
	tr2, e := Translate(next, st.Prior("alice"), Limits{})
	if e != nil {
		t.Fatal(e)
	}
	want := []msg{{Role: "user", Content: "see" + chat.MediaMarker(0) + chat.MediaMarker(1)}, {Role: "assistant", Content: "a gradient"},
		{Role: "user", Content: chat.MediaMarker(2)}, {Role: "user", Content: "see" + chat.MediaMarker(3) + chat.MediaMarker(4)}}
	if got := view(t, tr2.Messages); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("continued\n got %+v\nwant %+v", got, want)
	}
	var got []string
	for _, m := range tr2.Media {
		got = append(got, m.Param+" "+m.URL+m.Base64+" "+m.Type)
	}
	if want := []string{
		"previous_response_id.messages[0].content[1].image_url " + png + " ",
		"previous_response_id.messages[0].content[2].input_audio.data " + wav + " wav",
		"input[0].content[0].image_url data:image/gif;base64,R0lG ",
		"input[1].content[1].image_url " + png + " ",
		"input[1].content[2].input_audio.data " + wav + " wav",
	}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("media\n got %q\nwant %q", got, want)
	}
	// The stored conversation is as it was.
	if b, _ := json.Marshal(rec.Messages); strings.Contains(string(b), "media_marker") {
		t.Errorf("reading it back changed the stored messages: %s", b)
	}
}
