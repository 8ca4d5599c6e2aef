package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/wire"
)

// openAt opens a store over dir, failing t on an error; it is closed
// when the test ends.
func openAt(t *testing.T, dir string, opt StoreOptions) *Store {
	t.Helper()
	opt.Dir = dir
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	st, err := OpenStore(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// restart closes st and opens a new store over its directory, as a
// restarted server does.
func restart(t *testing.T, st *Store, opt StoreOptions) *Store {
	t.Helper()
	dir := st.disk.dir
	st.Close()
	return openAt(t, dir, opt)
}

// files lists the entry files of dir (named as the store names them),
// sorted.
func files(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		if isEntryName(de.Name()) {
			names = append(names, de.Name())
		}
	}
	return names
}

// checkDisk verifies that the directory holds a file for each entry of
// st, no other (and no temporary file), each reading back as the entry.
func (st *Store) checkDisk(t *testing.T) {
	t.Helper()
	st.check(t)
	st.mu.Lock()
	defer st.mu.Unlock()
	var want []string
	for k := range st.byKey {
		want = append(want, fileName(k.owner, k.id))
	}
	slices.Sort(want)
	if got := files(t, st.disk.dir); !slices.Equal(got, want) {
		t.Errorf("files %v, want those of the entries %v", got, want)
	}
	if tmps, _ := filepath.Glob(filepath.Join(st.disk.dir, tmpPrefix+"*")); len(tmps) > 0 {
		t.Errorf("temporary files left: %v", tmps)
	}
	for k, e := range st.byKey {
		b, err := os.ReadFile(st.disk.path(k.owner, k.id))
		if err != nil {
			t.Error(err)
			continue
		}
		if _, err := decodeHeader(b, int64(len(b))); err != nil {
			t.Errorf("%v: %v", k, err)
			continue
		}
		owner, id, s, err := decodeBody(b[fileHeader:])
		if err != nil || owner != k.owner || id != k.id || !reflect.DeepEqual(s, e.stored) {
			t.Errorf("%v: the file reads back as %q %q %v", k, owner, id, err)
		}
	}
}

// conversation is a stored response of a real exchange, with reasoning, a
// tool call, input items with ids, and its continuation's request.
func conversation(t *testing.T, id string) (*Stored, *Request) {
	t.Helper()
	r, _ := Decode([]byte(`{"instructions":"sys","input":[{"type":"message","id":"msg_in","role":"user","content":[{"type":"input_text","text":"list <files> & \"dirs\"\n\tplease"}]}],"tools":[{"type":"function","name":"ls"}]}`))
	tr, e := Translate(r, nil, Limits{})
	if e != nil {
		t.Fatal(e)
	}
	s := NewStream(NewResponse(id, "corral", 1, r, tr), tr.Namespaces)
	s.Start()
	s.Delta(wire.Delta{ReasoningContent: str("use ls, é\u2028")})
	s.Delta(wire.Delta{Content: str("Let me look.")})
	s.Delta(wire.Delta{ToolCalls: []wire.ToolCallDelta{{Index: 0, ID: "call_1", Function: wire.FunctionCall{Name: "ls", Arguments: `{"dir": "."}`}}}})
	s.End(End{FinishReason: "tool_calls"}, 2)
	rec, err := Record(r, tr, s.Response())
	if err != nil {
		t.Fatal(err)
	}
	callItem := s.Response().Output[len(s.Response().Output)-1].ID
	next, _ := Decode([]byte(`{"previous_response_id":"` + id + `","input":[{"type":"item_reference","id":"msg_in"},{"type":"item_reference","id":"` + callItem + `"},{"type":"function_call_output","call_id":"call_1","output":"a b"}]}`))
	return rec, next
}

// render is the prompt a chat template renders from messages.
func render(t *testing.T, msgs []chat.Message) string {
	t.Helper()
	tpl, err := chat.Lookup("chatml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := tpl.Render(msgs, chat.Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStoreDiskRestart: a conversation stored by one store is continued
// through a new store over the same directory (a restart) exactly as
// through the first: the same stored entry, the same translated messages
// and rendered prompt, the same GET body, byte for byte.
func TestStoreDiskRestart(t *testing.T) {
	dir := t.TempDir()
	st := openAt(t, dir, StoreOptions{})
	rec, next := conversation(t, "resp_1")
	if err := st.Put("alice", "resp_1", rec); err != nil {
		t.Fatal(err)
	}
	before, e := Translate(next, st.Prior("alice"), Limits{})
	if e != nil {
		t.Fatal(e)
	}
	st.checkDisk(t)
	_, bytesBefore := st.Usage()

	st = restart(t, st, StoreOptions{})
	got, err := st.Get("alice", "resp_1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Errorf("after a restart the entry is\n%+v\nwant\n%+v", got, rec)
	}
	if !bytes.Equal(got.Response, rec.Response) {
		t.Errorf("GET after a restart: %s, want %s", got.Response, rec.Response)
	}
	after, e := Translate(next, st.Prior("alice"), Limits{})
	if e != nil {
		t.Fatal(e)
	}
	if !reflect.DeepEqual(after.Messages, before.Messages) {
		t.Errorf("continued after a restart:\n%+v\nbefore:\n%+v", after.Messages, before.Messages)
	}
	if a, b := render(t, after.Messages), render(t, before.Messages); a != b {
		t.Errorf("the continuation renders after a restart as\n%s\nbefore as\n%s", a, b)
	}
	if n, b := st.Usage(); n != 1 || b != bytesBefore {
		t.Errorf("after a restart: %d entries, %d bytes; want 1, %d", n, b, bytesBefore)
	}
	st.checkDisk(t)
}

// fill sets every field of v (a struct, slice, map or string, however
// nested) to a value of its own, so that a field the file does not carry
// reads back as its zero value and shows; n numbers the values.
func fill(v reflect.Value, n *int) error {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Struct:
		for i := range v.NumField() {
			if err := fill(v.Field(i), n); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes(fmt.Appendf(nil, `"b%d"`, *n))
			return nil
		}
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			if err := fill(v.Index(i), n); err != nil {
				return err
			}
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			if err := fill(k, n); err != nil {
				return err
			}
			if err := fill(e, n); err != nil {
				return err
			}
			v.SetMapIndex(k, e)
		}
	default:
		return fmt.Errorf("a field of kind %s (%s): the file does not carry it (disk.go's encodeEntry and decodeBody)", v.Kind(), v.Type())
	}
	return nil
}

// TestStoreDiskFields: every field of a stored entry, however deep, is
// written and read back; nil and empty slices and maps stay what they
// were. A field added to Stored, chat.Message or wire.ToolCall that the
// file does not carry fails here.
func TestStoreDiskFields(t *testing.T) {
	var s Stored
	n := 0
	if err := fill(reflect.ValueOf(&s).Elem(), &n); err != nil {
		t.Fatal(err)
	}
	empty := &Stored{Response: json.RawMessage{}, Messages: []chat.Message{{Content: json.RawMessage{}, ToolCalls: []wire.ToolCall{}}, {}}, Items: map[string]json.RawMessage{"a": {}, "b": nil}}
	for i, want := range []*Stored{&s, {}, empty} {
		b := encodeEntry("owner", "id", time.Unix(5, 6), want)
		h, err := decodeHeader(b, int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		owner, id, got, err := decodeBody(b[fileHeader:])
		if err != nil || owner != "owner" || id != "id" || !h.created.Equal(time.Unix(5, 6)) {
			t.Fatalf("%d: %q %q %v %v", i, owner, id, h.created, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%d: read back as\n%#v\nwant\n%#v", i, got, want)
		}
	}
}

// TestStoreDiskOwners: after a restart each owner finds its own entry of
// an id, not another's; no file name holds an owner or an id, and an
// owner or id made of path elements writes nowhere but the directory.
func TestStoreDiskOwners(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "store")
	st := openAt(t, dir, StoreOptions{})
	evil := []string{"../escape", "/etc/passwd", "a/../../b", "..", ".", "", "lock", "x\x00y"}
	for _, o := range evil {
		for _, id := range []string{"resp_1", "../../resp", "/abs", ""} {
			if err := st.Put(o, id, blob(10+len(o))); err != nil {
				t.Fatal(err)
			}
		}
	}
	st.Put("alice", "resp_1", blob(100))
	st.Put("bob", "resp_1", blob(200))
	st.checkDisk(t)

	st = restart(t, st, StoreOptions{})
	for o, n := range map[string]int{"alice": 100, "bob": 200} {
		if s, err := st.Get(o, "resp_1"); err != nil || len(s.Response) != n {
			t.Errorf("%s after a restart: %v", o, err)
		}
	}
	if _, err := st.Get("carol", "resp_1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("an owner without entries: %v", err)
	}
	for _, o := range evil {
		if s, err := st.Get(o, "../../resp"); err != nil || len(s.Response) != 10+len(o) {
			t.Errorf("owner %q after a restart: %v", o, err)
		}
	}
	var paths []string
	filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if !d.IsDir() {
			paths = append(paths, path)
		}
		return nil
	})
	for _, p := range paths {
		if filepath.Dir(p) != dir {
			t.Errorf("a file outside the directory: %s", p)
		}
		if name := filepath.Base(p); name != lockName && !isEntryName(name) {
			t.Errorf("a file named %q, not a digest", name)
		}
	}
	if want := len(evil)*4 + 2 + 1; len(paths) != want {
		t.Errorf("%d files, want %d (and the lock)", len(paths), want)
	}
	st.checkDisk(t)
}

