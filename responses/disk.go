package responses

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/wire"
)

// The store's disk tier (StoreOptions.Dir). The directory mirrors the
// store: a file for each entry it holds, written when the entry is
// stored and removed when the entry is deleted, evicted or found
// expired, so the files are bounded by the store's budgets (a file takes
// no more bytes than its entry is counted in memory, its owner's name
// and a 40-byte header aside: its text and JSON are written as they are,
// each behind its length). A new store over the directory (a restart)
// loads what it finds there, most recently used first (a file's
// modification time is its entry's last use, kept to the second), within
// the budgets of the new store; files past them, and those expired by
// its TTL (counted from when the entry was stored), are removed unread
// but for their header. So the memory and time of a start are bounded by
// the budget, not by what the directory holds.
//
// A file holds one entry: a header (magic "corralRS", version, the time
// it was stored, the body's length and CRC-32C, and a CRC-32C of the
// header) and a body (its owner, its id, the response, the messages
// field by field, the items by id), every string and byte slice behind
// its length (a nil one told from an empty one), so that it reads back
// as it was, byte for byte. Its name is a digest of owner and id, never
// either itself: no owner or id names a path, and a file read back must
// hold the owner and id its name digests, so a file copied under
// another's name is refused, not served to another owner.
//
// Crash safety is the KV disk tier's (engine/disk.go): an entry is
// written to a temporary file, synced, renamed to its name and the
// directory synced. A crash leaves a whole file or a temporary one
// (removed at the next start). A file whose header or body does not
// check (a torn write the rename did not order, a flipped bit, a
// truncation), whose size is not what its header says, or whose owner
// and id are not its name's is removed with a log line when the
// directory is loaded, and never loaded. Files of other names are left
// alone. The CRCs detect accidents, not
// an attacker who can write the directory: it must be writable by corral
// alone (it is created 0700, its files 0600).
//
// The directory holds a lock file, flock'd while a store has it open: a
// second store, in this process or another, cannot open it.

