package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
)

// kvFiles lists the disk tier's files under dir.
func kvFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*", "*.kv"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// diskSettled returns e's stats once its disk tier has written saved
// states: the writer works apart from the requests.
func diskSettled(t *testing.T, e *engine.Engine, saved uint64) engine.Stats {
	t.Helper()
	var st engine.Stats
	poll(t, fmt.Sprintf("waiting for %d states written to disk", saved), func() (bool, string) {
		st = e.Stats()
		return st.DiskCacheSaved+st.DiskCacheDropped >= saved, fmt.Sprintf("%+v", st)
	})
	if st.DiskCacheDropped != 0 {
		t.Fatalf("%d states dropped: %+v", st.DiskCacheDropped, st)
	}
	return st
}

// primeDisk runs req on a fresh engine with cfg and closes it, which
// writes the slot's cache to the disk tier; it returns the output.
func primeDisk(t *testing.T, model string, cfg engine.Config, req engine.Request) string {
	t.Helper()
	e := newEngine(t, model, cfg)
	got, res := collect(t, submit(t, e, req))
	if res.Usage.CachedTokens != 0 {
		t.Fatalf("priming: %d cached tokens on a fresh engine with an empty disk tier", res.Usage.CachedTokens)
	}
	e.Close()
	if st := e.Stats(); st.DiskCacheSaved != 1 || st.DiskCacheEntries != 1 {
		t.Fatalf("after Close: %d states saved, %d files; want the slot's cache written: %+v", st.DiskCacheSaved, st.DiskCacheEntries, st)
	}
	return got
}

// TestDiskCacheRestoresAfterRestart: what a closed engine's slot held is
// found by a new engine on the same directory (a restart, or a
// keep-alive unload and reload): the prompt is reused, all but its last
// token, and the greedy output is the cold run's. A short conversation
// too: Close writes a slot's cache however short, though a running
// engine pushes out of a slot only tails of 64 tokens or more.
func TestDiskCacheRestoresAfterRestart(t *testing.T) {
	model := testmodel.TinyStories656K
	for _, c := range []struct{ name, prompt string }{{"long", longPrompt}, {"short", storyPrompt}} {
		t.Run(c.name, func(t *testing.T) {
			req := greedy(c.prompt, 16)
			cold := alone(t, model, req)
			cfg := engine.Config{Parallel: 1, DiskCacheDir: t.TempDir()}
			if got := primeDisk(t, model, cfg, req); got != cold {
				t.Fatalf("with a disk tier: %q, want %q", got, cold)
			}
			if files := kvFiles(t, cfg.DiskCacheDir); len(files) != 1 {
				t.Fatalf("files %v, want one", files)
			}

			e := newEngine(t, model, cfg)
			if st := e.Stats(); st.DiskCacheEntries != 1 || st.DiskCacheBytes == 0 {
				t.Fatalf("a new engine on the directory indexes %d files of %d bytes, want 1", st.DiskCacheEntries, st.DiskCacheBytes)
			}
			n := len(tokens(t, e, c.prompt))
			got, res := collect(t, submit(t, e, req))
			if res.Usage.CachedTokens != n-1 {
				t.Errorf("after the restart: %d cached tokens, want %d (the prompt but its last token)", res.Usage.CachedTokens, n-1)
			}
			if got != cold {
				t.Errorf("restored from disk: %q, want the cold run's %q", got, cold)
			}
			if st := settled(t, e, 1); st.DiskCacheHits != 1 || st.CachedPromptTokens != uint64(n-1) {
				t.Errorf("%d disk hits, %d cached prompt tokens; want 1, %d", st.DiskCacheHits, st.CachedPromptTokens, n-1)
			}
		})
	}
}

// TestDiskCacheAtCloseKeepsARunningRequestsCache: a request still in its
// slot when the engine closes (a paced answer paused between chunks) is
// finished as cancelled, and what it evaluated, the prompt and the answer
// so far, is written to the disk tier like an idle slot's cache.
func TestDiskCacheAtCloseKeepsARunningRequestsCache(t *testing.T) {
	model := testmodel.TinyStories656K
	cfg := engine.Config{Parallel: 1, DiskCacheDir: t.TempDir()}
	e := newEngine(t, model, cfg)
	n := len(tokens(t, e, storyPrompt))
	s := submit(t, e, pacedStory(64))
	if c, err := nextChunk(t, s); err != nil || !c.Held {
		t.Fatalf("first chunk %+v, %v: want one the answer pauses after", c, err)
	}
	e.Close()
	if _, res := collect(t, s); res.FinishReason != engine.FinishCancelled {
		t.Fatalf("the paused answer after Close: %+v, want cancelled", res)
	}
	if st := e.Stats(); st.DiskCacheSaved != 1 || st.DiskCacheEntries != 1 {
		t.Fatalf("after Close: %d states saved, %d files; want the paused slot's cache written: %+v", st.DiskCacheSaved, st.DiskCacheEntries, st)
	}

	e = newEngine(t, model, cfg)
	if _, res := collect(t, submit(t, e, greedy(storyPrompt, 4))); res.Usage.CachedTokens != n-1 {
		t.Errorf("after the restart: %d cached tokens, want %d (the prompt but its last token)", res.Usage.CachedTokens, n-1)
	}
}

