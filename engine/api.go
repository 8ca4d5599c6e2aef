// Package engine runs continuous batching over one llama.cpp model.
//
// One scheduler goroutine per Engine owns the model context, the KV cache,
// the slots and the samplers. Everything else talks to it through messages:
// Submit enqueues (it never waits on the model), cancellation is observed by
// the scheduler at the next step boundary, and results are delivered into a
// per-request mailbox that never blocks the scheduler.
package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/corral-llm/corral/llama"
)

// Errors returned by Submit. Callers branch on them with errors.Is.
var (
	// ErrQueueFull means the bounded waiting queue has no room; retry later.
	ErrQueueFull = errors.New("engine: queue full")
	// ErrQueueTimeout means the request waited longer than Config.MaxQueueWait.
	ErrQueueTimeout = errors.New("engine: queue timeout")
	// ErrClosed means the engine is shutting down or closed.
	ErrClosed = errors.New("engine: closed")
	// ErrPromptTooLong means the prompt does not fit in a slot's context
	// (the error is a *PromptTooLongError, with the counts, but for a
	// text over 1 GiB, which is not tokenized).
	ErrPromptTooLong = errors.New("engine: prompt longer than the context")
	// ErrEmptyPrompt means the request has no prompt tokens at all.
	ErrEmptyPrompt = errors.New("engine: empty prompt")
	// ErrBadSlot means Request.SlotID names a slot that does not exist.
	ErrBadSlot = errors.New("engine: no such slot")
	// ErrGrammar means the request's grammar could not be parsed, exceeds
	// a limit (see grammar.DefaultLimits), or the vocabulary cannot write
	// its start (then the error wraps an *UnsatisfiableError too).
	ErrGrammar = errors.New("engine: invalid grammar")
	// ErrGrammarUnsatisfiable means the model's vocabulary cannot write
	// what the request's grammar requires: Submit's error when no tokens
	// write the text the grammar starts with, Result.Err (FinishError)
	// when the answer reached a point of the grammar that no token
	// continues. Such errors are *UnsatisfiableError.
	ErrGrammarUnsatisfiable = errors.New("engine: the model's vocabulary cannot write what the grammar requires")
	// ErrTokenize means the text has characters the model's vocabulary
	// cannot encode and the vocabulary has no unknown token to stand for
	// them.
	ErrTokenize = errors.New("engine: text cannot be tokenized")
	// ErrBadToken means a token id is outside the vocabulary.
	ErrBadToken = errors.New("engine: bad token id")
	// ErrBadChunking means Request.Chunking has a negative bound.
	ErrBadChunking = errors.New("engine: invalid chunking")
	// ErrNotEmbedding means Embed was called on an engine whose pooling
	// is none (or rank): the model gives no sequence embedding.
	ErrNotEmbedding = errors.New("engine: the model does not embed: its pooling is none")
	// ErrTooManyInputs means Embed got more than MaxEmbedInputs inputs.
	ErrTooManyInputs = errors.New("engine: too many inputs")
	// ErrBadLogprobs means Request.TopLogprobs is outside [0,
	// MaxTopLogprobs], or logprobs were asked of a paced request.
	ErrBadLogprobs = errors.New("engine: invalid logprobs request")
	// ErrNoToken (in Result.Err) means no token could be sampled: the
	// request's grammar or logit biases exclude every token of the
	// vocabulary at that point of the answer.
	ErrNoToken = llama.ErrSample
	// ErrBadReasoning means Request.Reasoning or Request.ShowTokens is
	// out of bounds (see MaxMarker).
	ErrBadReasoning = errors.New("engine: invalid reasoning budget")
)

// PromptTooLongError is the error of a prompt (or an embedding input)
// longer than a request may be: Tokens, its exact count, more than Max,
// the most it may have. A generation's prompt may have the context per
// request (ModelInfo.CtxPerRequest) less one token, the cell of the
// first generated token; an embedding input EmbedMaxTokens. It wraps
// ErrPromptTooLong.
type PromptTooLongError struct {
	Tokens, Max int
}

// Error names the counts.
func (e *PromptTooLongError) Error() string {
	return fmt.Sprintf("%v: %d tokens, at most %d", ErrPromptTooLong, e.Tokens, e.Max)
}

// Unwrap returns ErrPromptTooLong, for errors.Is.
func (e *PromptTooLongError) Unwrap() error { return ErrPromptTooLong }

// MaxMarker bounds the markup a request names: the bytes of
// Reasoning.Start and Reasoning.End, the tokens of Reasoning.Close, and
// the entries of Request.ShowTokens.
const MaxMarker = 256

// UnsatisfiableError is the error of a grammar the model's vocabulary
// cannot write (see ErrGrammarUnsatisfiable, which it wraps).
type UnsatisfiableError struct {
	// Reason says what the grammar requires that no token writes, in
	// words for a person.
	Reason string
}

// Error is ErrGrammarUnsatisfiable's message and the reason.
func (e *UnsatisfiableError) Error() string { return ErrGrammarUnsatisfiable.Error() + ": " + e.Reason }

