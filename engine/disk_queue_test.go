package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corral-llm/corral/llama"
)

// queueOnlyDisk is a disk tier in a temporary folder with its queue and
// no writer: a test starts one when it wants the queue to move.
func queueOnlyDisk(t *testing.T, budget int64) *diskCache {
	return &diskCache{
		dir: t.TempDir(), budget: budget, nVocab: 100,
		queue: make(chan diskJob, diskQueue), done: make(chan struct{}),
	}
}

// diskLock creates the tier's lock file in dir.
func diskLock(t *testing.T, dir string) *os.File {
	t.Helper()
	lock, err := os.Create(filepath.Join(dir, "lock"))
	if err != nil {
		t.Fatal(err)
	}
	return lock
}

// TestDiskCachePutNeverWaits: with the writer stalled, put queues up to
// diskQueue states (and diskQueueBytes) and drops, counting them, the
// ones past that instead of waiting; once the writer runs, close writes
// every queued state.
func TestDiskCachePutNeverWaits(t *testing.T) {
	d := queueOnlyDisk(t, 1<<30)
	d.lock = diskLock(t, d.dir)
	// No writer yet: nothing leaves the queue.
	for i := range diskQueue + 3 {
		d.put([]int32{1, int32(i + 2)}, "", make([]byte, 10), nil)
	}
	if _, _, st := d.stats(); st.dropped != 3 {
		t.Fatalf("%d states dropped past a full queue of %d, want 3", st.dropped, diskQueue)
	}
	go d.write()
	d.close()
	n, size, st := d.stats()
	if n != diskQueue || st.saved != diskQueue || size != int64(diskQueue)*(diskHeader+2*4+10) {
		t.Fatalf("after close: %d files of %d bytes, %d saved; want the %d queued", n, size, st.saved, diskQueue)
	}

	// The byte bound: one state alone may be larger than it, a second
	// is dropped.
	d2 := queueOnlyDisk(t, 1<<40)
	d2.put([]int32{1}, "", make([]byte, diskQueueBytes+1), nil)
	d2.put([]int32{2}, "", make([]byte, 1), nil)
	if _, _, st := d2.stats(); st.dropped != 1 || len(d2.queue) != 1 {
		t.Fatalf("past the byte bound: %d queued, %d dropped; want 1, 1", len(d2.queue), st.dropped)
	}
}

// TestDiskCacheCloseGivesUp: once the context given to closeBy ends,
// putWait no longer waits for room and the writer writes nothing more:
// what was handed over and not written is counted dropped, no file (nor
// a temporary one) is left, and close returns.
func TestDiskCacheCloseGivesUp(t *testing.T) {
	d := queueOnlyDisk(t, 1<<30)
	d.lock = diskLock(t, d.dir)
	ctx, cancel := context.WithCancel(t.Context())
	d.closeBy(ctx)
	// No writer yet: the queue fills.
	for i := range diskQueue {
		d.putWait(ctx, []int32{1, int32(i + 2)}, "", make([]byte, 10), nil)
	}
	cancel()
	d.putWait(ctx, []int32{2}, "", make([]byte, 10), nil) // a full queue: it gives up
	go d.write()
	d.close()
	n, _, st := d.stats()
	if n != 0 || st.saved != 0 || st.dropped != diskQueue+1 || d.pending != 0 {
		t.Errorf("after close: %d files, %d saved, %d dropped, %d bytes pending; want 0, 0, %d, 0", n, st.saved, st.dropped, d.pending, diskQueue+1)
	}
	if files, _ := filepath.Glob(filepath.Join(d.dir, "*")); len(files) != 1 {
		t.Errorf("files %v, want the lock alone", files)
	}
}