// TestStoreDiskMisplaced: a file copied under another entry's name (its
// owner's, another owner's) is refused at the start: its content names
// another entry. It is never served to the owner the name belongs to.
func TestStoreDiskMisplaced(t *testing.T) {
	dir := t.TempDir()
	st := openAt(t, dir, StoreOptions{})
	st.Put("alice", "resp_secret", blob(100))
	st.Close()
	b, err := os.ReadFile(filepath.Join(dir, fileName("alice", "resp_secret")))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, fileName("mallory", "resp_secret")), b, 0o600)
	st = openAt(t, dir, StoreOptions{})
	if _, err := st.Get("mallory", "resp_secret"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another owner's entry under this owner's name: %v", err)
	}
	if _, err := st.Get("alice", "resp_secret"); err != nil {
		t.Error(err)
	}
	st.checkDisk(t)
}

// TestStoreDiskTTL: an entry's TTL counts from when it was stored, across
// restarts (with the new store's TTL): found before, gone and its file
// removed after; Delete removes the file.
func TestStoreDiskTTL(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	opt := StoreOptions{TTL: time.Minute, Now: c.now}
	st := openAt(t, t.TempDir(), opt)
	st.Put("a", "old", blob(100))
	c.add(40 * time.Second)
	st.Put("a", "new", blob(100))
	st.Put("a", "deleted", blob(100))
	if err := st.Delete("a", "deleted"); err != nil {
		t.Fatal(err)
	}
	c.add(20 * time.Second) // "old" at its TTL
	st = restart(t, st, opt)
	if n, _ := st.Usage(); n != 2 {
		t.Errorf("at the TTL of the oldest: %d entries, want 2", n)
	}
	if _, err := st.Get("a", "deleted"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted before the restart: %v", err)
	}
	c.add(time.Second)
	st = restart(t, st, opt)
	if _, err := st.Get("a", "old"); !errors.Is(err, ErrNotFound) {
		t.Errorf("past its TTL: %v", err)
	}
	if _, err := st.Get("a", "new"); err != nil {
		t.Errorf("within its TTL: %v", err)
	}
	st.checkDisk(t)
	// A shorter TTL applies to what was stored before.
	opt.TTL = 10 * time.Second
	st = restart(t, st, opt)
	if n, _ := st.Usage(); n != 0 {
		t.Errorf("with a TTL the entries are past: %d left", n)
	}
	st.checkDisk(t)
}