// Unwrap returns ErrGrammarUnsatisfiable, for errors.Is.
func (e *UnsatisfiableError) Unwrap() error { return ErrGrammarUnsatisfiable }

// MaxTopLogprobs bounds Request.TopLogprobs.
const MaxTopLogprobs = llama.MaxTopLogprobs

// MaxEmbedInputs bounds the inputs of one Embed call, as OpenAI's
// embeddings endpoint does.
const MaxEmbedInputs = 2048

// EmbedInputError is an Embed error about one input: Err (ErrEmptyPrompt,
// ErrPromptTooLong, ErrBadToken or ErrTokenize) at index Index.
type EmbedInputError struct {
	Index int
	Err   error
}

// Error names the input and the fault.
func (e *EmbedInputError) Error() string { return fmt.Sprintf("input %d: %v", e.Index, e.Err) }

// Unwrap returns the fault, for errors.Is.
func (e *EmbedInputError) Unwrap() error { return e.Err }

// EmbedInput is one input of Embed: token ids used as given when Tokens
// is non-empty, else Text, tokenized with the model's special tokens
// (BOS, and EOS or SEP where the vocabulary adds them) but without
// parsing special-token text.
type EmbedInput struct {
	Text   string
	Tokens []int32
}

// Embeddings is what Embed returns.
type Embeddings struct {
	// Vectors holds one embedding per input, in input order: the pooled
	// output normalized to unit L2 length (a zero vector stays zero),
	// ModelInfo.EmbeddingSize values each.
	Vectors [][]float32
	// Tokens counts the tokens of all inputs, each evaluated once.
	Tokens int
}

// DefaultPauseTimeout is how long a paced request waits for Continue
// when Request.PauseTimeout is 0.
const DefaultPauseTimeout = 30 * time.Second

// DefaultPauseGrace is Config.PauseGrace's default: a client that
// continues within about a sentence of speech keeps its slot, and a
// request of a worse class waits at most that long for a paused slot.
// Lending costs the paused answer a restore from host memory (or its
// history evaluated again without a host cache), never a token.
const DefaultPauseGrace = 3 * time.Second

// DefaultMaxQueueWait is Config.MaxQueueWait's default: long enough to
// ride out a burst (hundreds of queued requests on a few slots), short
// enough that a client of a server that cannot keep up gets a 503 it can
// retry elsewhere before its own timeout (the OpenAI SDKs wait 10
// minutes) rather than a request that never ends.
const DefaultMaxQueueWait = 5 * time.Minute

// DefaultDiskCloseTimeout is Config.DiskCloseTimeout's default: as long
// as corral serve lets running requests finish after SIGTERM by default
// (its --shutdown-timeout, which it passes here), so that a stop takes at
// most twice that.
const DefaultDiskCloseTimeout = 10 * time.Second

