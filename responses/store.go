package responses

import (
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/wire"
)

// Stored is one stored response: what GET /v1/responses/{id} returns, what
// previous_response_id continues, and the items item_reference finds.
type Stored struct {
	// Response is the whole response object, as GET returns it.
	Response json.RawMessage
	// Messages are the response's conversation followed by its output.
	Messages []chat.Message
	// Items are the request's input items that have an id and the
	// response's output items, by id.
	Items map[string]json.RawMessage
}

// size is the memory s takes, as the store's budget counts it: its
// bytes of text and JSON as Go allocates them, the message and tool call
// structs, and for each item its slots in Items and in the store's item
// index. Strings shared with another entry (a previous response's
// conversation) are counted in each.
func (s *Stored) size() int64 {
	n := storedBytes + heapBytes(cap(s.Response)) + heapBytes(cap(s.Messages)*messageSize)
	for _, m := range s.Messages {
		n += heapBytes(len(m.Role)) + heapBytes(cap(m.Content)) + heapBytes(len(m.Name)) + heapBytes(len(m.ToolCallID)) +
			heapBytes(len(m.ReasoningContent)) + heapBytes(len(m.Reasoning)) + heapBytes(cap(m.ToolCalls)*toolCallSize)
		for _, c := range m.ToolCalls {
			n += heapBytes(len(c.ID)) + heapBytes(len(c.Type)) + heapBytes(len(c.Function.Name)) + heapBytes(len(c.Function.Arguments))
		}
	}
	for id, it := range s.Items {
		n += itemSlot + indexSlot + heapBytes(len(id)) + heapBytes(cap(it))
	}
	return n
}

// entrySize is the memory the store adds to hold an entry of id: the
// entry, its elements in the two lists, its slot in byKey, the id.
func entrySize(id string) int64 {
	return entryBytes + 2*elementBytes + indexSlot + heapBytes(len(id))
}

// The memory of the structures the store keeps for each entry and item
// (see heapBytes and mapSlot).
var (
	storedBytes  = heapBytes(int(unsafe.Sizeof(Stored{})))
	entryBytes   = heapBytes(int(unsafe.Sizeof(entry{})))
	elementBytes = heapBytes(int(unsafe.Sizeof(list.Element{})))
	messageSize  = int(unsafe.Sizeof(chat.Message{}))
	toolCallSize = int(unsafe.Sizeof(wire.ToolCall{}))
	// itemSlot is an item's slot in Stored.Items; indexSlot is a slot
	// in the store's maps of entries and items (byKey, items).
	itemSlot  = mapSlot(unsafe.Sizeof(""), unsafe.Sizeof(json.RawMessage(nil)))
	indexSlot = mapSlot(unsafe.Sizeof(key{}), unsafe.Sizeof((*entry)(nil)))
)

// heapBytes is the memory an allocation of n bytes takes: Go rounds a
// small one up to its size class (16-byte steps, then steps of about an
// eighth of a power of two) and one over 32 KiB up to 8 KiB pages.
func heapBytes(n int) int64 {
	switch {
	case n <= 0:
		return 0
	case n > 32<<10:
		return int64((n + 8191) &^ 8191)
	}
	step := max(16, 1<<(bits.Len(uint(n))-1)/8)
	return int64((n + step - 1) / step * step)
}

// mapSlot is the memory one entry of a map takes, with keys of k bytes
// and values of v: a slot (key, value and a control byte) in a table kept
// at most 7/8 full that doubles as it grows, so 16/7 slots at worst.
func mapSlot(k, v uintptr) int64 {
	return int64(k+v+1) * 16 / 7
}

