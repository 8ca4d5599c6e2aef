package serving

import (
	"slices"
	"testing"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
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