// Config describes one engine: which model, how many slots, how much context.
type Config struct {
	// ModelPath is the GGUF file to load.
	ModelPath string
	// Name is the model id reported by the API; defaults to the file name.
	Name string
	// MMProj is a multimodal projector for the model (an "mmproj" GGUF),
	// loaded with llama.cpp's libmtmd on the CPU: the model then takes the
	// images or sounds it encodes (Request.Media). "" for none.
	MMProj string
	// CtxSize is the total KV cache size in tokens, one pool the slots
	// share (llama-server's -c). 0 means the model's training context (at
	// most 4,096) per slot.
	CtxSize int
	// CtxPerRequest is the most context one request may use, its prompt
	// and its output, while the pool has free cells: 0 means the model's
	// training context, or an equal share of the pool (CtxSize/Parallel)
	// when that is more; it is at most the pool (with KVPerSlot, a slot's
	// buffer).
	CtxPerRequest int
	// Parallel is the number of slots (sequences decoded together). Default 4.
	Parallel int
	// Threads is the number of CPU threads for compute. Default: all cores.
	Threads int
	// BatchSize is the per-step token budget (decode tokens + prefill chunks).
	// Default 512.
	BatchSize int
	// PrefillBudget bounds the prompt tokens evaluated in a step while
	// other slots are decoding, so that a long prompt does not stall every
	// running stream for the time of a whole batch: on a CPU a prompt
	// token costs about as much as a decode step for a few streams.
	// Within the bound the scheduler measures step times and keeps a step
	// with prompt tokens at about twice a decode-only step (a prompt of a
	// better priority class than every decoding stream is exempt); each
	// prompt waiting after the first adds PrefillBudget tokens, so that a
	// burst of arrivals is evaluated in large steps.
	// Without decoding slots prefill takes the whole BatchSize.
	// Default DefaultPrefillBudget; negative means no separate budget.
	PrefillBudget int
	// MaxQueue bounds the number of requests waiting for a slot. Default 256.
	MaxQueue int
	// MaxQueueWait fails a request that waited this long for a slot with
	// ErrQueueTimeout (a preempted request, admitted before, does not
	// time out). 0 means DefaultMaxQueueWait; negative means no limit.
	MaxQueueWait time.Duration
	// PauseGrace is how long a paused request (Request.Chunking) keeps
	// its slot from waiting requests of a worse class. A request of its
	// class or a better one that finds no free slot may take the slot at
	// once; after the grace a request of any class may. The paused
	// request loses nothing: its history is saved to the host cache and
	// it resumes in a slot once continued, as a preempted request does.
	// 0 means DefaultPauseGrace; negative means no grace.
	PauseGrace time.Duration
	// MaxTokensDefault applies when a request does not set MaxTokens
	// (0: until the slot's context is full).
	MaxTokensDefault int
	// KVPerSlot gives each slot a buffer of its own, an equal share of
	// CtxSize (llama.cpp's kv_unified off, as llama-server has with -np),
	// in place of one pool the slots share. A sequence's cells then lie
	// at the start of its buffer in position order whatever ran before,
	// so a prompt at temperature 0 gives the same answer, to the bit, on a
	// fresh engine and on a long-running one (llama.cpp's CPU attention
	// sums cells in tiles at fixed offsets, and splits a lone decode
	// token's cells by their count). The price: a request may use only
	// its slot's share; slots share no cells (a prefix is copied from
	// another slot, never held by both); and a step that mixes prompt
	// chunks with decode tokens takes several forward passes, one per
	// length of the sequences' parts. A hybrid model (attention and a
	// recurrent state) that speculates with rollback copies
	// (Speculation.Recurrent, Speculation.MTP) always has it: llama.cpp
	// keeps the copies valid only when it splits batches by consecutive
	// sequences, which it does with a buffer per slot.
	KVPerSlot bool
	// NoFlashAttn turns llama.cpp's flash-attention kernel off (see
	// llama.ContextParams.NoFlashAttn): on a CPU, prompts evaluated over a
	// long cached prefix get faster, decoding slower.
	NoFlashAttn bool
	// CacheTypeK and CacheTypeV are the element types of the KV cache's
	// keys and values (llama-server's --cache-type-k and --cache-type-v):
	// one of llama.CacheTypeNames, "" for f16. A quantized type (q8_0,
	// q4_0, ...) takes less memory a cell than f16 (q8_0 about half,
	// q4_0 about a quarter) and changes the output a little; a quantized
	// V needs flash attention, and a quantized type heads that are whole
	// blocks of 32 values. New and EstimateMemory refuse what llama.cpp
	// cannot run, with an error wrapping llama.ErrCacheType.
	CacheTypeK, CacheTypeV string
	// HostCacheBytes is the host memory kept for the KV state of prefixes
	// pushed out of the slots, so that a returning conversation need not
	// evaluate its history again (llama-server's --cache-ram), and for
	// the checkpoints of recurrent and sliding-window state (see
	// checkpoint.go): both within it together, the least recently used
	// of either going first. 0: none.
	HostCacheBytes int64
	// DiskCacheDir, when set, is where the KV states of prefixes pushed
	// out of the host cache, and at Close those of the host cache and
	// the slots, are kept on disk, to be found again by a prefix match
	// after an unload or a restart (see disk.go); each model and KV
	// layout has a directory of its own in it. "": no disk tier.
	DiskCacheDir string
	// DiskCacheBytes bounds the files of this model under DiskCacheDir;
	// the least recently used go first. 0 means DefaultDiskCacheBytes.
	DiskCacheBytes int64
	// DiskCloseTimeout bounds how long Close spends writing what the
	// slots and the host cache hold to the disk tier: the states not
	// written by then are dropped (Stats.DiskCacheDropped), and a file
	// being written is given up within 8 MiB of writing (or, when its
	// sync to disk had begun, once that ends). 0 means
	// DefaultDiskCloseTimeout; negative means no limit.
	DiskCloseTimeout time.Duration
	// KVEvents, when set, is told what the prefix caches hold, block by
	// block, as llm-d's KV events (see kvevents.go): a batch after each
	// step that changed it, and at Close that nothing is held.
	KVEvents KVEventSink
	// Pooling is how Embed pools a sequence's token embeddings into one
	// vector (llama-server's --pooling): "mean", "cls" (the first
	// token), "last", or "none" (the engine cannot embed: Embed returns
	// ErrNotEmbedding). "" takes what the GGUF declares
	// (<arch>.pooling_type), none when it declares nothing, as plain
	// language models do. A pooling other than none costs BatchSize
	// more KV cells and an output buffer for BatchSize tokens' logits
	// and embeddings (see EstimateMemory).
	Pooling string
	// CPU, when set, is shared with the other engines of the process:
	// each forward pass holds Threads of its cores (see CPU). nil: the
	// engine computes whenever it has work.
	CPU *CPU
	// JumpForward says how text a request's grammar leaves no choice of
	// (the markup of a tool call, the keys of a JSON object) is
	// evaluated: JumpForce (the default, ""), JumpConfirm or JumpOff.
	// Models with a recurrent state jump forward only over text written
	// for the request (JumpForce; not with JumpConfirm).
	JumpForward JumpMode
	// Speculate drafts tokens for decoding requests to evaluate beside
	// their sampled token in the same forward pass, each kept only where
	// the request samples it (speculative decoding; see Speculation).
	// The zero value drafts nothing.
	Speculate Speculation
	// Offload puts layers of the model on GPUs through ggml's backend
	// libraries (llama-server's -ngl, --device, --split-mode,
	// --tensor-split and --main-gpu; see llama.Offload). The zero value
	// computes on the CPU.
	Offload llama.Offload

	// cutDraft, set by tests (export_test.go), ends a draft after the
	// drafted token at index i is taken, as if the model had not
	// confirmed the next: a rejection whose output is unchanged.
	cutDraft func(i int) bool
	// draftAlways, set by tests (export_test.go), drafts wherever a
	// draft is found, whatever the measured cost (draftCost) says, so
	// that which steps draft does not depend on timing.
	draftAlways bool
	// drafted, set by tests (export_test.go), sees each speculative draft
	// as it is evaluated, the position of its first token, whether the
	// drafter (a draft model or the MTP head) drafted it, and the step's
	// decoding slots (on the scheduler goroutine).
	drafted func(pos int, draft []int32, model bool, decoding int)
	// beforeDiskRead, set by tests (export_test.go), runs on the reading
	// goroutine before each disk-tier read for a waiting request.
	beforeDiskRead func()
	// inlineEncode, set by benchmarks (export_test.go), has the
	// scheduler wait for each encode, as llama-server's loop does.
	inlineEncode bool
}

