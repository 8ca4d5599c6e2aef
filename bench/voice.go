package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/corral-llm/corral/voice"
	"github.com/corral-llm/corral/wire"
)

// Voice load: conversations whose client plays a text-to-speech engine.
// After each chunk of an answer it waits the time a speaker needs to say
// it (VoiceSpec.CharsPerSecond) before asking for the next, and now and
// then the user barges in part-way through a chunk.

// VoiceMode is how a voice client gets sentence-paced text.
type VoiceMode string

// Voice modes.
const (
	// VoicePaced is corral's /v1/voice: the answer pauses in the engine
	// after each chunk (slot and KV kept) until "continue"; a barge-in is
	// an "interrupt" with the characters heard.
	VoicePaced VoiceMode = "paced"
	// VoiceResend is the reference agent's way, which any llama-server
	// takes: stream /completion (id_slot alternating between two slots,
	// cache_prompt) until the text ends a sentence, close the connection,
	// and send prompt + text so far again for the next sentence.
	VoiceResend VoiceMode = "resend"
)

// ParseVoiceMode checks a -voice flag value.
func ParseVoiceMode(s string) (VoiceMode, error) {
	switch m := VoiceMode(s); m {
	case VoicePaced, VoiceResend:
		return m, nil
	}
	return "", fmt.Errorf("voice mode %q: want %s or %s", s, VoicePaced, VoiceResend)
}

// VoiceSpec is the shape of a voice run.
type VoiceSpec struct {
	Mode           VoiceMode `json:"mode"`
	Sessions       int       `json:"sessions"`         // conversations at once
	Turns          int       `json:"turns"`            // answers per conversation
	CharsPerSecond float64   `json:"chars_per_second"` // the speaker's pace
	BargeIn        float64   `json:"barge_in"`         // fraction of answers interrupted
	MaxTokens      int       `json:"max_tokens"`       // per answer
	Seed           uint64    `json:"seed"`
	// FirstMinTokens is paced chunking's first_min_tokens (0: the
	// server's default, 10; the resend mode's sentence test has none).
	FirstMinTokens int `json:"first_min_tokens,omitempty"`
}

// VoiceRecord is one answer as the voice client saw it.
type VoiceRecord struct {
	TTFT        time.Duration // first token (paced: the server's figure; resend: the first text)
	FirstChunk  time.Duration // first chunk, ready to speak
	Chunks      int
	Reevaluated int // tokens evaluated twice (paced: the server's figure; -1 unknown)
	Interrupted bool
	Err         string
}

// voiceQuestions are the users' turns, in rotation.
var voiceQuestions = []string{
	"Tell me a story about a dog who finds a ball.",
	"What happened next?",
	"Tell me about the little girl and her red kite.",
	"Why was the cat sad?",
	"Tell me a story about two friends at the park.",
	"And then what did they do?",
}

// referenceBoundary is the reference agent's sentence test: the text,
// right-trimmed, ends with . ! or ? and any closing quotes or parenthesis.
var referenceBoundary = regexp.MustCompile(`[.!?]["')]*$`)

