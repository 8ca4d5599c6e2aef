package engine

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corral-llm/corral/llama"
)

// The disk tier. Below the host cache (prefix.go), the KV states of
// prefixes it pushes out, and at Close everything it and the slots hold,
// are written to files under Config.DiskCacheDir, so that a returning
// conversation finds its history after a keep-alive unload, an eviction
// or a restart. A file is the state llama_state_seq_get_data writes for
// one sequence, with the sequence's token ids, its checkpoints (the
// partial states a model whose memory cannot be cut back at will keeps at
// positions within it: checkpoint.go) and a header naming whose it is;
// one directory per model and KV layout holds them, within
// Config.DiskCacheBytes, the least recently used removed first.
//
// At Close (spillAll, on the scheduler goroutine as it exits) every
// slot's cache, however short, and every host entry is written, less
// those another of them holds whole: the most recently used first chosen
// within Config.DiskCacheBytes (the slots' caches before the host
// cache's entries, which were pushed out of them), then written least
// recently used first, so that the newest files are the last evicted.
// Config.DiskCloseTimeout bounds the whole: past it what is not written
// is dropped and a file being written abandoned.
//
// Files are written by a goroutine of the disk cache's, never by the
// scheduler: the scheduler hands it states through a bounded queue and
// drops a state rather than wait when the queue is full. Reading is the
// scheduler's, at admission: the file of a 4,000-token prefix of a 135M
// model (92 MB of F16 KV) reads and checks in 175 ms from the page cache
// on a loaded 2-core machine (BenchmarkDiskCacheRead), where evaluating
// those tokens takes minutes there (scripts/diskcache.sh); the streams
// running meanwhile wait that long once.
//
// The index (which files hold which tokens) is shared by the two
// goroutines under a mutex held for scans of it and for the renames and
// removals that must agree with it, never for the reading or writing of
// a state.
//
// A file is written to a temporary name, synced, renamed and its
// directory synced, so a crash leaves a whole file or a temporary one
// (removed at the next start). Every file carries a header (magic,
// version, model identity, KV layout, salt digest, token count, state
// length, checkpoint count) with a CRC-32C of the header, tokens and
// checkpoint table, and a CRC-32C of the states: a file whose header does not check, that belongs to another
// model or layout, or whose size is not what its header says is removed
// when the directory is scanned; one whose state does not check is
// removed when read, and never loaded. CRC-32C detects torn and
// corrupted files; it is not a defence against someone who can write the
// directory (who could as well replace the model), so the directory must
// be writable by corral alone.

// DefaultDiskCacheBytes is Config.DiskCacheBytes's default: room for
// about 180 4,000-token conversations of a 135M model (F16 KV: 23 KB a
// token), about 13 of a 70B one (320 KB a token).
const DefaultDiskCacheBytes = 16 << 30