// TestStoreDiskBudget: an entry evicted past the budget is removed from
// the directory; the least recently used order survives a restart (to
// the second): a new store with a smaller budget keeps the most recently
// used entries, one with a smaller owner budget each owner's newest.
func TestStoreDiskBudget(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	unit := sizeOf(100, "1")
	opt := StoreOptions{MaxBytes: 4 * unit, Now: c.now}
	st := openAt(t, t.TempDir(), opt)
	for _, k := range []key{{"a", "1"}, {"b", "2"}, {"a", "3"}, {"b", "4"}} {
		st.Put(k.owner, k.id, blob(100))
		c.add(time.Second)
	}
	st.Get("a", "1") // 2 is the least recently used, then 3
	c.add(time.Second)
	st.Put("b", "5", blob(100))
	c.add(time.Second)
	if _, err := st.Get("b", "2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("2 not evicted: %v", err)
	}
	st.checkDisk(t)

	st = restart(t, st, opt)
	if n, _ := st.Usage(); n != 4 {
		t.Errorf("after a restart: %d entries, want 4", n)
	}
	st.checkDisk(t)
	opt.MaxBytes = 3 * unit
	st = restart(t, st, opt)
	// In this order, so that b's 5 is used after its 4.
	for _, k := range []struct {
		key
		kept bool
	}{{key{"a", "3"}, false}, {key{"b", "4"}, true}, {key{"a", "1"}, true}, {key{"b", "5"}, true}} {
		if _, err := st.Get(k.owner, k.id); (err == nil) != k.kept {
			t.Errorf("%v kept: %v, want %v", k.key, err == nil, k.kept)
		}
		c.add(time.Second)
	}
	st.checkDisk(t)
	opt.MaxOwnerBytes = unit
	st = restart(t, st, opt)
	for k, kept := range map[key]bool{{"a", "1"}: true, {"b", "4"}: false, {"b", "5"}: true} {
		if _, err := st.Get(k.owner, k.id); (err == nil) != kept {
			t.Errorf("owner budget: %v kept: %v, want %v", k, err == nil, kept)
		}
	}
	if n, _ := st.Usage(); n != 2 {
		t.Errorf("owner budget: %d entries, want each owner's newest", n)
	}
	st.checkDisk(t)
}