// RunVoice drives spec.Sessions conversations against the server at
// baseURL and returns every answer's record, in no particular order.
func RunVoice(ctx context.Context, baseURL string, spec VoiceSpec) ([]VoiceRecord, error) {
	if spec.Sessions < 1 || spec.Turns < 1 || spec.CharsPerSecond <= 0 || spec.BargeIn < 0 || spec.BargeIn > 1 || spec.MaxTokens < 1 {
		return nil, fmt.Errorf("voice: bad spec %+v", spec)
	}
	slots := 0
	if spec.Mode == VoiceResend {
		n, err := totalSlots(ctx, baseURL)
		if err != nil {
			return nil, err
		}
		slots = n
	}
	var (
		mu   sync.Mutex
		recs []VoiceRecord
		wg   sync.WaitGroup
	)
	for i := range spec.Sessions {
		wg.Go(func() {
			s := &voiceSession{spec: spec, base: strings.TrimRight(baseURL, "/"), rng: rand.New(rand.NewPCG(spec.Seed, uint64(i)))}
			if spec.Mode == VoiceResend {
				s.slots = [2]int{(2 * i) % slots, (2*i + 1) % slots}
			}
			rs := s.run(ctx, i)
			mu.Lock()
			recs = append(recs, rs...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return recs, ctx.Err()
}

// voiceSession is one conversation.
type voiceSession struct {
	spec  VoiceSpec
	base  string
	rng   *rand.Rand
	slots [2]int // resend: the two slots it alternates between
	cycle int
}

func (s *voiceSession) run(ctx context.Context, i int) []VoiceRecord {
	var recs []VoiceRecord
	if s.spec.Mode == VoiceResend {
		conv := ""
		for turn := range s.spec.Turns {
			q := voiceQuestions[(i+turn)%len(voiceQuestions)]
			conv += "User: " + q + "\nAssistant:"
			rec, heard := s.resendTurn(ctx, conv)
			conv += heard + "\n"
			recs = append(recs, rec)
		}
		return recs
	}
	url := "ws" + strings.TrimPrefix(s.base, "http") + "/v1/voice"
	c, err := voice.Dial(ctx, url, nil)
	if err != nil {
		for range s.spec.Turns {
			recs = append(recs, VoiceRecord{Err: ErrKindConnect})
		}
		return recs
	}
	defer c.Close()
	for turn := range s.spec.Turns {
		q := voiceQuestions[(i+turn)%len(voiceQuestions)]
		recs = append(recs, s.pacedTurn(ctx, c, q))
	}
	return recs
}

// bargeIn draws whether this answer is interrupted: in which chunk, and
// after what part of it.
func (s *voiceSession) bargeIn() (chunk int, frac float64) {
	if s.rng.Float64() >= s.spec.BargeIn {
		return -1, 0
	}
	return s.rng.IntN(3), s.rng.Float64()
}

// speak waits the time the speaker needs for n characters.
func (s *voiceSession) speak(ctx context.Context, n int) error {
	t := time.NewTimer(time.Duration(float64(n) / s.spec.CharsPerSecond * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *voiceSession) pacedTurn(ctx context.Context, c *voice.Client, q string) VoiceRecord {
	rec := VoiceRecord{Reevaluated: -1}
	bargeAt, frac := s.bargeIn()
	chunking := map[string]any{}
	if s.spec.FirstMinTokens > 0 {
		chunking["first_min_tokens"] = s.spec.FirstMinTokens
	}
	err := c.Create(ctx, map[string]any{
		"messages":    []wire.Message{{Role: "user", Content: q}},
		"max_tokens":  s.spec.MaxTokens,
		"temperature": 0,
		"chunking":    chunking,
	})
	if err != nil {
		rec.Err = ErrKindConnect
		return rec
	}
	start := time.Now()
	heard := 0
	for {
		ev, err := c.Next(ctx)
		if err != nil {
			rec.Err = ErrKindDisconnect
			return rec
		}
		switch ev.Type {
		case voice.TypeChunk:
			if rec.Chunks == 0 {
				rec.FirstChunk = time.Since(start)
			}
			rec.Chunks++
			n := utf8.RuneCountInString(ev.Text)
			if rec.Chunks-1 == bargeAt {
				part := int(frac * float64(n))
				if s.speak(ctx, part) != nil || c.Interrupt(ctx, heard+part) != nil {
					rec.Err = ErrKindAborted
					return rec
				}
				rec.Interrupted = true
				continue
			}
			if s.speak(ctx, n) != nil || c.Continue(ctx) != nil {
				rec.Err = ErrKindAborted
				return rec
			}
			heard += n
		case voice.TypeDone:
			if m := ev.Metrics; m != nil {
				rec.TTFT = time.Duration(m.TTFTMS * float64(time.Millisecond))
				rec.Reevaluated = m.ReevaluatedTokens
			}
			return rec
		case voice.TypeError:
			rec.Err = ErrKindStream
			if ev.Error != nil && ev.Error.Code != nil {
				rec.Err = *ev.Error.Code // e.g. context_length_exceeded
			}
			return rec
		}
	}
}

// resendTurn answers conv the reference's way and returns the text heard.
func (s *voiceSession) resendTurn(ctx context.Context, conv string) (VoiceRecord, string) {
	rec := VoiceRecord{Reevaluated: -1}
	bargeAt, frac := s.bargeIn()
	start := time.Now()
	text := ""
	for left := s.spec.MaxTokens; left > 0; {
		slot := s.slots[s.cycle%2]
		s.cycle++
		chunk, ntok, ended, err := s.sentence(ctx, conv+text, slot, left, func() {
			if rec.TTFT == 0 {
				rec.TTFT = time.Since(start)
			}
		})
		if err != nil {
			rec.Err = err.Error()
			return rec, text
		}
		if chunk == "" {
			break
		}
		if rec.Chunks == 0 {
			rec.FirstChunk = time.Since(start)
		}
		rec.Chunks++
		n := utf8.RuneCountInString(chunk)
		if rec.Chunks-1 == bargeAt {
			part := int(frac * float64(n))
			s.speak(ctx, part)
			rec.Interrupted = true
			return rec, text + string([]rune(chunk)[:part])
		}
		if s.speak(ctx, n) != nil {
			rec.Err = ErrKindAborted
			return rec, text
		}
		text += chunk
		left -= ntok
		if ended {
			break
		}
	}
	return rec, text
}

// sentence streams one /completion until its text ends a sentence (or
// the server ends it), then closes the connection.
func (s *voiceSession) sentence(ctx context.Context, prompt string, slot, maxTokens int, first func()) (text string, ntok int, ended bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // hangs up mid-stream, as the reference does
	body, _ := json.Marshal(map[string]any{
		"prompt": prompt, "id_slot": slot, "cache_prompt": true, "stream": true, "n_predict": maxTokens, "temperature": 0,
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/completion", strings.NewReader(string(body)))
	if err != nil {
		return "", 0, false, errors.New(ErrKindConnect)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, false, errors.New(classify(ctx, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", 0, false, fmt.Errorf("http_%d", resp.StatusCode)
	}
	c := Client{API: APILlamaCpp}
	r := wire.NewReader(resp.Body)
	var b strings.Builder
	for {
		sse, rerr := r.Next()
		switch {
		case rerr == io.EOF:
			return b.String(), ntok, false, errors.New(ErrKindDisconnect)
		case errors.Is(rerr, wire.ErrLineTooLong):
			return b.String(), ntok, false, errors.New(ErrKindStream)
		case rerr != nil:
			return b.String(), ntok, false, errors.New(classify(ctx, rerr))
		}
		ev, perr := c.parseEvent(sse)
		if perr != nil || ev.errMsg != "" {
			return b.String(), ntok, false, errors.New(ErrKindStream)
		}
		if ev.content {
			first()
			b.WriteString(ev.text)
			ntok++
		}
		if ev.done {
			return b.String(), ntok, true, nil
		}
		if referenceBoundary.MatchString(strings.TrimRight(b.String(), " \t\n")) {
			return b.String(), ntok, false, nil
		}
	}
}

// totalSlots reads the server's slot count from llama-server's /props.
func totalSlots(ctx context.Context, base string) (int, error) {
	var props struct {
		TotalSlots int `json:"total_slots"`
	}
	if err := getJSON(ctx, strings.TrimRight(base, "/")+"/props", &props); err != nil {
		return 0, fmt.Errorf("voice: /props: %w", err)
	}
	if props.TotalSlots < 1 {
		return 0, errors.New("voice: /props reports no slots")
	}
	return props.TotalSlots, nil
}

// BusySlots polls the server's /slots until no slot is processing or
// wait has passed, and returns how many still are (-1: the server has
// no /slots).
func BusySlots(ctx context.Context, base string, wait time.Duration) int {
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var slots []struct {
			IsProcessing bool `json:"is_processing"`
		}
		if err := getJSON(ctx, strings.TrimRight(base, "/")+"/slots", &slots); err != nil {
			return -1
		}
		busy := 0
		for _, sl := range slots {
			if sl.IsProcessing {
				busy++
			}
		}
		if busy == 0 || time.Now().After(deadline) {
			return busy
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return busy
		}
	}
}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// VoiceSummary condenses a voice run's records.
type VoiceSummary struct {
	Spec        VoiceSpec      `json:"spec"`
	Answers     int            `json:"answers"`
	Failed      int            `json:"failed"`
	Errors      map[string]int `json:"errors,omitempty"`
	Interrupted int            `json:"interrupted"`
	Chunks      float64        `json:"chunks_per_answer"`
	TTFTP50     float64        `json:"ttft_p50_ms"`
	TTFTP99     float64        `json:"ttft_p99_ms"`
	FirstP50    float64        `json:"first_chunk_p50_ms"`
	FirstP99    float64        `json:"first_chunk_p99_ms"`
	// Reevaluated tokens per answer, as the server counts them (-1:
	// unknown, the resend mode cannot see it per answer).
	Reevaluated float64 `json:"reevaluated_per_answer"`
	// PromptEvaluated are the prompt tokens the server evaluated per
	// answer, from its /metrics (-1: unknown).
	PromptEvaluated float64 `json:"prompt_evaluated_per_answer"`
	SlotsLeaked     int     `json:"slots_leaked"`
	DurationS       float64 `json:"duration_s"`
}

// SummarizeVoice condenses recs.
func SummarizeVoice(spec VoiceSpec, recs []VoiceRecord) VoiceSummary {
	s := VoiceSummary{Spec: spec, Answers: len(recs), Errors: map[string]int{}, Reevaluated: -1, PromptEvaluated: -1}
	var ttft, first []float64
	chunks, reeval, known := 0, 0, 0
	for _, r := range recs {
		if r.Err != "" {
			s.Failed++
			s.Errors[r.Err]++
			continue
		}
		if r.Interrupted {
			s.Interrupted++
		}
		chunks += r.Chunks
		if r.TTFT > 0 {
			ttft = append(ttft, ms(r.TTFT))
		}
		if r.Chunks > 0 {
			first = append(first, ms(r.FirstChunk))
		}
		if r.Reevaluated >= 0 {
			reeval += r.Reevaluated
			known++
		}
	}
	if ok := s.Answers - s.Failed; ok > 0 {
		s.Chunks = float64(chunks) / float64(ok)
	}
	if known > 0 {
		s.Reevaluated = float64(reeval) / float64(known)
	}
	slices.Sort(ttft)
	slices.Sort(first)
	pct := func(xs []float64, p float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		return Percentile(xs, p)
	}
	s.TTFTP50, s.TTFTP99 = pct(ttft, 50), pct(ttft, 99)
	s.FirstP50, s.FirstP99 = pct(first, 50), pct(first, 99)
	return s
}

// PromptEvaluated reads from the server's /metrics how many prompt tokens
// it has evaluated (not found cached) since it started: corral's
// corral_prompt_tokens_total less corral_prompt_tokens_cached_total, or
// llama-server's llamacpp:prompt_tokens_total (with --metrics). ok is
// false when the server exports neither.
func PromptEvaluated(ctx context.Context, base string) (n float64, ok bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/metrics", nil)
	if err != nil {
		return 0, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, false
	}
	value := func(name string) (float64, bool) {
		f, ok := families[name]
		if !ok || len(f.GetMetric()) == 0 {
			return 0, false
		}
		m := f.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue(), true
		}
		return m.GetGauge().GetValue(), m.GetGauge() != nil
	}
	if total, ok := value("corral_prompt_tokens_total"); ok {
		cached, _ := value("corral_prompt_tokens_cached_total")
		return total - cached, true
	}
	return value("llamacpp:prompt_tokens_total")
}