// JumpMode is how the engine evaluates the text a grammar forces
// (Config.JumpForward). In every mode but JumpOff, the step that
// evaluates a sampled token also evaluates, after it, the tokens that
// write the text the grammar requires next (cut into the tokens with the
// longest text): one forward pass for a run that took one per token.
type JumpMode string

const (
	// JumpForce writes the forced text in those tokens: they are taken
	// as the model's output without sampling, and the model samples again
	// after them. Where a draft did not reach (a step without room, the
	// evaluation after a preemption), the forced text is written the same
	// way, a token a step, so the output does not depend on batching. The text is what the grammar forces, whatever the mode;
	// the tokens may differ from those the model would have chosen to
	// write it (it may spell markup byte by byte), and so may what it
	// writes after. A request with logprobs or a reasoning budget is
	// served as with JumpConfirm.
	JumpForce JumpMode = "force"
	// JumpConfirm samples at each drafted token in turn, for as long as
	// the model samples the token drafted there; the first it does not
	// ends the run. Every token is still sampled from logits computed
	// over the same tokens: with Q8_0 weights and flash attention
	// (llama.cpp's default on a CPU) they are those of one token at a
	// time bit for bit, so the output is that of plain decoding; with F32
	// weights, or without flash attention, they may differ in the last
	// bits (as a prompt's do with the batch size), and so, rarely, a
	// token. It saves steps only where the model writes the text in the
	// drafted tokens.
	JumpConfirm JumpMode = "confirm"
	// JumpOff evaluates the forced text one token per step.
	JumpOff JumpMode = "off"
)

// ParseJumpMode returns the mode named s ("" is JumpForce).
func ParseJumpMode(s string) (JumpMode, error) {
	switch m := JumpMode(s); m {
	case "":
		return JumpForce, nil
	case JumpForce, JumpConfirm, JumpOff:
		return m, nil
	}
	return "", fmt.Errorf("jump-forward mode %q: want force, confirm or off", s)
}