// TestDiskCacheAtCloseKeepsTheMostRecent: what Close writes is bounded
// by Config.DiskCacheBytes, the most recently used first: the slots'
// caches, then the host cache's entries as far as room is left, never
// one pushing a slot's cache out.
func TestDiskCacheAtCloseKeepsTheMostRecent(t *testing.T) {
	model := testmodel.TinyStories656K
	dir := t.TempDir()
	probe := newEngine(t, model, engine.Config{Parallel: 1, DiskCacheDir: dir})
	prompts := variants(tokens(t, probe, longPrompt), 2)
	req := func(p []int32) engine.Request {
		return engine.Request{Tokens: p, MaxTokens: 8, IgnoreEOS: true}
	}
	collect(t, submit(t, probe, req(prompts[0])))
	probe.Close()
	one := probe.Stats().DiskCacheBytes // a file of either prompt: one length
	if one == 0 {
		t.Fatal("no file written")
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}

	// Room on disk for one file; the second prompt pushes the first's
	// cache out of the slot into the host cache.
	cfg := engine.Config{Parallel: 1, HostCacheBytes: 64 << 20, DiskCacheDir: dir, DiskCacheBytes: one + one/2}
	e := newEngine(t, model, cfg)
	for _, p := range prompts {
		collect(t, submit(t, e, req(p)))
	}
	if st := settled(t, e, 2); st.HostCacheEntries != 1 {
		t.Fatalf("%d host cache entries, want the first prompt's: %+v", st.HostCacheEntries, st)
	}
	e.Close()
	if st := e.Stats(); st.DiskCacheSaved != 1 || st.DiskCacheEntries != 1 || st.DiskCacheEvicted != 0 || st.DiskCacheDropped != 1 {
		t.Errorf("after Close: %d saved, %d files, %d evicted, %d dropped; want 1, 1, 0, 1 (the slot's written, the host entry left out)",
			st.DiskCacheSaved, st.DiskCacheEntries, st.DiskCacheEvicted, st.DiskCacheDropped)
	}

	e = newEngine(t, model, cfg)
	for _, c := range []struct{ i, cached int }{{1, len(prompts[1]) - 1}, {0, 1}} {
		if _, res := collect(t, submit(t, e, req(prompts[c.i]))); res.Usage.CachedTokens != c.cached {
			t.Errorf("prompt %d after the restart: %d cached tokens, want %d", c.i, res.Usage.CachedTokens, c.cached)
		}
	}
}

// variants returns k prompts of the same length as base (so their KV
// states are of one size), differing from the second token on.
func variants(base []int32, k int) [][]int32 {
	var out [][]int32
	for i := range k {
		v := slices.Clone(base)
		for j := 1; j < len(v); j += 7 {
			v[j] = int32(100 + 10*i + j%10)
		}
		out = append(out, v)
	}
	return out
}

// TestDiskCacheTakesWhatTheHostCachePushesOut: a prefix evicted from a
// full host cache is written to disk and restored from there, exactly,
// without a restart.
func TestDiskCacheTakesWhatTheHostCachePushesOut(t *testing.T) {
	model := testmodel.TinyStories656K
	probe := newEngine(t, model, engine.Config{Parallel: 1, HostCacheBytes: 64 << 20})
	prompts := variants(tokens(t, probe, longPrompt), 3)
	req := func(p []int32) engine.Request {
		return engine.Request{Tokens: p, MaxTokens: 8, IgnoreEOS: true}
	}
	var cold []string
	for _, p := range prompts {
		got, _ := collect(t, submit(t, probe, req(p)))
		cold = append(cold, got)
	}
	one := settled(t, probe, 3).HostCacheBytes / 2 // two states saved, of one size
	probe.Close()

	// Room in the host cache for one state: the third prompt pushes the
	// first out.
	e := newEngine(t, model, engine.Config{Parallel: 1, HostCacheBytes: one + one/2, DiskCacheDir: t.TempDir()})
	for i, p := range prompts {
		if got, _ := collect(t, submit(t, e, req(p))); got != cold[i] {
			t.Fatalf("prompt %d: %q, want %q", i, got, cold[i])
		}
	}
	diskSettled(t, e, 1)
	got, res := collect(t, submit(t, e, req(prompts[0])))
	if res.Usage.CachedTokens != len(prompts[0])-1 {
		t.Errorf("the first prompt again: %d cached tokens, want %d", res.Usage.CachedTokens, len(prompts[0])-1)
	}
	if got != cold[0] {
		t.Errorf("restored from disk: %q, want %q", got, cold[0])
	}
	if st := settled(t, e, 4); st.DiskCacheHits != 1 || st.HostCacheRestored != 0 {
		t.Errorf("%d disk hits, %d host restores; want 1, 0: %+v", st.DiskCacheHits, st.HostCacheRestored, st)
	}
}