// TestWriteTempGivesUp: a write whose context ends leaves no temporary
// file and returns the context's error.
func TestWriteTempGivesUp(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := writeTemp(ctx, dir, []byte("head"), make([]byte, 2*writeChunk)); !errors.Is(err, context.Canceled) {
		t.Errorf("writeTemp after its context ended: %v, want %v", err, context.Canceled)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
		t.Errorf("files %v left, want none", files)
	}
	if _, err := writeTemp(t.Context(), dir, []byte("head"), make([]byte, writeChunk+1)); err != nil {
		t.Errorf("writeTemp: %v", err)
	}
}

// TestDiskCacheRejectsAnotherLayout: a file written under one KV layout
// and found among another's is removed when the directory is scanned.
func TestDiskCacheRejectsAnotherLayout(t *testing.T) {
	root := t.TempDir()
	var ident [32]byte
	a, err := openDiskCache(root, "m", 1<<30, ident, "type_k f16", 100, false)
	if err != nil {
		t.Fatal(err)
	}
	a.putWait(t.Context(), []int32{1, 2, 3}, "", []byte("state"), nil)
	a.close()
	files, _ := filepath.Glob(filepath.Join(a.dir, "*.kv"))
	if len(files) != 1 {
		t.Fatalf("files %v, want one", files)
	}
	b, err := openDiskCache(root, "m", 1<<30, ident, "type_k q8_0", 100, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	if b.dir == a.dir {
		t.Fatal("two layouts share a directory")
	}
	moved := filepath.Join(b.dir, filepath.Base(files[0]))
	if err := os.Rename(files[0], moved); err != nil {
		t.Fatal(err)
	}
	if err := b.scan(); err != nil {
		t.Fatal(err)
	}
	if n, _, st := b.stats(); n != 0 || st.rejected != 1 {
		t.Errorf("another layout's file: %d indexed, %d rejected; want 0, 1", n, st.rejected)
	}
	if _, err := os.Stat(moved); !os.IsNotExist(err) {
		t.Errorf("another layout's file is still there: %v", err)
	}
}

// BenchmarkDiskCacheRead is what a hit costs the scheduler before
// llama.cpp loads the state: reading and checking the file of a
// 4,000-token prefix of a 135M model (30 layers, 192 K and V values a
// token, F16: 23,040 bytes a token, 92 MB), from the page cache.
func BenchmarkDiskCacheRead(b *testing.B) {
	const tokens, perToken = 4000, 30 * 2 * 192 * 2
	var ident [32]byte
	root := b.TempDir()
	w, err := openDiskCache(root, "m", 1<<30, ident, "layout", 1000, false)
	if err != nil {
		b.Fatal(err)
	}
	toks := make([]int32, tokens)
	for i := range toks {
		toks[i] = int32(i % 1000)
	}
	w.putWait(b.Context(), toks, "", make([]byte, tokens*perToken), nil)
	w.close()
	d, err := openDiskCache(root, "m", 1<<30, ident, "layout", 1000, false)
	if err != nil {
		b.Fatal(err)
	}
	defer d.close()
	e, n := d.longest(toks, saltKey(""), tokens)
	if n != tokens {
		b.Fatalf("indexed %d tokens, want %d", n, tokens)
	}
	b.SetBytes(e.size)
	for b.Loop() {
		if _, _, err := d.read(e); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDiskCacheLayoutNamesTheTypes: engines whose KV cache types differ
// (-ctk, -ctv), whose flash attention differs or whose memory kind does
// have different layouts, so never each other's files; the default types
// name f16.
func TestDiskCacheLayoutNamesTheTypes(t *testing.T) {
	seen := map[string]Config{}
	for _, cfg := range []Config{{}, {CacheTypeK: "q8_0"}, {CacheTypeV: "q8_0"}, {CacheTypeK: "q4_0", CacheTypeV: "q4_0"}, {NoFlashAttn: true}} {
		l := kvLayout(cfg, MemoryAttention)
		if prev, dup := seen[l]; dup {
			t.Errorf("%+v and %+v share the layout %q", prev, cfg, l)
		}
		seen[l] = cfg
	}
	kinds := map[string]MemoryKind{}
	for _, k := range []MemoryKind{MemoryAttention, MemorySlidingWindow, MemoryRecurrent, MemoryHybrid} {
		l := kvLayout(Config{}, k)
		if prev, dup := kinds[l]; dup {
			t.Errorf("memories %s and %s share the layout %q", prev, k, l)
		}
		kinds[l] = k
	}
	if l, f16 := kvLayout(Config{}, MemoryAttention), kvLayout(Config{CacheTypeK: "f16", CacheTypeV: "f16"}, MemoryAttention); l != f16 {
		t.Errorf("default types %q, f16 %q: want one layout", l, f16)
	}
	// Files of another llama.cpp release are ignored, not misread.
	if l := kvLayout(Config{}, MemoryAttention); !strings.Contains(l, llama.Release()) || !strings.HasPrefix(llama.Release(), "llama.cpp b") {
		t.Errorf("layout %q does not name the release %q", l, llama.Release())
	}
}

// TestDiskFileKeepsCheckpoints: a file written with checkpoints is indexed
// with their positions when the directory is scanned again and reads back
// the state and each checkpoint's state; a file whose checkpoint table is
// inconsistent (a position past the tokens, out of order, or lengths
// that do not add up to the file), its checksum made right, is removed
// when scanned.
func TestDiskFileKeepsCheckpoints(t *testing.T) {
	root := t.TempDir()
	var ident [32]byte
	cps := []checkpoint{{pos: 2, state: []byte("two")}, {pos: 4, state: []byte("four!")}}
	a, err := openDiskCache(root, "m", 1<<30, ident, "layout", 100, false)
	if err != nil {
		t.Fatal(err)
	}
	a.putWait(t.Context(), []int32{1, 2, 3, 4, 5}, "", []byte("state"), cps)
	a.close()
	files, _ := filepath.Glob(filepath.Join(a.dir, "*.kv"))
	if len(files) != 1 {
		t.Fatalf("files %v, want one", files)
	}
	good, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := fileSize(5, len("state"), cps); int64(len(good)) != want {
		t.Errorf("file of %d bytes, want %d", len(good), want)
	}

	b, err := openDiskCache(root, "m", 1<<30, ident, "layout", 100, false)
	if err != nil {
		t.Fatal(err)
	}
	e, m := b.longest([]int32{1, 2, 3, 9}, saltKey(""), 100)
	if m != 3 || len(e.checkpoints) != 2 || e.checkpoints[0].pos != 2 || e.checkpoints[1].pos != 4 || e.keep(m, false) != 2 {
		t.Fatalf("indexed: %d tokens shared, checkpoints %+v, keep %d; want 3, at 2 and 4, keep 2", m, e.checkpoints, e.keep(m, false))
	}
	state, got, err := b.read(e)
	if err != nil || string(state) != "state" || len(got) != 2 || string(got[0].state) != "two" || string(got[1].state) != "four!" {
		t.Fatalf("read: state %q, checkpoints %+v, %v", state, got, err)
	}
	b.close()

	table := diskHeader + 4*5 // the first checkpoint's position
	for _, tc := range []struct {
		name   string
		damage func([]byte)
	}{
		{"position past the tokens", func(f []byte) { f[table+diskCheckpoint] = 6 }},
		{"positions out of order", func(f []byte) { f[table] = 4 }},
		{"lengths past the file", func(f []byte) { f[table+4] = 4 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := slices.Clone(good)
			tc.damage(f)
			raw := f[diskHeader : diskHeader+4*5+diskCheckpoint*2]
			binary.LittleEndian.PutUint32(f[128:], crc32.Update(crc32.Checksum(f[:128], castagnoli), castagnoli, raw))
			if err := os.WriteFile(files[0], f, 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := openDiskCache(root, "m", 1<<30, ident, "layout", 100, false)
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			if n, _, st := c.stats(); n != 0 || st.rejected != 1 {
				t.Errorf("%d files indexed, %d rejected; want 0, 1", n, st.rejected)
			}
		})
	}
}