// Request is one generation. Prompt is tokenized by Submit in the caller's
// goroutine unless Tokens is already set.
type Request struct {
	// Prompt is the text to continue. Ignored when Tokens is non-empty.
	Prompt string
	// Tokens is the prompt as token ids, used as given.
	Tokens []int32
	// Media are images and sounds in Prompt, each at its byte offset,
	// for a model with a projector (Config.MMProj). Not with Tokens.
	Media []Media
	// Prefix are token ids that come before Prompt, which is then
	// tokenized without BOS (AddSpecial applies to nothing): a
	// conversation continued from a Result.History. Ignored when Tokens
	// is set.
	Prefix []int32
	// AddSpecial adds BOS (and whatever the model's vocab wants) when
	// tokenizing Prompt. ParseSpecial parses special-token text like <s>.
	AddSpecial, ParseSpecial bool
	// Plain are byte ranges of Prompt, sorted and disjoint, that are
	// tokenized as plain text even with ParseSpecial: text a client wrote
	// (chat message contents), so that "<|im_end|>" typed by a user cannot
	// become a control token while the template's own markers do.
	Plain []Span
	// MaxTokens limits the generated tokens; 0 uses Config.MaxTokensDefault.
	MaxTokens int
	// Sampling selects the sampler chain.
	Sampling Sampling
	// Stop strings end the generation; the matched text is not returned.
	Stop []string
	// IgnoreEOS keeps generating past end-of-generation tokens.
	IgnoreEOS bool
	// Grammar is an optional GBNF grammar (root rule "root") constraining output.
	Grammar string
	// NoCachePrompt disables reuse of the slot's cached prefix.
	NoCachePrompt bool
	// PinSlot runs the request in slot SlotID only (llama.cpp's id_slot);
	// otherwise the scheduler picks the free slot whose cache loses least.
	PinSlot bool
	SlotID  int
	// Priority is the request's class, vLLM's meaning: a lower value is
	// served first; 0 is the default. Within a class requests start in
	// arrival order. A waiting request may preempt a running one of a worse
	// (higher) class when no slot is free; the preempted one resumes later
	// where it stopped, with no token lost.
	Priority int
	// Chunking, when set, paces the output for a voice agent: text is
	// delivered in sentence-sized chunks (Chunk.Index), and after each
	// chunk but the last the request is paused (Chunk.Held) — it keeps
	// its slot, KV cache and sampler but takes no part in batches —
	// until Stream.Continue (a waiting request may borrow the slot
	// meanwhile: see Config.PauseGrace). Nothing is evaluated twice:
	// the token that starts the next sentence was sampled, and is
	// evaluated on Continue.
	Chunking *Chunking
	// Logprobs asks for each generated token's log-probability, delivered
	// with its text (Chunk.Logprobs), and TopLogprobs (0 to
	// MaxTopLogprobs; ignored without Logprobs) for that many of the most
	// likely tokens at each step. Not for paced requests. When not asked
	// for, nothing is computed. See TokenLogprobs for what the values are.
	Logprobs    bool
	TopLogprobs int
	// PauseTimeout ends a paced request that waited this long for
	// Continue, with FinishPauseTimeout; its tokens stay cached, so a
	// re-sent prompt is cheap. 0 means DefaultPauseTimeout.
	PauseTimeout time.Duration
	// ShowTokens are special tokens whose text is output: the markup a
	// model writes as control tokens ([TOOL_CALLS], <|channel|>), which
	// the caller's parsers read. Other special tokens output nothing.
	ShowTokens []int32
	// Reasoning says where the model's reasoning is, to count its tokens
	// (Usage.ReasoningTokens) and to bound them apart from MaxTokens;
	// nil: none is counted or bounded.
	Reasoning *Reasoning
	// CacheSalt partitions the prefix cache: a request reuses cached KV
	// (a slot's, another slot's cells, the host cache's) only of requests
	// with the same salt, so Usage.CachedTokens, and the time a prompt
	// takes, tell nothing about the prompts of requests with another
	// salt. The salt is part of the cache key, never of the prompt: it
	// costs no evaluation. "" is a salt like any other (the default
	// tenant). It is compared as given: callers should pass a short
	// digest (package openai passes a SHA-256).
	CacheSalt string
}

// Chunking sets where paced output is cut into chunks (see
// Request.Chunking). A chunk ends at the end of a sentence (., !, ?, …
// and the CJK forms, with any closing quotes or brackets), decided with
// one token of look-ahead, but not after an abbreviation, an initial, a
// decimal point or a list number; a newline also ends one. Zero fields
// take the defaults.
type Chunking struct {
	// FirstMinTokens: the first chunk has at least this many tokens
	// (default 10), so that "Hi!" does not make a chunk of its own.
	FirstMinTokens int
	// FirstMaxTokens: the first chunk ends after at most this many tokens,
	// at a word boundary, even without punctuation (default 24): time to
	// first audio stays bounded.
	FirstMaxTokens int
	// MaxChars: any chunk ends, at a word boundary, once it is this many
	// bytes long (default 300).
	MaxChars int
}

// Reasoning is where a request's reasoning is, and its budget of tokens
// (Request.Reasoning). The reasoning opens at once when the prompt
// opened it (Open), else where the output writes Start; it closes where
// the output writes End, and may open again. The tokens generated from
// the one whose output completes Start (or from the first, when the
// prompt opened it) through the one that completes End are its tokens,
// counted in Usage.ReasoningTokens. With a Budget (>= 0), once Budget
// tokens were generated inside it and it is still open, the engine
// writes Close for the model: its tokens are output and evaluated one
// per step as if sampled (the grammar, when there is one, must allow
// them; one that does not ends the budget), Close's text closes the
// reasoning (it holds End), and the answer goes on from there. The
// tokens count toward MaxTokens like any other.
type Reasoning struct {
	Budget     int // tokens; negative: none (the tokens are only counted)
	Open       bool
	Start, End string
	Close      []int32 // needed with a Budget
}

// Span is a byte range [Start, End) of a prompt.
type Span = llama.Span

// Sampling are the sampler settings. The zero value is greedy decoding.
type Sampling struct {
	Temperature      float32 // <= 0: greedy
	TopK             int     // 0: disabled
	TopP             float32 // 0 or 1: disabled
	MinP             float32 // 0: disabled
	TypicalP         float32 // 0 or 1: disabled
	RepeatPenalty    float32 // 0 or 1: disabled
	FrequencyPenalty float32
	PresencePenalty  float32
	// RepeatLastN is the penalty window in tokens: -1 the slot's context,
	// 0 no penalties; larger values are clamped to the slot's context.
	RepeatLastN int
	// Seed seeds the draw; negative means a random seed.
	Seed int64
	// LogitBias adds a bias to the given token ids.
	LogitBias map[int32]float32
}