// Record builds the entry of a finished response: resp (from the
// Stream), the Translation t of the request r it answers.
func Record(r *Request, t *Translation, resp *Response) (*Stored, error) {
	body, err := json.Marshal(resp)
	if err != nil {
		return nil, fmt.Errorf("encode response %s: %w", resp.ID, err)
	}
	s := &Stored{Response: body, Items: map[string]json.RawMessage{}}
	for i, m := range t.Messages {
		if i+1 != t.instructions {
			s.Messages = append(s.Messages, storable(m, t.Media))
		}
	}
	var items []json.RawMessage
	if json.Unmarshal(r.Input, &items) == nil {
		for _, raw := range items {
			var it struct {
				Type string `json:"type"`
				ID   string `json:"id"`
				Role string `json:"role"`
			}
			if json.Unmarshal(raw, &it) != nil || it.ID == "" {
				continue
			}
			// A reference is not an item, with its type or without.
			if ref := it.Type == "item_reference" || it.Type == "" && it.Role == ""; !ref {
				s.Items[it.ID] = raw
			}
		}
	}
	out := make([]json.RawMessage, len(resp.Output))
	for i, it := range resp.Output {
		b, err := json.Marshal(it)
		if err != nil {
			return nil, fmt.Errorf("encode output item %s: %w", it.ID, err)
		}
		out[i], s.Items[it.ID] = b, b
	}
	// The output read back as input: what the model answered, as the
	// next turn shows it.
	var tr Translation
	in := inputBuilder{t: &tr, tools: &toolBuilder{t: &tr, names: map[string]bool{}}, budget: unlimited(), open: -1}
	for i, raw := range out {
		if e := in.item(raw, fmt.Sprintf("output[%d]", i), false); e != nil {
			return nil, fmt.Errorf("read output back: %w", e)
		}
	}
	if e := in.flush("output"); e != nil {
		return nil, fmt.Errorf("read output back: %w", e)
	}
	s.Messages = append(s.Messages, tr.Messages...)
	return s, nil
}

// ErrTooLarge is returned by Store.Put for an entry larger than an
// owner's budget.
var ErrTooLarge = errors.New("response too large to store")

// Defaults of StoreOptions' zero fields.
const (
	DefaultStoreBytes = 256 << 20
	DefaultStoreTTL   = time.Hour
)

// StoreOptions bound a Store; zero fields take the defaults.
type StoreOptions struct {
	// MaxBytes bounds the memory of all entries (default
	// DefaultStoreBytes): their text and JSON, and the structures that
	// hold them (messages, map slots, the store's indexes), as Go
	// allocates them.
	MaxBytes int64
	// MaxOwnerBytes bounds one owner's entries (default MaxBytes).
	MaxOwnerBytes int64
	// TTL is how long an entry is kept after it is stored (default
	// DefaultStoreTTL).
	TTL time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Dir, when set, is the directory (created 0700 if need be) where
	// the store keeps its entries across restarts, one file each, within
	// the same budgets and TTL; a new store over it loads what it holds
	// (see disk.go). "": memory only.
	Dir string
	// Logger logs what the disk tier does (default slog.Default()).
	Logger *slog.Logger
}

// Store is a bounded in-memory store of responses, per owner (an opaque
// string: the API key's name). Entries expire TTL after they are stored;
// past a byte budget (all owners', or one owner's) the least recently
// used entries are evicted. An owner sees only its own entries: another
// owner's id is not found. With StoreOptions.Dir, each entry is also
// written to a file there, removed with the entry, so that the store
// survives a restart. It is safe for concurrent use.
type Store struct {
	opt    StoreOptions
	mu     sync.Mutex
	disk   *disk      // nil: memory only
	lru    *list.List // of *entry, most recently used first
	byKey  map[key]*entry
	items  map[key]*entry // item id (with owner) → the entry holding it
	owners map[string]*owner
	bytes  int64
}

type key struct{ owner, id string }

type owner struct {
	lru   *list.List // this owner's entries, most recently used first
	bytes int64
}

type entry struct {
	key     key
	stored  *Stored
	size    int64
	created time.Time // when it was stored
	expires time.Time
	// touched is when its file's modification time was last set to its
	// use (with a Dir).
	touched time.Time
	all     *list.Element // in Store.lru
	own     *list.Element // in owner.lru
}