const (
	diskMagic = "corralKV"
	// diskVersion 2 added the checkpoints; files of version 1 are
	// removed when the directory is scanned.
	diskVersion = 2
	// diskHeader is the fixed part of a file: magic (8), version (4),
	// token count (4), state length (8), model identity (32), KV layout
	// (32), salt digest (32), checkpoint count (4), zero (4), header CRC
	// (4), states' CRC (4). The token ids follow (4 bytes each), then
	// the checkpoint table (diskCheckpoint bytes each: position 4,
	// state length 8), the state, and the checkpoints' states in the
	// table's order.
	diskHeader     = 136
	diskCheckpoint = 12
	// maxDiskCheckpoints bounds a file's checkpoint count, beyond what a
	// slot keeps (maxCheckpoints).
	maxDiskCheckpoints = 64
	// diskQueue bounds the states waiting to be written: so many, and
	// diskQueueBytes (or one state, whatever its size).
	diskQueue      = 16
	diskQueueBytes = 256 << 20
	// identitySample is how much of the model file its identity reads:
	// the first MiB (the GGUF header and the start of its metadata) and
	// identityChunks pieces spread over the rest (tensor data).
	identitySample = 1 << 20
	identityChunks = 16
	identityChunk  = 64 << 10
	// maxDiskTokens bounds a file's token count, beyond any context.
	maxDiskTokens = 1 << 22
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// diskEntry is one file of the index.
type diskEntry struct {
	name   string // file name within the directory
	tokens []int32
	// checkpoints are the file's checkpoints' positions (their states
	// stay on disk until read).
	checkpoints []checkpoint
	salt        [32]byte // SHA-256 of the Request.CacheSalt
	size        int64    // file bytes
	used        uint64   // diskCache.clock at the last write or read
}

// diskJob is a state for the writer, with the checkpoints within its
// tokens.
type diskJob struct {
	tokens      []int32
	salt        [32]byte
	state       []byte
	checkpoints []checkpoint
}

// bytes is the job's states' bytes: what it holds of the queue.
func (j diskJob) bytes() int64 { return int64(len(j.state)) + checkpointBytes(j.checkpoints) }

// checkpointBytes is the bytes of cps's states.
func checkpointBytes(cps []checkpoint) int64 {
	var n int64
	for _, c := range cps {
		n += int64(len(c.state))
	}
	return n
}

// positions returns cps without their states.
func positions(cps []checkpoint) []checkpoint {
	out := make([]checkpoint, len(cps))
	for i, c := range cps {
		out[i] = checkpoint{pos: c.pos}
	}
	return out
}

// diskCache is the disk tier of one engine. Create it with openDiskCache;
// the scheduler hands it states with put (and, at close, putWait) and
// reads them back with longest and read.
type diskCache struct {
	dir    string   // the model's directory, under Config.DiskCacheDir
	budget int64    // bytes of files at most
	ident  [32]byte // the model file's identity (modelIdentity), and its projector's
	media  bool     // the model has a projector: states may hold media (placeholder ids)
	layout [32]byte // SHA-256 of the KV layout (kvLayout)
	nVocab int
	lock   *os.File // flock'd while the engine runs

	queue   chan diskJob // to the writer; the scheduler alone sends and closes
	pending int64        // bytes in queue: the scheduler adds, the writer subtracts (under mu)
	done    chan struct{}
	// closing, set (under mu) when the engine closes, ends when the
	// writer must give up what it has not written; nil before.
	closing context.Context

	mu      sync.Mutex
	entries []*diskEntry
	size    int64 // bytes of the files indexed and of the one being written
	clock   uint64
	st      diskStats
}

// diskStats are the disk tier's counters (see Stats).
type diskStats struct {
	hits, saved, dropped, evicted, rejected uint64
}

// kvLayout names what shapes a sequence's saved KV state besides the
// model: llama.cpp's release (llama.Release: another release may lay a
// state out otherwise; the same release built with other flags does not),
// the memory kind (a recurrent state, sliding-window cells kept to their
// window: see ContextParams.c's swa_full) and the cache's types and
// arrangement (flash attention stores V untransposed). The context size
// is not part of it: a state holds its own cells.
func kvLayout(cfg Config, kind MemoryKind) string {
	version := llama.Release()
	fa := "auto"
	if cfg.NoFlashAttn {
		fa = "off"
	}
	// The types are checked by New before the disk tier opens; a name
	// that does not parse would not reach here.
	k, v, err := cfg.cacheTypes()
	if err != nil {
		return fmt.Sprintf("%s; memory %s, windows kept; type_k %q; type_v %q; flash_attn %s", version, kind, cfg.CacheTypeK, cfg.CacheTypeV, fa)
	}
	return fmt.Sprintf("%s; memory %s, windows kept; type_k %s; type_v %s; flash_attn %s", version, kind, k, v, fa)
}

// modelIdentity identifies the model file at path by its size and a
// SHA-256 of its first MiB and of 16 pieces of 64 KiB spread over the
// rest: a re-quantized model changes size, a fine-tune of the same shape
// changes its tensor data everywhere, and a copy or a move keeps it,
// while a hash of the whole file would read gigabytes at every load.
func modelIdentity(path string) ([32]byte, error) {
	var id [32]byte
	f, err := os.Open(path)
	if err != nil {
		return id, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return id, err
	}
	size := fi.Size()
	h := sha256.New()
	fmt.Fprintf(h, "size %d\n", size)
	if _, err := io.Copy(h, io.LimitReader(f, identitySample)); err != nil {
		return id, err
	}
	if rest := size - identitySample; rest > 0 {
		buf := make([]byte, identityChunk)
		for i := range int64(identityChunks) {
			off := identitySample + i*rest/identityChunks
			n, err := f.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
			if err != nil && !errors.Is(err, io.EOF) {
				return id, err
			}
			h.Write(buf[:n])
		}
	}
	h.Sum(id[:0])
	return id, nil
}

// openDiskCache opens (creating it) the directory under root of the
// model named name with the given identity and KV layout, takes its lock
// and indexes its files (headers and tokens only), removing temporary
// ones left by a crash and those that do not check. The directory's name
// digests name and layout: a model served under another name, or with
// another cache layout, has its own; the files' headers tell a model
// file replaced under the same name. Another engine, in this process or
// another, holding the directory is an error. media says the model has a
// projector: token lists may hold media's placeholder ids.
func openDiskCache(root, name string, budget int64, ident [32]byte, layout string, nVocab int, media bool) (*diskCache, error) {
	key := sha256.Sum256([]byte(name + "\x00" + layout))
	safe := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, name)
	if len(safe) > 64 {
		safe = safe[:64]
	}
	dir := filepath.Join(root, safe+"-"+hex.EncodeToString(key[:8]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cache disk: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cache disk: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("cache disk %s: held by another engine (another server, or the same model under another id with the same cache dir): %w", dir, err)
	}
	d := &diskCache{
		dir: dir, budget: budget, ident: ident, layout: sha256.Sum256([]byte(layout)), nVocab: nVocab, media: media, lock: lock,
		queue: make(chan diskJob, diskQueue), done: make(chan struct{}),
	}
	if err := d.scan(); err != nil {
		lock.Close()
		return nil, fmt.Errorf("cache disk %s: %w", dir, err)
	}
	go d.write()
	return d, nil
}

// scan builds the index from the directory, least recently used (by
// modification time) first, and evicts down to the budget.
func (d *diskCache) scan() error {
	des, err := os.ReadDir(d.dir)
	if err != nil {
		return err
	}
	type found struct {
		e   *diskEntry
		mod time.Time
	}
	var all []found
	for _, de := range des {
		name := de.Name()
		path := filepath.Join(d.dir, name)
		switch {
		case strings.HasPrefix(name, ".tmp-"):
			os.Remove(path) // a write a crash interrupted
			continue
		case !de.Type().IsRegular() || !strings.HasSuffix(name, ".kv"):
			continue
		}
		e, mod, err := d.readHead(path)
		if err != nil {
			os.Remove(path)
			d.st.rejected++
			continue
		}
		e.name = name
		all = append(all, found{e, mod})
	}
	slices.SortFunc(all, func(a, b found) int { return a.mod.Compare(b.mod) })
	for _, f := range all {
		d.clock++
		f.e.used = d.clock
		d.entries = append(d.entries, f.e)
		d.size += f.e.size
	}
	d.mu.Lock()
	victims := d.evict(0)
	d.mu.Unlock()
	d.remove(victims)
	return nil
}

// header is a file's fixed part, decoded.
type header struct {
	tokens, checkpoints int
	stateLen            int64
	size                int64 // the file's
	ident, layout       [32]byte
	salt                [32]byte
	headCRC, stateCRC   uint32
	raw                 [diskHeader]byte
}

// index is the bytes of the token ids and checkpoint table after the
// fixed part.
func (h header) index() int { return 4*h.tokens + diskCheckpoint*h.checkpoints }

// encodeHeader writes the fixed part of the file of j, its token ids and
// its checkpoint table.
func (d *diskCache) encodeHeader(j diskJob) []byte {
	b := make([]byte, diskHeader, diskHeader+4*len(j.tokens)+diskCheckpoint*len(j.checkpoints))
	copy(b, diskMagic)
	binary.LittleEndian.PutUint32(b[8:], diskVersion)
	binary.LittleEndian.PutUint32(b[12:], uint32(len(j.tokens)))
	binary.LittleEndian.PutUint64(b[16:], uint64(len(j.state)))
	copy(b[24:], d.ident[:])
	copy(b[56:], d.layout[:])
	copy(b[88:], j.salt[:])
	binary.LittleEndian.PutUint32(b[120:], uint32(len(j.checkpoints)))
	for _, t := range j.tokens {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	states := crc32.Checksum(j.state, castagnoli)
	for _, c := range j.checkpoints {
		b = binary.LittleEndian.AppendUint32(b, uint32(c.pos))
		b = binary.LittleEndian.AppendUint64(b, uint64(len(c.state)))
		states = crc32.Update(states, castagnoli, c.state)
	}
	head := crc32.Update(crc32.Checksum(b[:128], castagnoli), castagnoli, b[diskHeader:])
	binary.LittleEndian.PutUint32(b[128:], head)
	binary.LittleEndian.PutUint32(b[132:], states)
	return b
}

// decodeHeader checks the fixed part of a file of size bytes: magic,
// version, this model and layout, and lengths that add up to size.
func (d *diskCache) decodeHeader(raw []byte, size int64) (header, error) {
	var h header
	if len(raw) < diskHeader || string(raw[:8]) != diskMagic {
		return h, errors.New("not a KV cache file")
	}
	copy(h.raw[:], raw)
	if v := binary.LittleEndian.Uint32(raw[8:]); v != diskVersion {
		return h, fmt.Errorf("version %d, want %d", v, diskVersion)
	}
	h.tokens = int(binary.LittleEndian.Uint32(raw[12:]))
	sl := binary.LittleEndian.Uint64(raw[16:])
	copy(h.ident[:], raw[24:])
	copy(h.layout[:], raw[56:])
	copy(h.salt[:], raw[88:])
	h.checkpoints = int(binary.LittleEndian.Uint32(raw[120:]))
	zero := binary.LittleEndian.Uint32(raw[124:])
	h.headCRC = binary.LittleEndian.Uint32(raw[128:])
	h.stateCRC = binary.LittleEndian.Uint32(raw[132:])
	switch {
	case h.ident != d.ident:
		return h, errors.New("another model's")
	case h.layout != d.layout:
		return h, errors.New("another KV layout's")
	case h.tokens == 0 || h.tokens > maxDiskTokens || h.checkpoints > maxDiskCheckpoints || zero != 0 || sl == 0 || sl > uint64(size):
		return h, errors.New("bad lengths")
	case int64(diskHeader)+int64(h.index())+int64(sl) > size:
		return h, fmt.Errorf("%d bytes, the header says at least %d", size, int64(diskHeader)+int64(h.index())+int64(sl))
	}
	h.stateLen, h.size = int64(sl), size
	return h, nil
}

// decodeIndex checks the token ids and checkpoint table (raw, after the
// fixed part) against the header's CRC, the vocabulary and the file's
// size, and returns the tokens and the checkpoints' positions (in
// increasing order, within the tokens) and states' lengths.
func (d *diskCache) decodeIndex(h header, raw []byte) ([]int32, []checkpoint, []int64, error) {
	if crc32.Update(crc32.Checksum(h.raw[:128], castagnoli), castagnoli, raw) != h.headCRC {
		return nil, nil, nil, errors.New("header checksum mismatch")
	}
	toks := make([]int32, h.tokens)
	for i := range toks {
		t := int32(binary.LittleEndian.Uint32(raw[4*i:]))
		if (t < 0 && !d.media) || int(t) >= d.nVocab {
			return nil, nil, nil, fmt.Errorf("token id %d out of range [0,%d)", t, d.nVocab)
		}
		toks[i] = t
	}
	var cps []checkpoint
	var lens []int64
	rest := h.size - int64(diskHeader) - int64(h.index()) - h.stateLen // the checkpoints' states
	for i := range h.checkpoints {
		b := raw[4*h.tokens+diskCheckpoint*i:]
		pos, n := int(binary.LittleEndian.Uint32(b)), binary.LittleEndian.Uint64(b[4:])
		if pos <= 0 || pos > h.tokens || len(cps) > 0 && pos <= cps[len(cps)-1].pos || n == 0 || n > uint64(rest) {
			return nil, nil, nil, errors.New("bad checkpoint table")
		}
		rest -= int64(n)
		cps = append(cps, checkpoint{pos: pos})
		lens = append(lens, int64(n))
	}
	if rest != 0 {
		return nil, nil, nil, fmt.Errorf("%d bytes, the header says %d", h.size, h.size-rest)
	}
	return toks, cps, lens, nil
}

// readHead reads and checks the header and tokens of the file at path.
func (d *diskCache) readHead(path string) (*diskEntry, time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, time.Time{}, err
	}
	raw := make([]byte, diskHeader)
	if _, err := io.ReadFull(f, raw); err != nil {
		return nil, time.Time{}, err
	}
	h, err := d.decodeHeader(raw, fi.Size())
	if err != nil {
		return nil, time.Time{}, err
	}
	raw = make([]byte, h.index()) // within the file's size, checked above
	if _, err := io.ReadFull(f, raw); err != nil {
		return nil, time.Time{}, err
	}
	toks, cps, _, err := d.decodeIndex(h, raw)
	if err != nil {
		return nil, time.Time{}, err
	}
	return &diskEntry{tokens: toks, checkpoints: cps, salt: h.salt, size: fi.Size()}, fi.ModTime(), nil
}

// saltKey is the digest a salt is known by on disk: file names and
// headers never hold the salt itself.
func saltKey(salt string) [32]byte { return sha256.Sum256([]byte(salt)) }

// fileName is the name of the file of tokens of salt: one per prefix.
func fileName(tokens []int32, salt [32]byte) string {
	h := sha256.New()
	var b [4]byte
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(b[:], uint32(t))
		h.Write(b[:])
	}
	return hex.EncodeToString(salt[:8]) + "-" + hex.EncodeToString(h.Sum(nil)[:12]) + ".kv"
}