// FinishReason says why a generation ended, in OpenAI's words.
type FinishReason string

// Finish reasons.
const (
	FinishStop      FinishReason = "stop"      // EOG token, a stop string, or a grammar that is complete
	FinishLength    FinishReason = "length"    // max tokens or context full
	FinishCancelled FinishReason = "cancelled" // the request's context ended
	FinishError     FinishReason = "error"     // see Result.Err
	// FinishInterrupted: Stream.Interrupt ended it (a user barged in);
	// its KV cache keeps only what was spoken.
	FinishInterrupted FinishReason = "interrupted"
	// FinishPauseTimeout: a paced request waited longer than its
	// PauseTimeout for Continue.
	FinishPauseTimeout FinishReason = "pause_timeout"
)

// Chunk is one delivery of generated text. When the reader is slower than
// the scheduler, several tokens are coalesced into one chunk.
//
// A paced request (Request.Chunking) gets each chunk whole and alone:
// Index counts them from 0, Held says the request is paused after it
// until Stream.Continue(Index), and Last marks the final one.
type Chunk struct {
	Text   string
	Tokens int // number of tokens this chunk covers
	Index  int
	Held   bool
	Last   bool
	// Logprobs (with Request.Logprobs) has an entry for each generated
	// token whose text begins in this chunk's Text or in an earlier
	// one's: a token's entry comes with its first released byte.
	Logprobs []TokenLogprobs
}

// TokenLogprob is a token, its text and its log-probability (natural
// logarithm).
type TokenLogprob struct {
	Token int32
	// Text is the token's bytes as they would appear in the output (a
	// control token's is empty); it may be part of a UTF-8 character.
	Text    string
	Logprob float32
}

// TokenLogprobs is one generated token's log-probability and the most
// likely tokens of that step (Request.TopLogprobs of them, most likely
// first; fewer when the filters left fewer candidates).
//
// The values are the log-softmax of the distribution the token was drawn
// from, after the sampler's filter chain (see llama.Sampler.SampleLogprobs),
// as llama-server's post_sampling_probs: with a temperature they reflect
// the truncation (top-k, top-p, min-p, typical) and the temperature, and
// tokens outside the kept candidates do not appear; greedy decoding keeps
// every token, so there (without logit biases or penalties) they are the
// log-softmax of the model's logits, and the token is Top[0].
//
// Entries are per generated token, the end-of-generation token excepted
// (it is not part of the output). When a stop string matches, the tokens
// whose text begins at or after the match are dropped with the text; a
// token that straddles the match keeps its entry (and its whole Text),
// since part of its text was returned.
type TokenLogprobs struct {
	TokenLogprob
	Top []TokenLogprob
}

// Usage counts tokens as OpenAI reports them.
type Usage struct {
	PromptTokens     int
	CachedTokens     int // prompt tokens reused from a KV cache of the request's CacheSalt
	CompletionTokens int
	// ReasoningTokens counts the completion tokens of the reasoning
	// (see Reasoning), 0 without Request.Reasoning.
	ReasoningTokens int
	// EvaluatedTokens counts the tokens the request put through the model:
	// the uncached prompt, then one per generated token but the last
	// (plus a preempted request's history, when it had to be evaluated
	// again, and the tokens jump-forward decoding evaluated that the
	// model did not write: see Config.JumpForward).
	EvaluatedTokens int
	// ReevaluatedTokens counts the prompt (or history) tokens evaluated
	// beyond the uncached prompt: 0 unless a preempted request's history
	// had to be evaluated again. A paced request pausing adds nothing.
	ReevaluatedTokens int
}

// Timings are per-request measurements taken by the scheduler.
type Timings struct {
	Submitted       time.Time     // when Submit enqueued it
	Queued          time.Duration // submit → admitted to a slot (first admission)
	Prefill         time.Duration // admitted → last prompt token evaluated
	TTFT            time.Duration // submit → first generated token
	Decode          time.Duration // first token → finish
	Total           time.Duration // submit → finish
	TokensPerSecond float64       // generated tokens / (Decode - Held)
	FirstChunk      time.Duration // paced: submit → first chunk delivered
	Held            time.Duration // paced: time spent paused waiting for Continue
}

// Result is the final state of a request, available after the stream ends.
type Result struct {
	FinishReason FinishReason
	StopWord     string // the stop string that matched, if any
	Usage        Usage
	Timings      Timings
	Slot         int   // the slot it finished in; -1 if none
	Preemptions  int   // times it was preempted for a request of a better class
	Chunks       int   // paced: chunks delivered
	Err          error // set when FinishReason is FinishError
	// History (paced requests) is the conversation so far as tokens: the
	// prompt, then the generated tokens of the first HistoryChars
	// characters of the text (after an interrupt, within what was
	// spoken; never a token whose text was not released, like a stop
	// string's). Sent back as the next turn's Request.Prefix, with the
	// rest of its prompt as text, it makes that turn find the whole
	// history in the KV cache: the model's own tokens, which its
	// tokenizer need not give back from their text.
	History      []int32
	HistoryChars int
}