// TestDiskCacheIgnoresBadFiles: a file whose state or tokens were
// corrupted (a byte flipped), a truncated one, a crash's temporary file
// and a file another model wrote under the same name are never loaded:
// they are removed, and the prompt is evaluated as if cold.
func TestDiskCacheIgnoresBadFiles(t *testing.T) {
	model := testmodel.TinyStories656K
	req := greedy(longPrompt, 8)
	cold := alone(t, model, req)
	cfg := engine.Config{Name: "m", Parallel: 1, DiskCacheDir: t.TempDir()}
	primeDisk(t, model, cfg, req)
	files := kvFiles(t, cfg.DiskCacheDir)
	if len(files) != 1 {
		t.Fatalf("files %v, want one", files)
	}
	path := files[0]
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	flip := func(i int) func([]byte) []byte {
		return func(b []byte) []byte {
			b = slices.Clone(b)
			b[i] ^= 0x40
			return b
		}
	}
	for _, tc := range []struct {
		name    string
		damage  func([]byte) []byte
		indexed int // files the new engine indexes: damage found when read
	}{
		{"state byte flipped", flip(len(good) - 10), 1},
		{"token byte flipped", flip(138), 0},
		{"header byte flipped", flip(13), 0},
		{"truncated", func(b []byte) []byte { return b[:len(b)-100] }, 0},
		{"empty", func([]byte) []byte { return nil }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, tc.damage(good), 0o600); err != nil {
				t.Fatal(err)
			}
			e := newEngine(t, model, cfg)
			if st := e.Stats(); st.DiskCacheEntries != tc.indexed {
				t.Errorf("%d files indexed, want %d", st.DiskCacheEntries, tc.indexed)
			}
			got, res := collect(t, submit(t, e, req))
			if res.Usage.CachedTokens != 0 || got != cold {
				t.Errorf("%d cached tokens, output %q; want 0 and the cold output %q", res.Usage.CachedTokens, got, cold)
			}
			if st := settled(t, e, 1); st.DiskCacheHits != 0 || st.DiskCacheRejected != 1 {
				t.Errorf("%d hits, %d files rejected; want 0, 1", st.DiskCacheHits, st.DiskCacheRejected)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Errorf("the bad file is still there: %v", err)
			}
			e.Close() // writes the slot again
			if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, good) {
				t.Errorf("the file written again differs from the first (%d bytes, want %d): %v", len(got), len(good), err)
			}
		})
	}

	t.Run("temporary file", func(t *testing.T) {
		tmp := filepath.Join(filepath.Dir(path), ".tmp-123")
		if err := os.WriteFile(tmp, good[:len(good)/2], 0o600); err != nil {
			t.Fatal(err)
		}
		e := newEngine(t, model, cfg)
		if _, err := os.Stat(tmp); !os.IsNotExist(err) {
			t.Errorf("a crash's temporary file is still there: %v", err)
		}
		if st := e.Stats(); st.DiskCacheEntries != 1 || st.DiskCacheRejected != 0 {
			t.Errorf("%d files, %d rejected; want the good one alone", st.DiskCacheEntries, st.DiskCacheRejected)
		}
	})
}