// longest returns the file of salt sharing the longest prefix with
// tokens among those of at most max tokens (a longer one would not fit
// a slot), and that prefix's length.
func (d *diskCache) longest(tokens []int32, salt [32]byte, maxTokens int) (diskEntry, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var best *diskEntry
	n := 0
	for _, e := range d.entries {
		if e.salt != salt || len(e.tokens) > maxTokens {
			continue
		}
		if m := commonPrefix(e.tokens, tokens); m > n {
			best, n = e, m
		}
	}
	if best == nil {
		return diskEntry{}, 0
	}
	return *best, n
}

// holder returns a file of salt holding all of tokens, nil if none.
// d.mu is held.
func (d *diskCache) holder(tokens []int32, salt [32]byte) *diskEntry {
	for _, e := range d.entries {
		if e.salt == salt && len(e.tokens) >= len(tokens) && commonPrefix(e.tokens, tokens) == len(tokens) {
			return e
		}
	}
	return nil
}

// covered reports whether a file of salt holds all of tokens, and marks
// it used. d.mu is held.
func (d *diskCache) covered(tokens []int32, salt [32]byte) bool {
	e := d.holder(tokens, salt)
	if e == nil {
		return false
	}
	d.clock++
	e.used = d.clock
	return true
}

// heldSize returns the bytes of a file of salt holding all of tokens,
// and whether there is one; unlike covered it marks nothing used.
func (d *diskCache) heldSize(tokens []int32, salt string) (int64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.holder(tokens, saltKey(salt)); e != nil {
		return e.size, true
	}
	return 0, false
}