// SlotInfo describes one slot for GET /slots.
type SlotInfo struct {
	ID           int
	IsProcessing bool
	State        string // "idle", "prefill", "decode", "paused"
	NCtx         int    // cells available to this slot
	CachedTokens int    // tokens held in the slot's KV cache
	RequestID    uint64 // 0 when idle
	Decoded      int    // tokens generated for the current request
}

// Stats is a snapshot of the engine's load. The counters run from the
// engine's start.
type Stats struct {
	SlotsTotal int
	SlotsBusy  int
	QueueDepth int
	// The KV cells the slots share (pool.go): KVCellsUsed hold a token,
	// KVCellsActive of them for a running request (a cell shared with a
	// running slot counts there), the others only for idle slots' cached
	// prefixes; KVCellsTotal is the pool's size.
	KVCellsUsed, KVCellsActive int
	KVCellsTotal               int
	Requests                   uint64 // finished requests
	TokensOut                  uint64 // generated tokens
	// Steps counts scheduler steps that decoded a batch; ForwardPasses
	// the model evaluations they took (llama.cpp's micro-batches), one
	// more in each of SplitSteps, the steps that evaluated their prompt
	// chunks in a pass before the decoding tokens' (llama.Context.DecodeSplit).
	Steps, SplitSteps, ForwardPasses uint64
	// StepOwnTime is the scheduler's own time in its steps: all but the
	// forward passes and the wait for the CPU share (Config.CPU), summed
	// (a step's own time is counted from the next step's snapshot on).
	StepOwnTime time.Duration
	// PromptTokens counts admitted prompts' tokens, CachedPromptTokens
	// those of them found in a cache instead of evaluated.
	PromptTokens, CachedPromptTokens uint64
	// Preemptions counts requests preempted, for a better class or for
	// cells; PoolPreemptions those for cells (the pool ran out).
	Preemptions, PoolPreemptions uint64
	// The host cache of evicted prefixes: its size now, and how many
	// states were saved into it and restored from it.
	HostCacheBytes                    int64
	HostCacheEntries                  int
	HostCacheSaved, HostCacheRestored uint64
	// Checkpoints of recurrent and sliding-window state (see
	// checkpoint.go): held now and their bytes (within HostCacheBytes'
	// budget with the host entries'), taken, and used to continue a
	// sequence from an earlier position (Hits).
	Checkpoints                      int
	CheckpointBytes                  int64
	CheckpointsSaved, CheckpointHits uint64
	// The disk tier (Config.DiskCacheDir): its files and their bytes
	// now; the prefixes loaded from it (Hits) and written to it
	// (Saved); the states not written (Dropped: the writer's queue was
	// full, the write failed, or at Close the state did not fit
	// Config.DiskCacheBytes or Config.DiskCloseTimeout passed); files
	// removed to stay within the budget (Evicted), and files removed as
	// torn, corrupted or another model's (Rejected).
	DiskCacheEntries                   int
	DiskCacheBytes                     int64
	DiskCacheHits, DiskCacheSaved      uint64
	DiskCacheDropped, DiskCacheEvicted uint64
	DiskCacheRejected                  uint64
	// SlotsPaused counts slots holding a paced request that waits for
	// Continue.
	SlotsPaused int
	Paced       PacedStats
	// Embed calls finished (or failed), inputs embedded, and the forward
	// passes that embedded them.
	EmbedRequests, EmbedInputs, EmbedPasses uint64
	// BusySlots sums, over Steps, the slots with tokens in the step's
	// batch: BusySlots/Steps is llama-server's n_busy_slots_per_decode.
	BusySlots uint64
	// Jump-forward decoding (Config.JumpForward): tokens evaluated
	// ahead because the grammar required their text, and those of them
	// the model then wrote or, with JumpForce, that were written for it
	// (each a step saved).
	DraftTokens, DraftAccepted uint64
	// Spec counts speculative decoding's drafts (Config.Speculate).
	Spec SpecStats
	// MediaEncoded counts the media chunks the projector encoded (a
	// chunk found in a cache is not encoded); MediaEncodeTime is the
	// encoder's time, aborted encodes included. The encoder runs beside
	// the steps, one chunk at a time.
	MediaEncoded    uint64
	MediaEncodeTime time.Duration
	// Queue lists the requests waiting for a slot by priority class, the
	// best (lowest) class first, classes with none left out. Requests
	// still in the submission channel are counted at the scheduler's
	// next step (QueueDepth counts them at once). The slice is shared
	// by every snapshot of a step: do not modify it.
	Queue []ClassQueue
	// TTFTSum sums the time from submit to the first generated token
	// over the TTFTCount requests that got one, so that two snapshots
	// give the mean time to first token of the requests in between.
	TTFTSum   time.Duration
	TTFTCount uint64
}