const (
	fileMagic   = "corralRS"
	fileVersion = 1
	// fileHeader is the fixed part of a file: magic (8), version (4),
	// zero (4), when stored (Unix nanoseconds, 8), body length (8),
	// body CRC (4), header CRC (4, of the 36 bytes before it).
	fileHeader = 40
	fileSuffix = ".resp"
	// fileSlack is what a file may hold past the owner budget and still
	// be read: the owner's name and the header, which the budget does
	// not count.
	fileSlack = 1 << 20
	tmpPrefix = ".tmp-resp-"
	lockName  = "lock"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt is wrapped by the errors of files that do not check.
var errCorrupt = errors.New("corrupt")

// disk is a store's open directory.
type disk struct {
	dir  string
	lock *os.File // flock'd while the store has it
}

// CheckDir creates dir (0700) when it does not exist and checks that a
// store could open it now: it is a directory, writable, not held by
// another store. corral serve calls it before its slow start, so that a
// directory that cannot be used fails at once.
func CheckDir(dir string) error {
	d, err := openDisk(dir)
	if err != nil {
		return err
	}
	if err := probe(dir); err != nil {
		d.close()
		return err
	}
	d.close()
	return nil
}

// probe writes and removes a temporary file in dir.
func probe(dir string) error {
	f, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// openDisk creates dir if need be and takes its lock.
func openDisk(dir string) (*disk, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("%s: held by another responses store (another corral serve on the same directory?): %w", dir, err)
	}
	return &disk{dir: dir, lock: lock}, nil
}

func (d *disk) close() { d.lock.Close() }

// path is the file of owner's response id.
func (d *disk) path(owner, id string) string { return filepath.Join(d.dir, fileName(owner, id)) }

// fileName is the name of the file of owner's response id: a digest of
// both, owner behind its length.
func fileName(owner, id string) string {
	h := sha256.New()
	h.Write(binary.AppendUvarint(nil, uint64(len(owner))))
	h.Write([]byte(owner))
	h.Write([]byte(id))
	return hex.EncodeToString(h.Sum(nil)[:16]) + fileSuffix
}

// isEntryName reports whether name is one fileName gives: 32 lowercase
// hex digits and the suffix.
func isEntryName(name string) bool {
	digest, ok := strings.CutSuffix(name, fileSuffix)
	return ok && len(digest) == 32 && strings.Trim(digest, "0123456789abcdef") == ""
}

// write writes e's file, its modification time set to used: to a
// temporary file, synced, which rename (called by the store with its lock
// held) renames into place, or not when e is no longer stored (it then
// returns false and the temporary file is removed).
func (d *disk) write(e *entry, used time.Time, rename func(tmp string) (bool, error)) error {
	b := encodeEntry(e.key.owner, e.key.id, e.created, e.stored)
	f, err := os.CreateTemp(d.dir, tmpPrefix+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chtimes(tmp, used, used)
	}
	var renamed bool
	if err == nil {
		renamed, err = rename(tmp)
	}
	if !renamed {
		os.Remove(tmp)
		return err
	}
	// The rename made durable; should the sync fail, the file is whole
	// or absent after a crash all the same.
	syncDir(d.dir)
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// encodeEntry is the file of owner's response id, stored at created.
func encodeEntry(owner, id string, created time.Time, s *Stored) []byte {
	e := fieldEncoder{b: make([]byte, fileHeader, fileHeader+int(s.size()))}
	e.str(owner)
	e.str(id)
	e.bytes(s.Response)
	e.count(len(s.Messages), s.Messages == nil)
	for _, m := range s.Messages {
		e.str(m.Role)
		e.bytes(m.Content)
		e.str(m.Name)
		e.count(len(m.ToolCalls), m.ToolCalls == nil)
		for _, c := range m.ToolCalls {
			e.str(c.ID)
			e.str(c.Type)
			e.str(c.Function.Name)
			e.str(c.Function.Arguments)
		}
		e.str(m.ToolCallID)
		e.str(m.ReasoningContent)
		e.str(m.Reasoning)
	}
	e.count(len(s.Items), s.Items == nil)
	for _, itemID := range slices.Sorted(maps.Keys(s.Items)) {
		e.str(itemID)
		e.bytes(s.Items[itemID])
	}
	h, body := e.b[:fileHeader], e.b[fileHeader:]
	copy(h, fileMagic)
	binary.LittleEndian.PutUint32(h[8:], fileVersion)
	binary.LittleEndian.PutUint64(h[16:], uint64(created.UnixNano()))
	binary.LittleEndian.PutUint64(h[24:], uint64(len(body)))
	binary.LittleEndian.PutUint32(h[32:], crc32.Checksum(body, castagnoli))
	binary.LittleEndian.PutUint32(h[36:], crc32.Checksum(h[:36], castagnoli))
	return e.b
}

// fieldEncoder appends an entry's fields to b.
type fieldEncoder struct{ b []byte }

func (e *fieldEncoder) uvarint(n uint64) { e.b = binary.AppendUvarint(e.b, n) }

// str is s behind its length.
func (e *fieldEncoder) str(s string) {
	e.uvarint(uint64(len(s)))
	e.b = append(e.b, s...)
}

// bytes is b behind its length plus one: 0 for nil.
func (e *fieldEncoder) bytes(b []byte) {
	if b == nil {
		e.uvarint(0)
		return
	}
	e.uvarint(uint64(len(b)) + 1)
	e.b = append(e.b, b...)
}

// count is a slice's or map's length plus one: 0 for nil.
func (e *fieldEncoder) count(n int, isNil bool) {
	if isNil {
		e.uvarint(0)
		return
	}
	e.uvarint(uint64(n) + 1)
}

// header is a file's fixed part, decoded.
type header struct {
	created time.Time
	body    int64
	bodyCRC uint32
}

// decodeHeader checks and decodes a file's fixed part; size is the
// file's.
func decodeHeader(h []byte, size int64) (header, error) {
	switch {
	case len(h) < fileHeader:
		return header{}, fmt.Errorf("%w: %d bytes, shorter than a header", errCorrupt, size)
	case string(h[:8]) != fileMagic:
		return header{}, fmt.Errorf("%w: not a stored response", errCorrupt)
	case crc32.Checksum(h[:36], castagnoli) != binary.LittleEndian.Uint32(h[36:]):
		return header{}, fmt.Errorf("%w: the header's checksum does not match", errCorrupt)
	case binary.LittleEndian.Uint32(h[8:]) != fileVersion:
		return header{}, fmt.Errorf("%w: version %d, want %d", errCorrupt, binary.LittleEndian.Uint32(h[8:]), fileVersion)
	}
	hd := header{
		created: time.Unix(0, int64(binary.LittleEndian.Uint64(h[16:]))),
		body:    int64(binary.LittleEndian.Uint64(h[24:])),
		bodyCRC: binary.LittleEndian.Uint32(h[32:]),
	}
	if hd.body < 0 || hd.body != size-fileHeader {
		return header{}, fmt.Errorf("%w: %d bytes, the header says %d", errCorrupt, size, fileHeader+hd.body)
	}
	return hd, nil
}

// decodeBody decodes a body whose checksum matched.
func decodeBody(b []byte) (owner, id string, s *Stored, err error) {
	d := fieldDecoder{b: b}
	owner, id = d.str(), d.str()
	s = &Stored{Response: d.bytes()}
	if n, ok := d.count(); ok {
		s.Messages = make([]chat.Message, n)
		for i := range s.Messages {
			m := &s.Messages[i]
			m.Role, m.Content, m.Name = d.str(), d.bytes(), d.str()
			if n, ok := d.count(); ok {
				m.ToolCalls = make([]wire.ToolCall, n)
				for j := range m.ToolCalls {
					c := &m.ToolCalls[j]
					c.ID, c.Type, c.Function.Name, c.Function.Arguments = d.str(), d.str(), d.str(), d.str()
				}
			}
			m.ToolCallID, m.ReasoningContent, m.Reasoning = d.str(), d.str(), d.str()
		}
	}
	if n, ok := d.count(); ok {
		s.Items = make(map[string]json.RawMessage, n)
		for range n {
			itemID := d.str()
			s.Items[itemID] = d.bytes()
		}
	}
	switch {
	case d.err != nil:
		return "", "", nil, d.err
	case len(d.b) > 0:
		return "", "", nil, fmt.Errorf("%w: %d bytes after the entry", errCorrupt, len(d.b))
	}
	return owner, id, s, nil
}

// fieldDecoder reads an entry's fields; past the first error it reads zeros.
type fieldDecoder struct {
	b   []byte
	err error
}

func (d *fieldDecoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", errCorrupt, what)
	}
}

func (d *fieldDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	n, k := binary.Uvarint(d.b)
	if k <= 0 {
		d.fail("a bad length")
		return 0
	}
	d.b = d.b[k:]
	return n
}

// take is the next n bytes.
func (d *fieldDecoder) take(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("a length past the end")
		return nil
	}
	out := d.b[:n:n]
	d.b = d.b[n:]
	return out
}