// touch marks the file of salt holding all of tokens, if any, used.
func (d *diskCache) touch(tokens []int32, salt string) {
	d.mu.Lock()
	d.covered(tokens, saltKey(salt))
	d.mu.Unlock()
}

// fileSize is the bytes of the file of a state of stateLen bytes for n
// tokens, with the checkpoints cps.
func fileSize(n, stateLen int, cps []checkpoint) int64 {
	return diskHeader + 4*int64(n) + diskCheckpoint*int64(len(cps)) + int64(stateLen) + checkpointBytes(cps)
}

// keep returns the most of e's tokens a restore can keep for a prompt
// sharing its first m tokens when only whole keeps whole states (see
// hostEntry.keep).
func (e diskEntry) keep(m int, whole bool) int {
	return keepOf(m, len(e.tokens), e.checkpoints, whole)
}

// read returns the state of the file e names and its checkpoints, after
// checking it whole: its header is this model's and layout's, and its
// salt, tokens and checkpoints are e's; its checksums hold. A file that
// does not check is removed from the index and the directory. Reading a
// file the writer has since removed is a miss (an error), not a fault.
func (d *diskCache) read(e diskEntry) ([]byte, []checkpoint, error) {
	path := filepath.Join(d.dir, e.name)
	b, err := readFileSized(path, e.size)
	var cps []checkpoint
	if err == nil {
		cps, err = d.check(e, b)
	}
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			d.drop(e.name)
		}
		return nil, nil, fmt.Errorf("cache disk %s: %w", path, err)
	}
	d.mu.Lock()
	for _, x := range d.entries {
		if x.name == e.name {
			d.clock++
			x.used = d.clock
		}
	}
	d.mu.Unlock()
	now := time.Now()
	os.Chtimes(path, now, now) // the order of use, for the next start
	at := diskHeader + 4*len(e.tokens) + diskCheckpoint*len(cps)
	return b[at : len(b)-int(checkpointBytes(cps))], cps, nil
}

