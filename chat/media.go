package chat

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
)

// Media in messages: a dialect that takes an image or a sound puts, where
// it goes in a message's content, the part MediaPart(k) for the request's
// k-th medium. Text renders it as a marker, MediaMarker(k), which the
// template passes through as text; the caller finds the markers in the
// rendered prompt (FindMediaMarkers) and puts the media there. The
// marker holds a random nonce drawn once per process, so a client's text
// cannot forge one.

// mediaNonce is the process's marker nonce.
var mediaNonce = func() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// mediaPrefix and mediaSuffix enclose a marker's index.
var (
	mediaPrefix = "<__media_" + mediaNonce + "_"
	mediaSuffix = "__>"
)

// MediaMarker is the text that stands for a request's k-th medium.
func MediaMarker(k int) string { return mediaPrefix + strconv.Itoa(k) + mediaSuffix }

// MediaPart is the content part that stands for a request's k-th medium,
// of llama.cpp's type "media_marker".
func MediaPart(k int) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"type": "media_marker", "text": MediaMarker(k)})
	return b
}

// MarkerAt is a media marker found in a text: Text[Start:End] stands
// for medium Index.
type MarkerAt struct{ Start, End, Index int }

// FindMediaMarkers returns the media markers in s, in order.
func FindMediaMarkers(s string) []MarkerAt {
	var out []MarkerAt
	at := 0
	for {
		i := strings.Index(s[at:], mediaPrefix)
		if i < 0 {
			return out
		}
		start := at + i
		rest := s[start+len(mediaPrefix):]
		j := strings.Index(rest, mediaSuffix)
		k, err := strconv.Atoi(rest[:max(j, 0)])
		if j <= 0 || j > 9 || err != nil || k < 0 {
			at = start + len(mediaPrefix)
			continue
		}
		end := start + len(mediaPrefix) + j + len(mediaSuffix)
		out = append(out, MarkerAt{Start: start, End: end, Index: k})
		at = end
	}
}

// isMediaMarker reports whether s is exactly a media marker.
func isMediaMarker(s string) bool {
	m := FindMediaMarkers(s)
	return len(m) == 1 && m[0].Start == 0 && m[0].End == len(s)
}