func (d *fieldDecoder) str() string { return string(d.take(d.uvarint())) }

// bytes is a copy of the next byte slice, nil when it was nil.
func (d *fieldDecoder) bytes() json.RawMessage {
	n := d.uvarint()
	if n == 0 || d.err != nil {
		return nil
	}
	b := d.take(n - 1)
	if b == nil {
		return nil
	}
	return append(json.RawMessage{}, b...)
}

// count is the next length of a slice or map, and false when it was nil
// (or the body is corrupt). Each element takes a byte at least: a count
// past the bytes left is corrupt, not an allocation.
func (d *fieldDecoder) count() (int, bool) {
	n := d.uvarint()
	if n == 0 || d.err != nil {
		return 0, false
	}
	if n-1 > uint64(len(d.b)) {
		d.fail("a count past the end")
		return 0, false
	}
	return int(n - 1), true
}

// found is a file of the directory, to load.
type found struct {
	name string
	used time.Time // its modification time
	size int64
}

// loadStats are what a load found.
type loadStats struct {
	loaded, expired, evicted, corrupt, temporary int
}

// load indexes the directory's files into st (empty, its lock not
// needed yet), most recently used first, within the budgets; it removes
// the temporary files, the expired ones, those past the budgets and the
// corrupt ones.
func (st *Store) load(d *disk) (loadStats, error) {
	var ls loadStats
	des, err := os.ReadDir(d.dir)
	if err != nil {
		return ls, err
	}
	var files []found
	for _, de := range des {
		name := de.Name()
		path := filepath.Join(d.dir, name)
		switch {
		case strings.HasPrefix(name, tmpPrefix):
			os.Remove(path) // a write a crash interrupted
			ls.temporary++
			continue
		case !isEntryName(name) || !de.Type().IsRegular():
			continue // not the store's: left alone
		}
		fi, err := de.Info()
		if err != nil {
			continue // removed meanwhile
		}
		files = append(files, found{name, fi.ModTime(), fi.Size()})
	}
	slices.SortStableFunc(files, func(a, b found) int { return b.used.Compare(a.used) })
	now := st.opt.Now()
	minEntry := storedBytes + entrySize("")
	for _, f := range files {
		path := filepath.Join(d.dir, f.name)
		if st.opt.MaxBytes-st.bytes < minEntry {
			os.Remove(path) // no more fits
			ls.evicted++
			continue
		}
		e, err := st.loadFile(path, f, now)
		switch {
		case errors.Is(err, errCorrupt):
			st.opt.Logger.Warn("responses store: removed a corrupt file", "file", path, "err", err)
			os.Remove(path)
			ls.corrupt++
			continue
		case errors.Is(err, errExpired):
			os.Remove(path)
			ls.expired++
			continue
		case errors.Is(err, errOverBudget):
			os.Remove(path)
			ls.evicted++
			continue
		case err != nil:
			// Not the file's fault (it vanished, a read failed): left
			// for the next start.
			st.opt.Logger.Warn("responses store: skipped a file", "file", path, "err", err)
			continue
		}
		o := st.owners[e.key.owner]
		if o == nil {
			o = &owner{lru: list.New()}
			st.owners[e.key.owner] = o
		}
		// No two files hold one key: a file's name is its key's.
		if o.bytes+e.size > st.opt.MaxOwnerBytes || st.bytes+e.size > st.opt.MaxBytes {
			if o.lru.Len() == 0 {
				delete(st.owners, e.key.owner)
			}
			os.Remove(path)
			ls.evicted++
			continue
		}
		e.all, e.own = st.lru.PushBack(e), o.lru.PushBack(e)
		st.byKey[e.key] = e
		for itemID := range e.stored.Items {
			// The item of the latest stored, as Put would have left it.
			k := key{e.key.owner, itemID}
			if held := st.items[k]; held == nil || held.created.Before(e.created) {
				st.items[k] = e
			}
		}
		st.bytes += e.size
		o.bytes += e.size
		ls.loaded++
	}
	return ls, nil
}

