package chat

import (
	"encoding/json"
	"testing"
)

// TestMediaParts: a media part renders as its marker, with no newline on
// either side while text parts are joined by newlines; FindMediaMarkers
// finds each marker and its number, and no text that only looks like
// one; a part of type media_marker with other text is refused.
func TestMediaParts(t *testing.T) {
	parts := []json.RawMessage{json.RawMessage(`{"type":"text","text":"a"}`), json.RawMessage(`{"type":"text","text":"b"}`), MediaPart(0), json.RawMessage(`{"type":"text","text":"c"}`), MediaPart(12)}
	content, _ := json.Marshal(parts)
	got, err := Message{Role: "user", Content: content}.Text()
	if want := "a\nb" + MediaMarker(0) + "c" + MediaMarker(12); err != nil || got != want {
		t.Fatalf("Text: %q, %v; want %q", got, err, want)
	}
	text := "x<__media__>" + got + "<__media_" + mediaNonce + "_x__>" + mediaPrefix
	marks := FindMediaMarkers(text)
	if len(marks) != 2 || marks[0].Index != 0 || marks[1].Index != 12 || text[marks[0].Start:marks[0].End] != MediaMarker(0) || text[marks[1].Start:marks[1].End] != MediaMarker(12) {
		t.Errorf("FindMediaMarkers: %+v", marks)
	}
	for _, forged := range []string{`{"type":"media_marker","text":"<__media__>"}`, `{"type":"media_marker","text":"` + MediaMarker(1) + `x"}`, `{"type":"media_marker"}`} {
		if _, err := (Message{Role: "user", Content: json.RawMessage(`[` + forged + `]`)}).Text(); err == nil {
			t.Errorf("%s: taken", forged)
		}
	}
}