// check verifies a whole file b against the entry that indexes it, and
// returns its checkpoints, their states within b.
func (d *diskCache) check(e diskEntry, b []byte) ([]checkpoint, error) {
	h, err := d.decodeHeader(b, int64(len(b)))
	if err != nil {
		return nil, err
	}
	if h.salt != e.salt || h.tokens != len(e.tokens) || h.checkpoints != len(e.checkpoints) {
		return nil, errors.New("not the indexed file")
	}
	toks, cps, lens, err := d.decodeIndex(h, b[diskHeader:diskHeader+h.index()])
	if err != nil {
		return nil, err
	}
	if !slices.Equal(toks, e.tokens) || !slices.EqualFunc(cps, e.checkpoints, func(a, b checkpoint) bool { return a.pos == b.pos }) {
		return nil, errors.New("not the indexed tokens")
	}
	if crc32.Checksum(b[diskHeader+h.index():], castagnoli) != h.stateCRC {
		return nil, errors.New("state checksum mismatch")
	}
	at := int64(diskHeader+h.index()) + h.stateLen
	for i := range cps {
		cps[i].state = b[at : at+lens[i]]
		at += lens[i]
	}
	return cps, nil
}

// readFileSized reads the file at path, which must be size bytes long.
func readFileSized(path string, size int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() != size {
		return nil, fmt.Errorf("%d bytes, indexed with %d", fi.Size(), size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, err
	}
	return b, nil
}

// drop removes the file name from the index and the directory: it did
// not check.
func (d *diskCache) drop(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.st.rejected++
	d.entries = slices.DeleteFunc(d.entries, func(x *diskEntry) bool {
		if x.name == name {
			d.size -= x.size
			os.Remove(filepath.Join(d.dir, name))
			return true
		}
		return false
	})
}

// hit counts a state read and loaded.
func (d *diskCache) hit() {
	d.mu.Lock()
	d.st.hits++
	d.mu.Unlock()
}

// put hands the state of tokens of salt, with the checkpoints cps within
// them, to the writer without waiting: a state the queue has no room for
// is dropped (and counted), as is one a file already holds (not
// counted). Only the scheduler calls it.
func (d *diskCache) put(tokens []int32, salt string, state []byte, cps []checkpoint) {
	d.mu.Lock()
	defer d.mu.Unlock()
	j := diskJob{salt: saltKey(salt), state: state, checkpoints: slices.Clone(cps)}
	if d.covered(tokens, j.salt) {
		return
	}
	if len(d.queue) == cap(d.queue) || (d.pending > 0 && d.pending+j.bytes() > diskQueueBytes) {
		d.st.dropped++
		return
	}
	d.pending += j.bytes()
	j.tokens = slices.Clone(tokens)
	d.queue <- j // room checked above
}

// putWait hands a state and its checkpoints to the writer, waiting for
// room until ctx ends (then the state is dropped, and counted): at close.
// A state a file already holds is not written again, but that file is
// marked used.
func (d *diskCache) putWait(ctx context.Context, tokens []int32, salt string, state []byte, cps []checkpoint) {
	j := diskJob{tokens: slices.Clone(tokens), salt: saltKey(salt), state: state, checkpoints: slices.Clone(cps)}
	d.mu.Lock()
	if d.covered(tokens, j.salt) {
		d.mu.Unlock()
		return
	}
	d.pending += j.bytes()
	d.mu.Unlock()
	select {
	case d.queue <- j:
	case <-ctx.Done():
		d.mu.Lock()
		d.pending -= j.bytes()
		d.st.dropped++
		d.mu.Unlock()
	}
}

// closeBy tells the writer to give up, from when ctx ends, the states it
// has not written (and the file it is writing), counting them dropped.
// The scheduler calls it as the engine closes, before the last putWait.
func (d *diskCache) closeBy(ctx context.Context) {
	d.mu.Lock()
	d.closing = ctx
	d.mu.Unlock()
}

// dropped counts n states not written.
func (d *diskCache) dropped(n int) {
	d.mu.Lock()
	d.st.dropped += uint64(n)
	d.mu.Unlock()
}

// close waits for the writer to write what it was handed (or give it up:
// see closeBy), and releases the directory. Only the scheduler calls it,
// once.
func (d *diskCache) close() {
	close(d.queue)
	<-d.done
	d.lock.Close()
}

// stats returns the counters and the index's size now.
func (d *diskCache) stats() (entries int, size int64, st diskStats) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.entries), d.size, d.st
}

// write is the writer goroutine: it writes each state handed to it,
// making room by removing the least recently used files, and exits when
// the queue is closed and empty.
func (d *diskCache) write() {
	defer close(d.done)
	for j := range d.queue {
		d.writeOne(j)
	}
}