// NewStore returns a store: empty, or with opt.Dir what the directory
// holds. When the directory cannot be used, the store keeps its entries
// in memory only and says so in opt.Logger's log (OpenStore returns the
// error).
func NewStore(opt StoreOptions) *Store {
	st, err := OpenStore(opt)
	if err != nil {
		st.opt.Logger.Error("responses store: kept in memory only, lost at a restart", "dir", opt.Dir, "err", err)
	}
	return st
}

// OpenStore returns a store, as NewStore, and the error that made it
// keep its entries in memory only, if any.
func OpenStore(opt StoreOptions) (*Store, error) {
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = DefaultStoreBytes
	}
	if opt.MaxOwnerBytes <= 0 || opt.MaxOwnerBytes > opt.MaxBytes {
		opt.MaxOwnerBytes = opt.MaxBytes
	}
	if opt.TTL <= 0 {
		opt.TTL = DefaultStoreTTL
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	st := &Store{opt: opt, lru: list.New(), byKey: map[key]*entry{}, items: map[key]*entry{}, owners: map[string]*owner{}}
	if opt.Dir == "" {
		return st, nil
	}
	d, err := openDisk(opt.Dir)
	if err != nil {
		return st, fmt.Errorf("responses store %s: %w", opt.Dir, err)
	}
	start := time.Now()
	ls, err := st.load(d)
	if err != nil {
		d.close()
		return st, fmt.Errorf("responses store %s: %w", opt.Dir, err)
	}
	st.disk = d
	opt.Logger.Info("responses store", "dir", opt.Dir, "entries", ls.loaded, "bytes", st.bytes, "expired", ls.expired,
		"evicted", ls.evicted, "corrupt", ls.corrupt, "temporary", ls.temporary, "took", time.Since(start).Round(time.Millisecond))
	return st, nil
}

// Close stops writing to the directory and lets another store open it;
// the store keeps what it holds in memory. Every entry Put has returned
// is in the directory already.
func (st *Store) Close() error {
	st.mu.Lock()
	d := st.disk
	st.disk = nil
	st.mu.Unlock()
	if d != nil {
		d.close()
	}
	return nil
}

// Put stores s as response id of owner, replacing an entry of the same
// id, and evicts the least recently used entries past the budgets. An
// entry larger than an owner's budget is not stored: ErrTooLarge. With a
// Dir, the entry is found in memory at once and written to its file
// before Put returns (a write that fails is logged: the entry is then
// kept in memory only).
func (st *Store) Put(ownerName, id string, s *Stored) error {
	size := s.size() + entrySize(id)
	if size > st.opt.MaxOwnerBytes {
		return fmt.Errorf("response %s: %d bytes, more than the store's %d per owner: %w", id, size, st.opt.MaxOwnerBytes, ErrTooLarge)
	}
	e, d := st.put(ownerName, id, s, size)
	if d != nil {
		st.persist(d, e)
	}
	return nil
}

// persist writes e's file in d, and renames it into place only if e is
// still stored (not deleted, evicted or replaced meanwhile), under st.mu,
// as every removal of a file is: the directory holds the files of the
// entries held, no other.
func (st *Store) persist(d *disk, e *entry) {
	err := d.write(e, e.created, func(tmp string) (bool, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.disk != d || st.byKey[e.key] != e {
			return false, nil
		}
		err := os.Rename(tmp, d.path(e.key.owner, e.key.id))
		return err == nil, err
	})
	if err != nil {
		st.opt.Logger.Warn("responses store: not written, kept in memory only", "id", e.key.id, "err", err)
	}
}