var (
	errExpired    = errors.New("expired")
	errOverBudget = errors.New("over the owner budget")
)

// loadFile reads and checks the file f at path: its header, then (when
// it is not expired at now, and could fit the owner budget) its body.
func (st *Store) loadFile(path string, f found, now time.Time) (*entry, error) {
	r, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	head := make([]byte, fileHeader)
	n, err := io.ReadFull(r, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	h, err := decodeHeader(head[:n], f.size)
	if err != nil {
		return nil, err
	}
	expires := h.created.Add(st.opt.TTL)
	if now.After(expires) {
		return nil, errExpired
	}
	if h.body > st.opt.MaxOwnerBytes+fileSlack {
		return nil, errOverBudget
	}
	body := make([]byte, h.body)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("%w: %v", errCorrupt, err) // shorter than its stat said: changed under us
	}
	if crc32.Checksum(body, castagnoli) != h.bodyCRC {
		return nil, fmt.Errorf("%w: the body's checksum does not match", errCorrupt)
	}
	owner, id, s, err := decodeBody(body)
	if err != nil {
		return nil, err
	}
	if fileName(owner, id) != filepath.Base(path) {
		return nil, fmt.Errorf("%w: it holds another name's entry", errCorrupt)
	}
	size := s.size() + entrySize(id)
	if size > st.opt.MaxOwnerBytes {
		return nil, errOverBudget
	}
	// The time of its last use is its file's, within the second.
	return &entry{key: key{owner, id}, stored: s, size: size, created: h.created, expires: expires, touched: f.used}, nil
}