// writeOne writes one state's file, within the budget.
func (d *diskCache) writeOne(j diskJob) {
	head := d.encodeHeader(j)
	size := int64(len(head)) + j.bytes()
	name := fileName(j.tokens, j.salt)
	d.mu.Lock()
	d.pending -= j.bytes()
	ctx := d.closing
	if ctx == nil {
		ctx = context.Background()
	}
	if size > d.budget || ctx.Err() != nil || d.covered(j.tokens, j.salt) {
		if size > d.budget || ctx.Err() != nil {
			d.st.dropped++
		}
		d.mu.Unlock()
		return
	}
	victims := d.evict(size)
	d.size += size // reserved while written
	d.mu.Unlock()
	d.remove(victims)

	parts := [][]byte{head, j.state}
	for _, c := range j.checkpoints {
		parts = append(parts, c.state)
	}
	tmp, err := writeTemp(ctx, d.dir, parts...)
	d.mu.Lock()
	if err == nil {
		// Renamed under the lock, so that the index and the directory
		// agree for read and drop.
		if err = os.Rename(tmp, filepath.Join(d.dir, name)); err != nil {
			os.Remove(tmp)
		}
	}
	if err != nil {
		d.size -= size
		d.st.dropped++
		d.mu.Unlock()
		return
	}
	// Files of salt whose tokens are a prefix of these are redundant.
	d.entries = slices.DeleteFunc(d.entries, func(e *diskEntry) bool {
		if e.salt == j.salt && commonPrefix(e.tokens, j.tokens) == len(e.tokens) {
			d.size -= e.size
			if e.name != name {
				os.Remove(filepath.Join(d.dir, e.name))
			}
			return true
		}
		return false
	})
	d.clock++
	d.entries = append(d.entries, &diskEntry{name: name, tokens: j.tokens, checkpoints: positions(j.checkpoints), salt: j.salt, size: size, used: d.clock})
	d.st.saved++
	d.mu.Unlock()
	// The rename made durable; should the sync fail, the file is whole
	// or absent after a crash all the same.
	syncDir(d.dir)
}

// evict takes the least recently used entries out of the index until
// room more bytes fit the budget, and returns them for remove. d.mu is
// held.
func (d *diskCache) evict(room int64) []*diskEntry {
	var out []*diskEntry
	for d.size+room > d.budget && len(d.entries) > 0 {
		oldest := slices.MinFunc(d.entries, func(a, b *diskEntry) int { return cmp.Compare(a.used, b.used) })
		d.entries = slices.DeleteFunc(d.entries, func(e *diskEntry) bool { return e == oldest })
		d.size -= oldest.size
		d.st.evicted++
		out = append(out, oldest)
	}
	return out
}

// remove deletes the files of evicted entries. A reader that opened one
// first still reads it whole.
func (d *diskCache) remove(victims []*diskEntry) {
	for _, e := range victims {
		os.Remove(filepath.Join(d.dir, e.name))
	}
}

// writeChunk is how many bytes writeTemp writes between two looks at its
// context: a state of gigabytes is given up within one chunk's write.
const writeChunk = 8 << 20