// TestDiskCacheIgnoresAnotherModelsFiles: a file another model wrote,
// found where this model's are (the model file replaced under the same
// name), is removed, not loaded, though its tokens are all valid ids of
// this model's vocabulary.
func TestDiskCacheIgnoresAnotherModelsFiles(t *testing.T) {
	cfg := engine.Config{Name: "m", Parallel: 1, DiskCacheDir: t.TempDir()}
	// Stories260K's 512 ids are within TinyStories656K's 2,048.
	other := newEngine(t, testmodel.Stories260K, cfg)
	toks := tokens(t, other, longPrompt)
	req := engine.Request{Tokens: toks, MaxTokens: 8, IgnoreEOS: true}
	collect(t, submit(t, other, req))
	other.Close()
	files := kvFiles(t, cfg.DiskCacheDir)
	if len(files) != 1 {
		t.Fatalf("files %v, want one", files)
	}
	e := newEngine(t, testmodel.TinyStories656K, cfg)
	if st := e.Stats(); st.DiskCacheEntries != 0 || st.DiskCacheRejected != 1 {
		t.Errorf("%d files indexed, %d rejected; want 0, 1", st.DiskCacheEntries, st.DiskCacheRejected)
	}
	if _, err := os.Stat(files[0]); !os.IsNotExist(err) {
		t.Errorf("the other model's file is still there: %v", err)
	}
	if _, res := collect(t, submit(t, e, req)); res.Usage.CachedTokens != 0 {
		t.Errorf("%d cached tokens from another model's file", res.Usage.CachedTokens)
	}
}

// TestDiskCacheKeepsSaltsApart: a prefix saved for one salt is never
// served to another, after a restart as before; the salt itself appears
// in no file name or content.
func TestDiskCacheKeepsSaltsApart(t *testing.T) {
	model := testmodel.TinyStories656K
	const salt = "tenant-secret-salt"
	cfg := engine.Config{Parallel: 1, DiskCacheDir: t.TempDir()}
	primeDisk(t, model, cfg, salted(longPrompt, salt, 8))
	for _, f := range kvFiles(t, cfg.DiskCacheDir) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains([]byte(f), []byte(salt)) || bytes.Contains(b, []byte(salt)) {
			t.Errorf("%s holds the salt", f)
		}
	}
	e := newEngine(t, model, cfg)
	n := len(tokens(t, e, longPrompt))
	for i, st := range []struct {
		salt   string
		cached int
	}{{"", 0}, {"other", 0}, {salt, n - 1}} {
		_, res := collect(t, submit(t, e, salted(longPrompt, st.salt, 8)))
		if res.Usage.CachedTokens != st.cached {
			t.Errorf("request %d, salt %q: %d cached tokens, want %d", i, st.salt, res.Usage.CachedTokens, st.cached)
		}
	}
	if st := settled(t, e, 3); st.DiskCacheHits != 1 {
		t.Errorf("%d disk hits, want 1 (the salt's own request)", st.DiskCacheHits)
	}
}

// TestDiskCacheStaysWithinItsSize: the files never take more than
// Config.DiskCacheBytes; the least recently used go first, and what is
// left still restores after a restart.
func TestDiskCacheStaysWithinItsSize(t *testing.T) {
	model := testmodel.TinyStories656K
	dir := t.TempDir()
	probe := newEngine(t, model, engine.Config{Parallel: 1, DiskCacheDir: dir})
	prompts := variants(tokens(t, probe, longPrompt), 5)
	req := func(p []int32) engine.Request {
		return engine.Request{Tokens: p, MaxTokens: 8, IgnoreEOS: true}
	}
	collect(t, submit(t, probe, req(prompts[0])))
	probe.Close()
	one := probe.Stats().DiskCacheBytes
	if one == 0 {
		t.Fatal("no file written")
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}

	budget := 2*one + one/2 // room for two files
	cfg := engine.Config{Parallel: 1, DiskCacheDir: dir, DiskCacheBytes: budget}
	e := newEngine(t, model, cfg)
	for i, p := range prompts {
		collect(t, submit(t, e, req(p))) // saves the previous prompt's cache
		if i > 0 {
			diskSettled(t, e, uint64(i))
		}
		var total int64
		for _, f := range kvFiles(t, dir) {
			fi, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			total += fi.Size()
		}
		if st := e.Stats(); total > budget || st.DiskCacheBytes > budget || st.DiskCacheEntries > 2 {
			t.Fatalf("after prompt %d: %d bytes of files, %d indexed in %d entries; budget %d", i, total, st.DiskCacheBytes, st.DiskCacheEntries, budget)
		}
	}
	e.Close()
	if st := e.Stats(); st.DiskCacheSaved != 5 || st.DiskCacheEvicted != 3 || st.DiskCacheEntries != 2 {
		t.Errorf("%d saved, %d evicted, %d left; want 5, 3, 2", st.DiskCacheSaved, st.DiskCacheEvicted, st.DiskCacheEntries)
	}

	e = newEngine(t, model, cfg)
	for _, c := range []struct{ i, cached int }{{4, len(prompts[4]) - 1}, {3, len(prompts[3]) - 1}, {0, 1}} {
		_, res := collect(t, submit(t, e, req(prompts[c.i])))
		if res.Usage.CachedTokens != c.cached {
			t.Errorf("prompt %d after the restart: %d cached tokens, want %d", c.i, res.Usage.CachedTokens, c.cached)
		}
	}
	// Prompt 0 was evicted: its one cached token is BOS, the slot's.
	if st := settled(t, e, 3); st.DiskCacheHits != 2 {
		t.Errorf("%d disk hits, want 2 (prompts 4 and 3; prompt 0 was evicted)", st.DiskCacheHits)
	}
}

