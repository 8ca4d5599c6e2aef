package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/corral-llm/corral/llama"
)

// Media in prompts: an image or a sound becomes, through the model's
// projector (Config.MMProj, libmtmd), the text tokens of its markers and
// one or more chunks of embeddings. A chunk of n embeddings takes n cells
// of a slot, like n tokens; in a request's token list it is n
// placeholders, negative ids derived from the medium's ID, so every
// cache that matches token lists (a slot's, the host's, the disk's, the
// KV events' blocks) matches media by their content, with no table of
// its own. The scheduler encodes a chunk when a slot's prompt reaches it
// and evaluates its embeddings in a Decode of their own (a llama.cpp
// micro-batch holds tokens or embeddings, never both).

// Media is an image or a sound in a prompt, for a model with a
// projector (ModelInfo.Vision, ModelInfo.Audio).
type Media struct {
	// At is where it goes: a byte offset in Request.Prompt. A request's
	// media are in order of At.
	At int
	// RGB is an image of W × H pixels, 3 bytes a pixel, row by row.
	RGB  []byte
	W, H int
	// PCM is a sound: mono samples in [-1, 1] at ModelInfo.AudioSampleRate.
	PCM []float32
	// ID names the medium for the prefix cache: media of one ID are one
	// medium, whose cached evaluation a later prompt reuses. Callers pass
	// a digest of what the client sent (llama-server uses the SHA-256 of
	// the file); "" takes the SHA-256 of RGB or PCM.
	ID string
}

// ErrMedia means a request's media cannot go into its prompt: the model
// has no projector, or none for that kind of medium, or a medium is
// malformed or too large for a step.
var ErrMedia = errors.New("engine: media")

// mediaChunk is one chunk of a request's media, as the scheduler
// evaluates it: the cells [start, start+n) of the request's tokens.
type mediaChunk struct {
	start int
	chunk *llama.MediaChunk
	// embd are the chunk's embeddings once encoded, until all of them
	// are evaluated (a causal chunk may take several steps).
	embd []float32
	// encoding: the encoder is at it (the scheduler's to know); orphan:
	// its request ended meanwhile, and the chunk is freed when the
	// encoder is done with it.
	encoding, orphan bool
}

// Placeholder ids: a chunk's first cell is in [MinInt32, -2^30), the
// others in [-2^30, 0), each from a hash of the medium, the chunk's
// index in it and the cell's. Two chunks match cell for cell only when
// their media have one ID: a false match needs 30 bits per cell to
// collide. The first cell gives 17 of its bits to how the chunk's cells
// take positions (see chunkShift), so that a list of tokens alone tells
// every cell's position: a model with M-RoPE (the Qwen2-VL family) puts
// an image's cells on fewer positions than cells.
const (
	placeholderStart = math.MinInt32
	placeholderNext  = -(1 << 30)
	placeholderMask  = 1<<30 - 1
	shiftBits        = 16
	shiftMask        = 1<<shiftBits - 1
	onePositionBit   = 1 << shiftBits
)

// isPlaceholder reports whether tok stands for a cell of a medium.
func isPlaceholder(tok int32) bool { return tok < 0 }

// inChunk reports whether tok is a medium's cell after its chunk's first.
func inChunk(tok int32) bool { return tok >= placeholderNext && tok < 0 }

// placeholders appends the placeholders of the chunk of medium key
// numbered chunk: c.Tokens of them.
func placeholders(dst []int32, key [32]byte, chunk int, c *llama.MediaChunk) []int32 {
	h := binary.LittleEndian.Uint64(key[:8]) ^ uint64(chunk)*0x9e3779b97f4a7c15
	first := int32(c.Tokens - c.Positions) // <= shiftMask: mediaTokens checks
	if c.OnePosition {
		first |= onePositionBit
	}
	for i := range c.Tokens {
		v := int32(splitmix(h+uint64(i)) & placeholderMask)
		if i == 0 {
			dst = append(dst, placeholderStart+(v&^(onePositionBit|shiftMask)|first))
		} else {
			dst = append(dst, placeholderNext+v)
		}
	}
	return dst
}