// writeTemp writes parts, one after another, to a new temporary file in
// dir, synced to disk, and returns its path. When ctx ends first the file
// is removed and ctx's error returned.
func writeTemp(ctx context.Context, dir string, parts ...[]byte) (string, error) {
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return "", err
	}
	for _, b := range parts {
		for len(b) > 0 && err == nil {
			if err = ctx.Err(); err == nil {
				n := min(len(b), writeChunk)
				_, err = f.Write(b[:n])
				b = b[n:]
			}
		}
	}
	if err == nil {
		err = ctx.Err() // the sync is not given up once begun
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
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

// attachDisk gives the scheduler the disk tier d (nil: none): the host
// cache spills what it evicts into it.
func (s *scheduler) attachDisk(d *diskCache) {
	s.disk = d
	if d != nil {
		s.host.spill = d.put
	}
}

// maxDiskLoads bounds the disk-tier files read for waiting requests and
// held until their admission: what they hold of memory is at most that
// many slots' states.
const maxDiskLoads = 2

// diskLoad is a disk-tier file read for a waiting request beside the
// steps, so that no step waits on the disk (see prefetch).
type diskLoad struct {
	req    *request
	entry  diskEntry
	state  []byte       // the file's state once read; nil if the read failed
	cps    []checkpoint // and its checkpoints
	queued bool         // waits for a reader (maxDiskLoads are busy or held)
	done   bool         // read: the request may be admitted
	gone   bool         // its request left before the read ended
}

// prefetch starts reading, beside the steps, the disk-tier file holding
// a longer prefix of what r needs evaluated than the slots and the host
// cache hold, when r could take a slot now; it reports whether r waits
// for that read. Requests served after r may take free slots meanwhile:
// a read of a long history takes longer than a step.
func (s *scheduler) prefetch(r *request, now time.Time) bool {
	if s.disk == nil || r.params.NoCachePrompt || r.load != nil || !s.hasRoom(r, now) {
		return false
	}
	need := r.need()
	salt := r.params.CacheSalt
	e, m := s.disk.longest(need, saltKey(salt), s.slots[0].nctx)
	m = min(m, len(need)-1)
	if m == 0 {
		return false
	}
	have := 0
	for _, sl := range s.slots {
		if sl.salt == salt {
			have = max(have, commonPrefix(sl.cache, need))
		}
	}
	if _, h := s.host.longest(need, salt); h > have {
		have = h
	}
	// Worth a read for 64 more tokens (minHostSave), or half the prompt.
	if e.keep(m, s.restorable(m, len(e.tokens)))-have < min(minHostSave, max(1, len(need)/2)) {
		return false
	}
	r.load = &diskLoad{req: r, entry: e, queued: true}
	if s.loading < maxDiskLoads {
		s.startLoad(r.load)
	}
	return true
}

// hasRoom reports whether r could take a slot now: one is free for it,
// or it may preempt one.
func (s *scheduler) hasRoom(r *request, now time.Time) bool {
	for _, sl := range s.slots {
		if !sl.active() && (!r.params.PinSlot || sl.id == r.params.SlotID) {
			return true
		}
	}
	return s.victim(r, now) != nil
}

// startLoad reads the load's file on a goroutine of its own, which sends
// it to s.loaded when done. The load counts in s.loading until its
// state is used or let go.
func (s *scheduler) startLoad(l *diskLoad) {
	l.queued = false
	s.loading++
	s.loads.Add(1)
	go func() {
		defer s.loads.Done()
		if h := s.e.cfg.beforeDiskRead; h != nil {
			h()
		}
		l.state, l.cps, _ = s.disk.read(l.entry) // a failed read is a miss
		s.loaded <- l
	}()
}

// diskLoaded takes a finished read: its request may now be admitted. A
// read that failed, or whose request has left, frees its place for the
// next queued one.
func (s *scheduler) diskLoaded(l *diskLoad) {
	l.done = true
	if l.gone || l.state == nil {
		l.state, l.cps = nil, nil
		s.loadEnded()
	}
}

// releaseLoad lets go of r's load as r is admitted or leaves.
func (s *scheduler) releaseLoad(r *request) {
	l := r.load
	if l == nil {
		return
	}
	r.load = nil
	switch {
	case l.queued:
	case !l.done:
		l.gone = true // counted until the read ends
	case l.state != nil:
		l.state, l.cps = nil, nil
		s.loadEnded()
	}
}

// loadEnded frees a place among the loads, for the first queued one in
// service order.
func (s *scheduler) loadEnded() {
	s.loading--
	var next *request
	for _, r := range s.waiting {
		if r.load != nil && r.load.queued && (next == nil || before(r, next) < 0) {
			next = r
		}
	}
	if next != nil {
		s.startLoad(next.load)
	}
}

// restoreDisk loads into the slot the state l read from a disk-tier
// file, if it keeps more than have tokens of need (what the slots and
// the host cache offer), and keeps at most limit tokens of it (or goes
// back to its last checkpoint within them: see hostEntry.keep). It
// reports false when there is no such state or the load failed; a failed
// load leaves the slot empty.
func (s *scheduler) restoreDisk(sl *slot, l *diskLoad, need []int32, have, limit int) bool {
	if l == nil || l.state == nil {
		return false
	}
	e := l.entry
	m := min(commonPrefix(e.tokens, need), limit)
	m = e.keep(m, s.restorable(m, len(e.tokens)))
	// A restore empties the slot (freeing the cells it alone holds),
	// takes cells for the whole file's tokens, then frees its tail.
	if m <= have || len(e.tokens) > sl.nctx || len(e.tokens) > s.pool.avail()+s.pool.only(sl.cells)-s.committed() {
		return false
	}
	state, cps := l.state, l.cps
	s.truncate(sl, 0)
	if !s.lctx.SeqStateSet(sl.id, state) || s.lctx.SeqPosMax(sl.id) != lastPos(e.tokens) {
		s.lctx.SeqRemove(sl.id, -1, -1)
		return false
	}
	sl.salt = l.req.params.CacheSalt
	for _, tok := range e.tokens {
		s.appendToken(sl, tok)
	}
	for _, c := range cps {
		// Copied out of the file's buffer, which is let go; used now.
		s.adoptCheckpoint(sl, checkpoint{pos: c.pos, state: slices.Clone(c.state), used: s.host.tick()})
	}
	s.truncate(sl, m)
	s.host.fit(0) // the checkpoints count in the host cache's budget
	if len(sl.cache) != m {
		return false // the memory could not be cut back to m (see checkpoint.go): the slot is empty
	}
	s.disk.hit()
	return true
}

// spillItem is a state spillAll may write: a slot's cache or a host
// entry.
type spillItem struct {
	tokens []int32
	salt   string
	slot   *slot  // the slot whose cache it is; nil for a host entry
	state  []byte // a host entry's state
	// checkpoints are the slot's, or the host entry's.
	checkpoints []checkpoint
	rank        int // recency: 0 the most recently used
}

// spillAll writes what the engine has cached, as it closes, to the disk
// tier (see spillPlan), and waits for the writer to finish, at most
// Config.DiskCloseTimeout: what is not written by then is dropped.
// Requests still running were finished (cancelled) first: their slots'
// caches are what they evaluated, prompt and output so far, valid KV
// like an idle slot's.
func (s *scheduler) spillAll() {
	if s.disk == nil {
		return
	}
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if d := s.e.cfg.DiskCloseTimeout; d > 0 {
		ctx, cancel = context.WithTimeout(ctx, d)
	}
	defer cancel()
	s.disk.closeBy(ctx)
	plan, left := s.spillPlan()
	s.disk.dropped(left)
	for i, it := range plan {
		if ctx.Err() != nil {
			s.disk.dropped(len(plan) - i)
			break
		}
		state := it.state
		if it.slot != nil {
			state = s.lctx.SeqStateGet(it.slot.id)
		}
		if len(state) > 0 {
			s.disk.putWait(ctx, it.tokens, it.salt, state, it.checkpoints)
		}
	}
	s.disk.close()
}

// spillPlan returns what spillAll writes, least recently used first, and
// how many states it leaves out for want of room. The states are every
// slot's non-empty cache, and every host entry, less those another of
// them holds whole (same salt, its tokens a prefix of the other's),
// whose recency the holder takes. The slots' caches count as more
// recent than the host cache's entries (the scheduler pushed those out
// of the slots, the least recently used first), each group ordered by
// its own use. The most recent are chosen first, each whose file fits
// what is left of Config.DiskCacheBytes: so the writes never evict one
// another, and what they evict is the files older than all of them. A
// state a file holds already counts that file, which is not written
// again but marked used now (least recently used first), before any
// write makes room.
func (s *scheduler) spillPlan() (plan []spillItem, left int) {
	var items []spillItem
	slots := slices.Clone(s.slots)
	slices.SortStableFunc(slots, func(a, b *slot) int { return b.lastUsed.Compare(a.lastUsed) })
	for _, sl := range slots {
		if len(sl.cache) > 0 {
			items = append(items, spillItem{tokens: sl.cache, salt: sl.salt, slot: sl, checkpoints: sl.checkpoints})
		}
	}
	hosts := slices.Clone(s.host.entries)
	slices.SortStableFunc(hosts, func(a, b *hostEntry) int { return cmp.Compare(b.used, a.used) })
	for _, e := range hosts {
		items = append(items, spillItem{tokens: e.tokens, salt: e.salt, state: e.state, checkpoints: e.checkpoints})
	}
	for i := range items {
		items[i].rank = i
	}
	// A slot's cache may be held by another slot's or a host entry, and
	// a host entry by a slot's cache; host entries never hold one
	// another (hostCache.add). The holder is the longest, so never held
	// itself; of equal ones, the first.
	held := make([]bool, len(items))
	for i, it := range items {
		h := -1
		for j, o := range items {
			if j == i || (it.slot == nil && o.slot == nil) || o.salt != it.salt || len(o.tokens) < len(it.tokens) {
				continue
			}
			if len(o.tokens) == len(it.tokens) && j > i {
				continue
			}
			if commonPrefix(o.tokens, it.tokens) == len(it.tokens) && (h < 0 || len(o.tokens) > len(items[h].tokens)) {
				h = j
			}
		}
		if h >= 0 {
			held[i] = true
			items[h].rank = min(items[h].rank, it.rank)
		}
	}
	var keep []spillItem
	for i, it := range items {
		if !held[i] {
			keep = append(keep, it)
		}
	}
	slices.SortStableFunc(keep, func(a, b spillItem) int { return cmp.Compare(a.rank, b.rank) })
	room := s.disk.budget
	var onDisk []spillItem
	for _, it := range keep {
		size, ok := s.disk.heldSize(it.tokens, it.salt)
		switch {
		case ok:
		case it.slot != nil:
			size = fileSize(len(it.tokens), s.lctx.SeqStateSize(it.slot.id), it.checkpoints)
		default:
			size = fileSize(len(it.tokens), len(it.state), it.checkpoints)
		}
		if size > room {
			left++
			continue
		}
		room -= size
		if ok {
			onDisk = append(onDisk, it)
		} else {
			plan = append(plan, it)
		}
	}
	for _, it := range slices.Backward(onDisk) {
		s.disk.touch(it.tokens, it.salt)
	}
	slices.Reverse(plan)
	return plan, left
}

// diskStats fills the disk tier's fields of st, as of now: the writer
// works while the scheduler sleeps.
func (e *Engine) diskStats(st *Stats) {
	if e.disk == nil {
		return
	}
	n, size, c := e.disk.stats()
	st.DiskCacheEntries, st.DiskCacheBytes = n, size
	st.DiskCacheHits, st.DiskCacheSaved, st.DiskCacheDropped = c.hits, c.saved, c.dropped
	st.DiskCacheEvicted, st.DiskCacheRejected = c.evicted, c.rejected
}

// openDisk opens the disk tier cfg asks for (nil when none) for the
// model named name, of nVocab tokens and memory kind.
func openDisk(cfg Config, name string, nVocab int, kind MemoryKind) (*diskCache, error) {
	if cfg.DiskCacheDir == "" {
		return nil, nil
	}
	budget := cfg.DiskCacheBytes
	if budget == 0 {
		budget = DefaultDiskCacheBytes
	}
	ident, err := modelIdentity(cfg.ModelPath)
	if err != nil {
		return nil, fmt.Errorf("cache disk: model identity: %w", err)
	}
	if cfg.MMProj != "" {
		// A medium's cells hold what the projector made of it: states
		// with media are the model's and the projector's.
		proj, err := modelIdentity(cfg.MMProj)
		if err != nil {
			return nil, fmt.Errorf("cache disk: projector identity: %w", err)
		}
		ident = sha256.Sum256(append(ident[:], proj[:]...))
	}
	return openDiskCache(cfg.DiskCacheDir, name, budget, ident, kvLayout(cfg, kind), nVocab, cfg.MMProj != "")
}
