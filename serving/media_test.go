package serving

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testsynth"
	"github.com/corral-llm/corral/media"
)

// TestPlaceMedia: the markers leave the prompt, each medium goes where
// its marker was (twice for a marker repeated, not at all for one
// dropped), a marker of no medium stays text, and the plain spans
// shrink by the markers inside them.
func TestPlaceMedia(t *testing.T) {
	m1 := chat.MediaMarker(1)
	prompt := "<u>ab" + m1 + "cd" + m1 + "</u>" + chat.MediaMarker(5) + "e"
	plain := []engine.Span{{Start: 3, End: 3 + 2 + len(m1) + 2 + len(m1)}} // "ab" … the second marker
	ms := []engine.Media{{ID: "zero"}, {ID: "one"}}
	got, placed, spans := placeMedia(prompt, plain, ms)
	if want := "<u>abcd</u>" + chat.MediaMarker(5) + "e"; got != want {
		t.Fatalf("prompt %q; want %q", got, want)
	}
	if len(placed) != 2 || placed[0].ID != "one" || placed[0].At != 5 || placed[1].ID != "one" || placed[1].At != 7 {
		t.Errorf("media %+v; want medium one at 5 and 7", placed)
	}
	if want := []engine.Span{{Start: 3, End: 7}}; !slices.Equal(spans, want) {
		t.Errorf("spans %v; want %v", spans, want)
	}
}

// mediaBody is a MediaBody whose CheckMedia gives media of n bytes.
type mediaBody struct {
	n     int
	media []engine.Media
}

func (b *mediaBody) CheckMedia(context.Context, *Limits) *Error {
	b.media = []engine.Media{{RGB: make([]byte, b.n)}}
	return nil
}

func (b *mediaBody) Media() []engine.Media { return b.media }

// TestMediaBudget: a request's decoded media take their bytes from the
// budget until it is answered; one that does not fit waits for them (and
// gives up when its context ends), one larger than the budget is a 400
// naming --max-media-memory.
func TestMediaBudget(t *testing.T) {
	b := newMediaBudget(100)
	lim := DefaultLimits.WithDefaults()
	first, e := b.decode(context.Background(), &mediaBody{n: 60}, &lim)
	if e != nil {
		t.Fatal(e)
	}
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan *Error)
	go func() {
		_, e := b.decode(ctx, &mediaBody{n: 60}, &lim)
		waited <- e
	}()
	cancel()
	if e := <-waited; e == nil || e.Status != 499 {
		t.Errorf("a request over what is left, its context ended: %v; want it to give up", e)
	}
	got := make(chan func())
	go func() {
		release, e := b.decode(context.Background(), &mediaBody{n: 60}, &lim)
		if e != nil {
			t.Error(e)
		}
		got <- release
	}()
	first()
	(<-got)()
	if _, e := b.decode(context.Background(), &mediaBody{n: 101}, &lim); e == nil || e.Code != "limit_exceeded" || !strings.Contains(e.Message, "--max-media-memory") {
		t.Errorf("a request over the budget: %v", e)
	}
}

// TestDecodeMedia: more media than --max-media are refused before any
// is decoded (the 17 here would not decode); each source is decoded as
// its kind says, or as its bytes say when it does not, and a refusal
// names the source's field.
func TestDecodeMedia(t *testing.T) {
	lim := DefaultLimits.WithDefaults()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(testsynth.MediaDir(), name))
		if err != nil {
			t.Fatal(err)
		}
		return base64.StdEncoding.EncodeToString(b)
	}
	png, wav := read("gradient-64.png"), read("sine-440-1s.wav")
	bad := make([]MediaSource, 17)
	if _, e := lim.DecodeMedia(context.Background(), bad, "input"); e == nil || e.Param != "input" || !strings.Contains(e.Message, "--max-media") {
		t.Errorf("17 media: %+v", e)
	}
	ms, e := lim.DecodeMedia(context.Background(), []MediaSource{
		{Param: "a", Kind: media.KindImage, Base64: png, Type: "image/png"},
		{Param: "b", URL: "data:image/png;base64," + png},
		{Param: "c", Base64: png},
		{Param: "d", Base64: wav},
		{Param: "e", Kind: media.KindAudio, Base64: wav, Type: "wav"},
	}, "input")
	if e != nil {
		t.Fatal(e)
	}
	for i, m := range ms {
		if audio := i >= 3; (m.PCM != nil) != audio || (m.RGB != nil) == audio || m.ID == "" {
			t.Errorf("medium %d: %d samples, %d×%d pixels, ID %q", i, len(m.PCM), m.W, m.H, m.ID)
		}
	}
	if ms[0].ID != ms[1].ID || ms[0].ID != ms[2].ID || ms[3].ID != ms[4].ID {
		t.Error("the same bytes have different IDs")
	}
	for _, tc := range []struct {
		src  MediaSource
		says string
	}{
		{MediaSource{Param: "x", Base64: base64.StdEncoding.EncodeToString([]byte("plain text"))}, "neither an image nor a sound"},
		{MediaSource{Param: "x", Kind: media.KindImage, Base64: wav}, "not recognised"},
		{MediaSource{Param: "x", Kind: media.KindImage, Base64: png, Type: "image/webp"}, "image/webp but its bytes are png"},
		{MediaSource{Param: "x", URL: "https://example.com/a.png"}, "--allowed-media-domains lists none"},
	} {
		if _, e := lim.DecodeMedia(context.Background(), []MediaSource{tc.src}, "input"); e == nil || e.Status != 400 || e.Param != "x" || !strings.Contains(e.Message, tc.says) {
			t.Errorf("%+v: %+v; want a 400 naming x saying %q", tc.src, e, tc.says)
		}
	}
}