// splitmix is SplitMix64's output function.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// chunkShift is how many fewer positions than cells the chunk that tok
// starts takes (an M-RoPE image's); 0 for any other token.
func chunkShift(tok int32) int {
	if tok >= placeholderNext {
		return 0
	}
	return int((tok - placeholderStart) & shiftMask)
}

// onePosition reports whether every cell of the chunk that tok starts
// takes the chunk's first position (on M-RoPE's first plane: an image's).
func onePosition(tok int32) bool {
	return tok < placeholderNext && (tok-placeholderStart)&onePositionBit != 0
}

// Positions. A cell's position is its index in its sequence less the
// shifts of the chunks before it: the position of the cell after the
// first n of toks (each chunk there whole) is posAfter(toks, n), and a
// slot keeps the sum of its cache's shifts (slot.shift) so that its
// next position is one subtraction. Without M-RoPE every shift is 0 and
// a position is an index.

// shiftOf sums the shifts of the chunks that start in toks.
func shiftOf(toks []int32) int {
	n := 0
	for _, t := range toks {
		n += chunkShift(t)
	}
	return n
}

// posAfter is the position of the cell after the first n of toks.
func posAfter(toks []int32, n int) int { return n - shiftOf(toks[:n]) }

// cellPos is the position of toks[i] (with M-RoPE, on the first plane):
// the one llama.cpp's memory keeps for its cell.
func cellPos(toks []int32, i int) int {
	if !isPlaceholder(toks[i]) {
		return posAfter(toks, i)
	}
	k := i
	for k > 0 && inChunk(toks[k]) {
		k--
	}
	if onePosition(toks[k]) {
		return posAfter(toks, k)
	}
	return posAfter(toks, k) + i - k
}

// lastPos is the position of toks' last cell, -1 for none: what
// llama.cpp's SeqPosMax says of a sequence holding toks.
func lastPos(toks []int32) int {
	if len(toks) == 0 {
		return -1
	}
	return cellPos(toks, len(toks)-1)
}

// nextPos is the position of the slot's next cell.
func (sl *slot) nextPos() int { return len(sl.cache) - sl.shift }

// pos is the position of the cell after the first n of the slot's cache.
func (sl *slot) pos(n int) int { return n - sl.shift + shiftOf(sl.cache[n:]) }

// snapMedia moves n, a number of leading tokens of toks to keep, back to
// the start of the chunk it would cut: a cache holds a medium's chunk
// whole or not at all (llama-server's rule), since the embeddings of a
// non-causal chunk depend on each other.
func snapMedia(toks []int32, n int) int {
	for n > 0 && n < len(toks) && inChunk(toks[n]) {
		n--
	}
	return n
}

