package voice_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/registry"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/voice"
	"github.com/corral-llm/corral/wire"
)

// startAudio serves voice over the synthetic Qwen2-Audio pair
// (testsynth.Projector "qwen2a"), or over the tiny text model when
// audio is false, one slot configured by cfg, within lim, through a
// recorder.
func startAudio(t *testing.T, audio bool, cfg engine.Config, lim serving.Limits) (*server, *recorder) {
	t.Helper()
	cfg.ModelPath, cfg.Threads, cfg.Parallel = testmodel.Path(t, testmodel.TinyStories656K), 1, 1
	if audio {
		cfg.ModelPath, cfg.MMProj = testsynth.Projector(t, t.TempDir(), "qwen2a")
	}
	eng, err := engine.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	m, err := model.New(eng, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	spec := registry.Spec{ID: m.Info().Name, Engine: engine.Config{ModelPath: cfg.ModelPath}, Pinned: true}
	reg, err := registry.New(registry.Config{}, []registry.Spec{spec}, func(context.Context, registry.Spec) (*model.Model, error) { return m, nil })
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{api: serving.New(reg, serving.Options{Limits: lim})}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		voice.Serve(w, r, rec, voice.Options{})
	}))
	t.Cleanup(hs.Close)
	return &server{url: "ws" + strings.TrimPrefix(hs.URL, "http"), eng: eng, api: rec.api}, rec
}

// sine is the committed 1 s sine (testdata/media/sine-440-1s.wav) as a
// turn's input_audio.
func sine(t *testing.T) voice.InputAudio {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testsynth.MediaDir(), "sine-440-1s.wav"))
	if err != nil {
		t.Fatal(err)
	}
	return voice.InputAudio{Data: base64.StdEncoding.EncodeToString(b), Format: "wav"}
}

// TestAudioTurn: a turn that carries the user's speech gets its
// transcript, then the answer in paced chunks; the transcript joins the
// conversation as the user's message, before the answer; the
// transcription and the answer are two requests of the engine.
func TestAudioTurn(t *testing.T) {
	s, rec := startAudio(t, true, engine.Config{MaxTokensDefault: 12}, serving.Limits{})
	c := s.dial(t)
	turn := map[string]any{"input_audio": sine(t), "max_tokens": 12, "temperature": 0, "ignore_eos": true,
		"chunking": map[string]any{"first_min_tokens": 1, "first_max_tokens": 4}}
	if err := c.Create(context.Background(), turn); err != nil {
		t.Fatal(err)
	}
	heard := next(t, c)
	if heard.Type != voice.TypeTranscript || heard.Text == "" {
		t.Fatalf("first event %+v, want the transcript", heard)
	}
	texts, done := listen(t, c, next(t, c), -1, 0)
	if len(texts) < 2 || done.Message == nil || done.Message.Content != strings.Join(texts, "") {
		t.Fatalf("%d chunks %q, done %+v", len(texts), texts, done)
	}
	answer(t, c, user("And then?", 4), -1, 0)
	want := []string{"user " + heard.Text, "assistant " + done.Message.Content}
	var got []string
	for _, m := range rec.history() {
		text, _ := m.Text()
		got = append(got, m.Role+" "+text)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the conversation the next turn was given:\n%q\nwant\n%q", got, want)
	}
	if st := waitStats(t, s.eng, "waiting for the answers to be counted", func(st engine.Stats) bool { return st.Requests >= 3 }); st.Requests != 3 {
		t.Errorf("%d requests finished, want 3: the transcription and two answers", st.Requests)
	}
}

// TestAudioTurnRefused: a sound over the media limits, a model that does
// not take audio, and input_audio that is not a sound get an error event
// naming the field (and the limit or the modality), before anything
// reaches the engine; the conversation goes on without them.
func TestAudioTurnRefused(t *testing.T) {
	short := serving.Limits{}
	short.Media.MaxAudioSeconds = 0.5
	audio, audioRec := startAudio(t, true, engine.Config{MaxTokensDefault: 4}, short)
	text, textRec := startAudio(t, false, engine.Config{}, serving.Limits{})
	for _, c := range []struct {
		name       string
		s          *server
		rec        *recorder
		audio      any
		param      string
		code, says string
	}{
		{"over --max-audio-seconds", audio, audioRec, sine(t), "input_audio.data", "limit_exceeded", "max-audio-seconds"},
		{"a model without audio", text, textRec, sine(t), "input_audio", "unsupported_modality", "does not take audio"},
		{"not base64", audio, audioRec, voice.InputAudio{Data: "@@@@"}, "input_audio.data", "", "base64"},
		{"no data", audio, audioRec, map[string]any{}, "input_audio.data", "", "required"},
		{"an image", audio, audioRec, voice.InputAudio{Data: base64.StdEncoding.EncodeToString(pngBytes(t))}, "input_audio.data", "", ""},
	} {
		before := c.s.eng.Stats()
		cl := c.s.dial(t)
		if err := cl.Create(context.Background(), map[string]any{"messages": []wire.Message{{Role: "user", Content: "Hi"}}, "input_audio": c.audio}); err != nil {
			t.Fatal(err)
		}
		ev := next(t, cl)
		if ev.Type != voice.TypeError || ev.Error == nil || ev.Error.Param == nil || *ev.Error.Param != c.param ||
			(c.code != "" && (ev.Error.Code == nil || *ev.Error.Code != c.code)) || !strings.Contains(ev.Error.Message, c.says) {
			b, _ := json.Marshal(ev)
			t.Errorf("%s: %s", c.name, b)
		}
		if st := c.s.eng.Stats(); st.Requests != before.Requests || st.PromptTokens != before.PromptTokens || st.SlotsBusy != 0 {
			t.Errorf("%s: the refused sound reached the engine: %+v", c.name, st)
		}
		answer(t, cl, user("Hello", 2), -1, 0)
		if h := c.rec.history(); len(h) != 0 {
			t.Errorf("%s: the refused turn joined the conversation: %+v", c.name, h)
		}
		waitStats(t, c.s.eng, "waiting for the answer's end", func(st engine.Stats) bool { return st.Requests == before.Requests+1 })
		cl.Close()
	}
}

// pngBytes is the committed 64×64 gradient PNG.
func pngBytes(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testsynth.MediaDir(), "gradient-64.png"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestClosedSocketStopsTheTranscription: a socket closed while its
// turn's sound is being transcribed (with no bound on the tokens but the
// context, so it would run for long) stops the transcription, and the
// slot goes idle.
func TestClosedSocketStopsTheTranscription(t *testing.T) {
	s, rec := startAudio(t, true, engine.Config{}, serving.Limits{})
	rec.transcribed = make(chan *serving.Error, 1)
	c := s.dial(t)
	if err := c.Create(context.Background(), map[string]any{"input_audio": sine(t)}); err != nil {
		t.Fatal(err)
	}
	waitStats(t, s.eng, "waiting for the transcription to generate", func(st engine.Stats) bool { return st.TokensOut > 0 })
	c.Close()
	if e := <-rec.transcribed; e == nil || e.Status != 499 {
		t.Fatalf("the transcription ended with %+v, want abandoned", e)
	}
	waitIdle(t, s.eng)
}