// TestStoreDiskSize: an entry's file takes no more than the store counts
// for it in memory (so that the budget bounds the directory too).
func TestStoreDiskSize(t *testing.T) {
	st := openAt(t, t.TempDir(), StoreOptions{})
	rec, _ := conversation(t, "resp_1")
	st.Put("key-0123abcd", "resp_1", rec)
	for _, n := range []int{0, 1, 100, 10000} {
		st.Put("key-0123abcd", fmt.Sprint("blob_", n), blob(n))
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for k, e := range st.byKey {
		fi, err := os.Stat(st.disk.path(k.owner, k.id))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > e.size {
			t.Errorf("%s: a file of %d bytes for %d counted", k.id, fi.Size(), e.size)
		}
	}
}

// TestStoreDiskCorrupt: files a crash or the disk spoiled (a torn write,
// a flipped byte in the header or the body, a length that lies, a file
// that is not the store's, a temporary file) are removed at the start
// with a log line for each, never loaded, never a panic; the others load.
func TestStoreDiskCorrupt(t *testing.T) {
	dir := t.TempDir()
	st := openAt(t, dir, StoreOptions{})
	for i := range 8 {
		rec, _ := conversation(t, fmt.Sprint("resp_", i))
		if err := st.Put("alice", fmt.Sprint("resp_", i), rec); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	path := func(i int) string { return filepath.Join(dir, fileName("alice", fmt.Sprint("resp_", i))) }
	spoil := func(i int, f func(b []byte) []byte) {
		b, err := os.ReadFile(path(i))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path(i), f(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	spoil(0, func(b []byte) []byte { return b[:len(b)/2] })                    // torn
	spoil(1, func(b []byte) []byte { b[len(b)-7] ^= 0x10; return b })          // the body
	spoil(2, func(b []byte) []byte { b[20] ^= 1; return b })                   // the header
	spoil(3, func(b []byte) []byte { return b[:fileHeader-3] })                // less than a header
	spoil(4, func(b []byte) []byte { return append(b, 0) })                    // longer than it says
	spoil(5, func(b []byte) []byte { return []byte("not a stored response") }) // not the store's
	os.WriteFile(filepath.Join(dir, tmpPrefix+"123"), []byte("half"), 0o600)
	for _, name := range []string{"notes.txt", "notes.resp", ".tmp-notes", strings.ToUpper(fileName("a", "b"))} {
		os.WriteFile(filepath.Join(dir, name), []byte("an operator's"), 0o600)
	}

	var log bytes.Buffer
	st = openAt(t, dir, StoreOptions{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	for i := range 8 {
		_, err := st.Get("alice", fmt.Sprint("resp_", i))
		if (err == nil) != (i >= 6) {
			t.Errorf("resp_%d loaded: %v", i, err)
		}
		if i < 6 && !strings.Contains(log.String(), filepath.Base(path(i))) {
			t.Errorf("resp_%d: no log line names its file", i)
		}
	}
	if got := strings.Count(log.String(), "removed a corrupt file"); got != 6 {
		t.Errorf("%d corrupt files logged, want 6:\n%s", got, log.String())
	}
	if !strings.Contains(log.String(), "corrupt=6") || !strings.Contains(log.String(), "entries=2") {
		t.Errorf("the summary line:\n%s", log.String())
	}
	for _, name := range []string{"notes.txt", "notes.resp", ".tmp-notes", strings.ToUpper(fileName("a", "b"))} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("a file not the store's was removed: %v", err)
		}
	}
	st.checkDisk(t)
}

// TestStoreDiskEveryFlip: no flipped byte and no truncation of a file
// loads: each is refused as corrupt (not a panic, not another entry).
func TestStoreDiskEveryFlip(t *testing.T) {
	rec, _ := conversation(t, "resp_1")
	b := encodeEntry("alice", "resp_1", time.Unix(1000, 0), rec)
	check := func(what string, f []byte) {
		h, err := decodeHeader(f, int64(len(f)))
		if err == nil {
			body := f[fileHeader:]
			if crc32.Checksum(body, castagnoli) != h.bodyCRC {
				err = errCorrupt
			} else {
				_, _, _, err = decodeBody(body)
			}
		}
		if !errors.Is(err, errCorrupt) {
			t.Errorf("%s: %v, want it refused as corrupt", what, err)
		}
	}
	for i := range b {
		for _, bit := range []byte{1, 0x80} {
			f := slices.Clone(b)
			f[i] ^= bit
			check(fmt.Sprintf("byte %d ^ %#x", i, bit), f)
		}
	}
	for n := range len(b) {
		check(fmt.Sprintf("cut at %d", n), b[:n])
	}
}

// FuzzDecodeBody: a body that passed its checksum but is not one the
// store wrote (the checksum is not a defence) is an error, never a panic
// or an allocation past its length.
func FuzzDecodeBody(f *testing.F) {
	var s Stored
	n := 0
	if err := fill(reflect.ValueOf(&s).Elem(), &n); err != nil {
		f.Fatal(err)
	}
	f.Add(encodeEntry("o", "i", time.Unix(1, 0), &s)[fileHeader:])
	f.Add(encodeEntry("", "", time.Unix(1, 0), &Stored{})[fileHeader:])
	f.Add([]byte{0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		owner, id, s, err := decodeBody(b)
		if err != nil {
			return
		}
		again := encodeEntry(owner, id, time.Unix(1, 0), s)[fileHeader:]
		if _, _, s2, err := decodeBody(again); err != nil || !reflect.DeepEqual(s, s2) {
			t.Errorf("decoded, encoded and decoded again: %v", err)
		}
	})
}

// TestStoreDiskLocked: a directory is one store's: a second (another
// server) is refused and keeps its entries in memory, as CheckDir says
// beforehand; once the first closes, it opens.
func TestStoreDiskLocked(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new")
	if err := CheckDir(dir); err != nil {
		t.Fatalf("a directory to create: %v", err)
	}
	first := openAt(t, dir, StoreOptions{})
	if err := CheckDir(dir); err == nil {
		t.Error("CheckDir of a directory a store holds: no error")
	}
	second, err := OpenStore(StoreOptions{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		t.Fatal("a second store over a held directory: no error")
	}
	if err := second.Put("a", "1", blob(10)); err != nil || len(files(t, dir)) != 0 {
		t.Errorf("the refused store: %v, files %v; want it in memory only", err, files(t, dir))
	}
	first.Close()
	if err := CheckDir(dir); err != nil {
		t.Errorf("once closed: %v", err)
	}
	if err := CheckDir(filepath.Join(dir, "lock")); err == nil {
		t.Error("CheckDir of a file: no error")
	}
}

// TestStoreDiskWriteRace: an entry deleted, evicted or replaced while its
// file is written does not appear in the directory after.
func TestStoreDiskWriteRace(t *testing.T) {
	st := openAt(t, t.TempDir(), StoreOptions{})
	size := func(n int, id string) int64 { return blob(n).size() + entrySize(id) }
	e, d := st.put("a", "1", blob(10), size(10, "1"))
	st.Delete("a", "1")
	st.persist(d, e)
	e, d = st.put("a", "2", blob(10), size(10, "2"))
	e2, _ := st.put("a", "2", blob(20), size(20, "2"))
	st.persist(d, e)
	st.persist(d, e2)
	st.checkDisk(t)
	if s, err := restart(t, st, StoreOptions{}).Get("a", "2"); err != nil || len(s.Response) != 20 {
		t.Errorf("replaced while written: %v", err)
	}
}

// TestStoreDiskConcurrent is TestStoreConcurrent over a directory: at the
// end the directory holds the files of the entries held, no other, and a
// new store over it holds the same; run it under -race -count=20.
func TestStoreDiskConcurrent(t *testing.T) {
	unit := sizeOf(200, "resp_10")
	opt := StoreOptions{MaxBytes: 10 * unit, MaxOwnerBytes: 4 * unit}
	st := openAt(t, t.TempDir(), opt)
	churn(t, st, 6, 40)
	st.checkDisk(t)
	held := map[key]*Stored{}
	for k, e := range st.byKey {
		held[k] = e.stored
	}
	st = restart(t, st, opt)
	st.checkDisk(t)
	if len(st.byKey) != len(held) {
		t.Errorf("%d entries after a restart, %d before", len(st.byKey), len(held))
	}
	for k, s := range held {
		if got, err := st.Get(k.owner, k.id); err != nil || !reflect.DeepEqual(got, s) {
			t.Errorf("%v after a restart: %v", k, err)
		}
	}
}