// put is Put in memory: it returns the entry and the disk to write it
// to (nil: none).
func (st *Store) put(ownerName, id string, s *Stored, size int64) (*entry, *disk) {
	st.mu.Lock()
	defer st.mu.Unlock()
	k := key{ownerName, id}
	if old := st.byKey[k]; old != nil {
		st.remove(old)
	}
	o := st.owners[ownerName]
	if o == nil {
		o = &owner{lru: list.New()}
		st.owners[ownerName] = o
	}
	now := st.opt.Now()
	e := &entry{key: k, stored: s, size: size, created: now, expires: now.Add(st.opt.TTL), touched: now}
	e.all, e.own = st.lru.PushFront(e), o.lru.PushFront(e)
	st.byKey[k] = e
	for itemID := range s.Items {
		st.items[key{ownerName, itemID}] = e
	}
	st.bytes += size
	o.bytes += size
	for o.bytes > st.opt.MaxOwnerBytes {
		st.remove(o.lru.Back().Value.(*entry))
	}
	for st.bytes > st.opt.MaxBytes {
		st.remove(st.lru.Back().Value.(*entry))
	}
	// Drop the expired entries at the cold end.
	for b := st.lru.Back(); b != nil && now.After(b.Value.(*entry).expires); b = st.lru.Back() {
		st.remove(b.Value.(*entry))
	}
	return e, st.disk
}

// remove drops e, and its file; st.mu is held.
func (st *Store) remove(e *entry) {
	if st.disk != nil {
		os.Remove(st.disk.path(e.key.owner, e.key.id))
	}
	delete(st.byKey, e.key)
	for itemID := range e.stored.Items {
		k := key{e.key.owner, itemID}
		if st.items[k] == e {
			delete(st.items, k)
		}
	}
	st.lru.Remove(e.all)
	o := st.owners[e.key.owner]
	o.lru.Remove(e.own)
	o.bytes -= e.size
	st.bytes -= e.size
	if o.lru.Len() == 0 {
		delete(st.owners, e.key.owner)
	}
}

// live returns the unexpired entry, marking it used, and a function to
// call once st.mu is released that records the use in its file; st.mu is
// held.
func (st *Store) live(e *entry) (*entry, func()) {
	if e == nil {
		return nil, noTouch
	}
	now := st.opt.Now()
	if now.After(e.expires) {
		st.remove(e)
		return nil, noTouch
	}
	st.lru.MoveToFront(e.all)
	st.owners[e.key.owner].lru.MoveToFront(e.own)
	if st.disk == nil || now.Sub(e.touched) < time.Second {
		return e, noTouch
	}
	// The file's modification time is its last use, to the second: the
	// order a restart loads the entries in. The file may not be there
	// (being written, or removed meanwhile): nothing to record then.
	e.touched = now
	path := st.disk.path(e.key.owner, e.key.id)
	return e, func() { os.Chtimes(path, now, now) }
}

func noTouch() {}

// Get returns owner's response id, or an error wrapping ErrNotFound.
func (st *Store) Get(ownerName, id string) (*Stored, error) {
	st.mu.Lock()
	e, touch := st.live(st.byKey[key{ownerName, id}])
	st.mu.Unlock()
	touch()
	if e == nil {
		return nil, errNotFound("response", id)
	}
	return e.stored, nil
}

// Delete removes owner's response id, or returns an error wrapping
// ErrNotFound.
func (st *Store) Delete(ownerName, id string) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	e, _ := st.live(st.byKey[key{ownerName, id}])
	if e == nil {
		return errNotFound("response", id)
	}
	st.remove(e)
	return nil
}

// Usage returns the number of entries and their bytes.
func (st *Store) Usage() (entries int, bytes int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.byKey), st.bytes
}

// Prior returns what Translate looks up in the store for owner.
func (st *Store) Prior(ownerName string) Prior { return ownerPrior{st, ownerName} }

type ownerPrior struct {
	st    *Store
	owner string
}

// Conversation returns the messages of the owner's response id.
func (p ownerPrior) Conversation(id string) ([]chat.Message, error) {
	s, err := p.st.Get(p.owner, id)
	if err != nil {
		return nil, err
	}
	return s.Messages, nil
}

// Item returns the owner's stored item id.
func (p ownerPrior) Item(id string) (json.RawMessage, error) {
	p.st.mu.Lock()
	e, touch := p.st.live(p.st.items[key{p.owner, id}])
	var it json.RawMessage
	if e != nil {
		it = e.stored.Items[id]
	}
	p.st.mu.Unlock()
	touch()
	if e == nil {
		return nil, errNotFound("item", id)
	}
	return it, nil
}