// ClassQueue counts the requests of one priority class (Request.Priority)
// waiting for a slot: Queued were never admitted, Preempted were and wait
// to resume.
type ClassQueue struct {
	Priority          int
	Queued, Preempted int
}

// PacedStats sums the paced requests that finished (Request.Chunking).
type PacedStats struct {
	Requests      uint64
	Chunks        uint64
	PauseTimeouts uint64
	Interrupted   uint64
	// Prompt tokens found cached and evaluated, and generated tokens
	// evaluated more than once (0 unless preempted without a cache).
	CachedTokens, PromptEvaluated, Reevaluated uint64
	// FirstChunk sums submit → first chunk over the requests with one.
	FirstChunk      time.Duration
	FirstChunkCount uint64
}

// ModelInfo describes the loaded model.
type ModelInfo struct {
	Name          string // id reported by /v1/models
	Path          string
	Architecture  string
	CtxTrain      int // training context length
	CtxPerRequest int // the most context one request may use (Config.CtxPerRequest)
	KVCells       int // the cells of the KV cache the slots share
	VocabSize     int
	ChatTemplate  string // tokenizer.chat_template, "" when absent
	// Vision and Audio say which media the model takes (Request.Media),
	// through its projector (Config.MMProj); AudioSampleRate is the rate
	// in Hz of the sounds it takes.
	Vision, Audio   bool
	AudioSampleRate int
	// ChatTemplateToolUse is tokenizer.chat_template.tool_use, the
	// template for requests that offer tools (Command R+, FireFunction
	// v2), "" when absent.
	ChatTemplateToolUse string
	// Pooling is the pooling Embed applies ("none", "mean", "cls",
	// "last", or "rank" for a reranker, which cannot embed).
	Pooling string
	// CacheTypeK and CacheTypeV are the KV cache's key and value types
	// (Config.CacheTypeK and CacheTypeV, "f16" by default).
	CacheTypeK, CacheTypeV string
	// KVPerSlot says that each slot has a KV buffer of its own
	// (Config.KVPerSlot, which a hybrid model speculating with rollback
	// copies always has).
	KVPerSlot bool
	// Speculation names the draft sources the engine speculates with
	// (Config.Speculate): "ngram", "draft:NAME"; none when it does not,
	// as on a model whose recurrent state does not go back over a
	// refused draft (see Speculation.Recurrent).
	Speculation []string
	// EmbeddingSize is the length of an embedding (the model's n_embd).
	EmbeddingSize int
	// EmbedMaxTokens is the most tokens one Embed input may have; 0 when
	// the engine cannot embed.
	EmbedMaxTokens int
	BOS, EOS       int32
	AddBOS         bool
	Created        time.Time
	// Layers is the model's layer count, its output layer included
	// (llama.cpp's block count + 1); GPULayers of them, the last ones,
	// are on Devices, the GPUs the model uses (none: on the CPU).
	Layers, GPULayers int
	Devices           []string
	// MemoryKind is what the model keeps of a sequence (see MemoryKind).
	MemoryKind MemoryKind
	// Memory is what llama.cpp allocated for the model and its context:
	// the weights, the context's memory (KV cells of every kind,
	// recurrent states) and the compute buffers.
	Memory llama.Memory
}

// MemoryKind is what a model keeps of a sequence, which decides how the
// engine reuses it.
type MemoryKind string

// Memory kinds.
const (
	// MemoryAttention: a KV cache of every position, cut back anywhere.
	MemoryAttention MemoryKind = "attention"
	// MemorySlidingWindow: some layers keep only their last window of
	// positions (Gemma 3/4, gpt-oss, Cohere2): a sequence is cut back only
	// within the window, else restored from a checkpoint.
	MemorySlidingWindow MemoryKind = "sliding-window"
	// MemoryRecurrent: one state per sequence, whatever its length
	// (Mamba, RWKV): never cut back, only restored from a checkpoint.
	MemoryRecurrent MemoryKind = "recurrent"
	// MemoryHybrid: a recurrent state and a KV cache (Qwen3.5, Jamba,
	// Granite-4 hybrid, LFM2), reused as a recurrent one is.
	MemoryHybrid MemoryKind = "hybrid"
)

// memoryKind is model's MemoryKind.
func memoryKind(model *llama.Model) MemoryKind {
	switch {
	case model.Hybrid():
		return MemoryHybrid
	case model.Recurrent():
		return MemoryRecurrent
	case model.SlidingWindow() > 0:
		return MemorySlidingWindow
	}
	return MemoryAttention
}

// Device is a GPU that layers can be offloaded to (see Devices).
type Device = llama.Device

// Devices lists the GPUs the loaded ggml backend libraries found, with
// their free and total memory now; none when corral computes on the CPU
// only.
func Devices() []Device { return llama.Devices() }