// mediaKey is the medium's name in placeholders.
func mediaKey(m *Media) [32]byte {
	if m.ID != "" {
		return sha256.Sum256([]byte("id\x00" + m.ID))
	}
	h := sha256.New()
	if m.PCM != nil {
		h.Write([]byte("pcm\x00"))
		var b [4]byte
		for _, v := range m.PCM {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
			h.Write(b[:])
		}
	} else {
		fmt.Fprintf(h, "rgb\x00%d\x00%d\x00", m.W, m.H)
		h.Write(m.RGB)
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// mediaTokens tokenizes a prompt with media (req.Media) as llama.cpp's
// mtmd_tokenize does: the text between media tokenized piece by piece
// with no special tokens, BOS first and EOS last as the vocabulary wants
// (with AddSpecial, and no Prefix), and each medium as the projector
// makes it. It returns the tokens (placeholders for the media's cells)
// and the chunks, which the caller frees. The caller holds a prep token.
func (e *Engine) mediaTokens(req *Request, maxPrompt int) ([]int32, []*mediaChunk, error) {
	if len(req.Tokens) > 0 {
		return nil, nil, fmt.Errorf("%w: media go with a text prompt, not token ids", ErrMedia)
	}
	toks := slices.Clone(req.Prefix)
	if req.AddSpecial && len(req.Prefix) == 0 && e.model.AddBOS() {
		toks = append(toks, e.model.BOS())
	}
	var chunks []*mediaChunk
	fail := func(err error) ([]int32, []*mediaChunk, error) {
		freeMedia(chunks)
		return nil, nil, err
	}
	prev := 0
	for i := range req.Media {
		m := &req.Media[i]
		if m.At < prev || m.At > len(req.Prompt) {
			return fail(fmt.Errorf("%w: medium %d at byte %d, out of order or past the prompt's %d bytes", ErrMedia, i, m.At, len(req.Prompt)))
		}
		var err error
		if toks, err = e.textTokens(toks, req, prev, m.At, maxPrompt); err != nil {
			return fail(err)
		}
		prev = m.At
		pieces, err := e.tokenizeMedium(m)
		if err != nil {
			return fail(fmt.Errorf("%w: medium %d: %w", ErrMedia, i, err))
		}
		key := mediaKey(m)
		for k, pc := range pieces {
			if pc.Chunk == nil {
				toks = append(toks, pc.Tokens...)
				continue
			}
			if pc.Chunk.NonCausal && pc.Chunk.Tokens > e.cfg.BatchSize {
				llama.FreePieces(pieces[k:])
				return fail(fmt.Errorf("%w: medium %d takes %d tokens evaluated at once, more than the batch's %d", ErrMedia, i, pc.Chunk.Tokens, e.cfg.BatchSize))
			}
			if d := pc.Chunk.Tokens - pc.Chunk.Positions; d < 0 || d > shiftMask {
				llama.FreePieces(pieces[k:])
				return fail(fmt.Errorf("%w: medium %d takes %d cells over %d positions; at most %d fewer positions than cells", ErrMedia, i, pc.Chunk.Tokens, pc.Chunk.Positions, shiftMask))
			}
			chunks = append(chunks, &mediaChunk{start: len(toks), chunk: pc.Chunk})
			toks = placeholders(toks, key, k, pc.Chunk)
		}
		if len(toks) > maxPrompt {
			return fail(&PromptTooLongError{Tokens: len(toks), Max: maxPrompt})
		}
	}
	toks, err := e.textTokens(toks, req, prev, len(req.Prompt), maxPrompt)
	if err != nil {
		return fail(err)
	}
	if req.AddSpecial && e.model.AddEOS() {
		toks = append(toks, e.model.EOS())
	}
	if len(toks) > 0 && isPlaceholder(toks[len(toks)-1]) {
		return fail(fmt.Errorf("%w: the prompt ends with a medium; it must end with text", ErrMedia))
	}
	return toks, chunks, nil
}

// textTokens appends the tokens of req.Prompt[from:to], with no special
// tokens added and the Plain spans within it kept plain.
func (e *Engine) textTokens(dst []int32, req *Request, from, to, maxPrompt int) ([]int32, error) {
	if from == to {
		return dst, nil
	}
	var plain []llama.Span
	for _, sp := range req.Plain {
		if s, t := max(sp.Start, from), min(sp.End, to); s < t {
			plain = append(plain, llama.Span{Start: s - from, End: t - from})
		}
	}
	room := max(1, maxPrompt-len(dst))
	toks, err := e.model.TokenizeText(req.Prompt[from:to], llama.TokenizeOptions{ParseSpecial: req.ParseSpecial, Plain: plain, MaxTokens: room})
	var many *llama.TooManyTokensError
	switch {
	case errors.As(err, &many):
		return nil, &PromptTooLongError{Tokens: len(dst) + many.Tokens, Max: maxPrompt}
	case errors.Is(err, llama.ErrTooManyTokens):
		return nil, fmt.Errorf("%w: %v; %d tokens per request", ErrPromptTooLong, err, e.info.CtxPerRequest)
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrTokenize, err)
	}
	return append(dst, toks...), nil
}

// tokenizeMedium preprocesses one medium with the projector.
func (e *Engine) tokenizeMedium(m *Media) ([]llama.MediaPiece, error) {
	switch {
	case e.proj == nil:
		return nil, fmt.Errorf("model %s takes no images or audio: it has no projector (--mmproj)", e.info.Name)
	case m.RGB != nil && m.PCM != nil:
		return nil, errors.New("both an image and a sound")
	case m.RGB != nil && !e.info.Vision:
		return nil, fmt.Errorf("model %s takes no images", e.info.Name)
	case m.RGB != nil:
		return e.proj.TokenizeImage(m.RGB, m.W, m.H)
	case m.PCM != nil && !e.info.Audio:
		return nil, fmt.Errorf("model %s takes no audio", e.info.Name)
	case m.PCM != nil:
		return e.proj.TokenizeAudio(m.PCM)
	}
	return nil, errors.New("neither an image nor a sound")
}

// freeMedia frees the chunks' preprocessed data; one the encoder is at
// is freed when it is done (see encodedChunk).
func freeMedia(chunks []*mediaChunk) {
	for _, c := range chunks {
		c.embd = nil
		if c.encoding {
			c.orphan = true
			continue
		}
		c.chunk.Free()
	}
}

// chunkHolding is the request's chunk whose cells include cell i, or nil.
func (r *request) chunkHolding(i int) *mediaChunk {
	k := sort.Search(len(r.media), func(k int) bool { return r.media[k].start > i })
	if k > 0 && i < r.media[k-1].start+r.media[k-1].chunk.Tokens {
		return r.media[k-1]
	}
	return nil
}

// mediaJob is a step's evaluation of media embeddings: n cells of a
// slot's chunk from cell off of it, at positions pos
// (llama.Projector.Positions). It runs before the step's token batch.
type mediaJob struct {
	sl       *slot
	c        *mediaChunk
	off, n   int
	pos      []int32
	causalNo bool
}

// The encoder runs beside the scheduler, on its own goroutine: an encode
// is one graph that cannot be split across steps, and a vision encoder
// takes seconds on a CPU, so the slots that do not wait for it go on
// decoding meanwhile (the two share the cores) rather than stall. One
// chunk is encoded at a time, the first in service order that an
// admitted prompt has not evaluated yet, possibly ahead of the prompt's
// text before it. The scheduler owns the goroutine: it starts one per
// encode, which ends by sending its result on s.encoded, and it waits for
// the last at shutdown.

// encoderThreads are the threads the projector's encoder computes with:
// half the engine's, since it runs beside the steps, which compute with
// the other half meanwhile (two sets of ggml's spinning threads on the
// same cores slow each other down many times over); all of them when the
// scheduler waits for it (InlineEncoder).
func (cfg Config) encoderThreads() int {
	if cfg.inlineEncode {
		return cfg.Threads
	}
	return max(1, cfg.Threads/2)
}

// encodeResult is an encode's outcome.
type encodeResult struct {
	c    *mediaChunk
	embd []float32
	err  error
	took time.Duration
}

// encodePass starts the encode of the next chunk, if none is running.
func (s *scheduler) encodePass() {
	if s.encoding != nil {
		return
	}
	var target *slot
	var c *mediaChunk
	for _, sl := range s.slots {
		if sl.state != statePrefill || (target != nil && before(sl.req, target.req) >= 0) {
			continue
		}
		if mc := sl.req.nextChunk(len(sl.cache)); mc != nil {
			target, c = sl, mc
		}
	}
	if target == nil {
		return
	}
	s.encoding, c.encoding = c, true
	if t := s.e.cfg.Threads - s.e.cfg.encoderThreads(); t > 0 && !s.e.cfg.inlineEncode {
		s.lctx.SetThreads(t) // the encoder has the others
	}
	ctx, proj := target.req.ctx, s.e.proj
	go func() {
		start := time.Now()
		embd, err := proj.Encode(ctx, c.chunk, nil)
		s.encoded <- encodeResult{c: c, embd: embd, err: err, took: time.Since(start)}
	}()
	if s.e.cfg.inlineEncode {
		s.encodedChunk(<-s.encoded)
	}
}

// nextChunk is the first of r's chunks at or after cell i that is not
// encoded nor being encoded; nil when none is.
func (r *request) nextChunk(i int) *mediaChunk {
	for _, c := range r.media {
		if c.start+c.chunk.Tokens > i && c.embd == nil && !c.encoding {
			return c
		}
	}
	return nil
}

// encodedChunk takes an encode's result: the chunk's embeddings, or the
// end of the request whose chunk the encoder could not encode. A chunk
// of a request that ended meanwhile is freed now.
func (s *scheduler) encodedChunk(res encodeResult) {
	c := res.c
	s.encoding, c.encoding = nil, false
	s.lctx.SetThreads(s.e.cfg.Threads)
	s.mediaEncodeTime += res.took
	if c.orphan {
		c.chunk.Free()
		return
	}
	switch {
	case errors.Is(res.err, llama.ErrEncodeCancelled):
		// retire ends the request.
	case res.err != nil:
		for _, sl := range s.slots {
			if sl.active() && slices.Contains(sl.req.media, c) {
				s.finish(sl, FinishError, fmt.Errorf("%w: %w", ErrMedia, res.err))
			}
		}
	default:
		c.embd = res.embd
		s.mediaEncoded++
	}
}

// waitsForEncoder reports whether the slot's prompt has reached a chunk
// not encoded yet: it has nothing to evaluate until the encoder is done.
func (s *scheduler) waitsForEncoder(sl *slot) bool {
	if sl.state != statePrefill || len(sl.pending) == 0 || !isPlaceholder(sl.pending[0]) {
		return false
	}
	c := sl.req.chunkHolding(len(sl.cache))
	return c != nil && c.embd == nil
}

// addMedia puts the chunk the slot's pending cells start in into the
// step, limit cells at most, if it is encoded and the step has no other
// medium. A non-causal chunk goes whole or not at all: when it is over
// limit (the prompts' share of a step while streams decode) it takes up
// to room (what the step has left), else it would wait for every stream
// to end; the step is then a prompt step's length, and the prefill
// budget, which counts its cells, shortens the next ones. It returns the
// cells taken.
func (s *scheduler) addMedia(sl *slot, limit, room int) int {
	if s.media.sl != nil || len(sl.pending) == 0 || !isPlaceholder(sl.pending[0]) {
		return 0
	}
	c := sl.req.chunkHolding(len(sl.cache))
	if c == nil || c.embd == nil {
		return 0
	}
	off := len(sl.cache) - c.start
	if c.chunk.NonCausal && c.chunk.Tokens > limit {
		limit = room
	}
	n := min(c.chunk.Tokens-off, limit, len(sl.pending))
	if n <= 0 || (c.chunk.NonCausal && (off != 0 || n < c.chunk.Tokens)) {
		return 0
	}
	pos := s.e.proj.Positions(c.chunk, sl.pos(c.start), off, n)
	s.media = mediaJob{sl: sl, c: c, off: off, n: n, pos: pos, causalNo: c.chunk.NonCausal}
	for _, tok := range sl.pending[:n] {
		s.appendToken(sl, tok)
	}
	sl.pending = sl.pending[n:]
	sl.inBatch = true
	return n
}

// decodeMedia evaluates the step's media embeddings, if any.
func (s *scheduler) decodeMedia() error {
	j := s.media
	if j.sl == nil {
		return nil
	}
	s.media = mediaJob{}
	width := s.e.model.NEmbdInput()
	if j.causalNo {
		s.lctx.SetCausalAttn(false)
		defer s.lctx.SetCausalAttn(true)
	}
	if err := s.lctx.DecodeEmbd(j.c.embd[j.off*width:(j.off+j.n)*width], j.n, j.pos, j.sl.id); err != nil {
		return err
	}
	if j.off+j.n == j.c.chunk.Tokens {
		j.c.embd = nil // evaluated: a preemption encodes it again if it must
	}
	return nil
}