// TestDiskCacheDirectoryHasOneEngine: a second engine of the same model
// and name on the same directory fails to start, naming it, rather than
// share files it does not index; once the first closes, it starts.
func TestDiskCacheDirectoryHasOneEngine(t *testing.T) {
	cfg := engine.Config{Parallel: 1, DiskCacheDir: t.TempDir()}
	first := newEngine(t, testmodel.TinyStories656K, cfg)
	cfg.ModelPath = testmodel.Path(t, testmodel.TinyStories656K)
	if e, err := engine.New(t.Context(), cfg); err == nil {
		e.Close()
		t.Fatal("a second engine on the same cache directory started")
	} else if !strings.Contains(err.Error(), cfg.DiskCacheDir) || !strings.Contains(err.Error(), "held by another engine") {
		t.Errorf("error %q: want the directory named, held by another engine", err)
	}
	first.Close()
	e, err := engine.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("after the first engine closed: %v", err)
	}
	e.Close()
}

// TestDiskReadBesideTheSteps: a request whose prefix is in the disk tier
// waits for the file to be read while the steps go on: a stream decodes
// to its end while the read is held. Then the request gets its prefix
// from the file and the cold run's output. Requests cancelled while
// their files are read (as many as reads may be held) leave the next one
// its read and its prefix.
func TestDiskReadBesideTheSteps(t *testing.T) {
	model := testmodel.TinyStories656K
	req := greedy(longPrompt, 16)
	cold := alone(t, model, req)
	cfg := engine.Config{Parallel: 2, DiskCacheDir: t.TempDir()}
	primeDisk(t, model, cfg, req)

	held, started, release := engine.HoldDiskReads(cfg)
	defer release() // before the engine's Close (a cleanup), which waits for the reads
	e := newEngine(t, model, held)
	n := len(tokens(t, e, longPrompt))
	// A stream that runs until cancelled (or its slot's context is full):
	// one of 40 tokens could end before a poll sees it decode.
	ctx := context.Background()
	other := submit(t, e, engine.Request{Prompt: storyPrompt, AddSpecial: true, IgnoreEOS: true})
	waitState(t, e, other, "decode")
	r := submit(t, e, req)
	<-started
	infos, err := e.Slots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := infos[0].Decoded
	if infos[0].RequestID != other.ID() {
		before = infos[1].Decoded
	}
	poll(t, "the stream decoding 40 tokens beside a held disk read", func() (bool, string) {
		if other.Done() {
			return true, ""
		}
		infos, _ := e.Slots(ctx)
		for _, in := range infos {
			if in.RequestID == other.ID() {
				return in.Decoded >= before+40, fmt.Sprintf("%+v", infos)
			}
		}
		return false, fmt.Sprintf("%+v", infos)
	})
	other.Cancel()
	if _, res := collect(t, other); res.Usage.CompletionTokens < before+40 {
		t.Fatalf("the stream beside the read: %s after %d tokens, want %d or more (%v)", res.FinishReason, res.Usage.CompletionTokens, before+40, res.Err)
	}
	release()
	got, res := collect(t, r)
	if got != cold || res.Usage.CachedTokens != n-1 {
		t.Errorf("after the read: %q with %d cached tokens; want %q with %d", got, res.Usage.CachedTokens, cold, n-1)
	}
	e.Close()

	held, started, release = engine.HoldDiskReads(cfg)
	defer release()
	e = newEngine(t, model, held)
	for range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		s, err := e.Submit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		<-started
		cancel()
		if _, res := collect(t, s); res.FinishReason != engine.FinishCancelled {
			t.Errorf("cancelled while its file is read: %s", res.FinishReason)
		}
	}
	release()
	if got, res := collect(t, submit(t, e, req)); got != cold || res.Usage.CachedTokens != n-1 {
		t.Errorf("after the cancels: %q with %d cached tokens; want %q with %d", got, res.Usage.CachedTokens, cold, n-1)
	}
}
