package serving

import (
	"strings"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
)

// checkModalities refuses media the model cannot take: a model without
// a projector, or without the encoder for that kind (param names the
// field of the prompt or messages).
func checkModalities(info engine.ModelInfo, media []engine.Media, param string) *Error {
	for _, m := range media {
		switch {
		case m.PCM != nil && !info.Audio:
			return &Error{Status: 400, Param: param, Code: "unsupported_modality", Message: "model " + info.Name + " does not take audio" + projectorHint(info)}
		case m.PCM == nil && !info.Vision:
			return &Error{Status: 400, Param: param, Code: "unsupported_modality", Message: "model " + info.Name + " does not take images" + projectorHint(info)}
		}
	}
	return nil
}

// projectorHint tells an operator why a model takes no media.
func projectorHint(info engine.ModelInfo) string {
	if !info.Vision && !info.Audio {
		return " (it has no multimodal projector: --mmproj)"
	}
	return ""
}

// placeMedia takes the media markers (chat.MediaMarker) out of prompt and
// returns the prompt without them, each marker's medium at the byte
// offset where it was (a medium whose marker the template dropped is
// left out; one it repeated goes in twice), and the plain spans moved
// to the prompt without markers (a marker inside one splits nothing: the
// span shrinks by its length).
func placeMedia(prompt string, plain []engine.Span, media []engine.Media) (string, []engine.Media, []engine.Span) {
	marks := chat.FindMediaMarkers(prompt)
	var b strings.Builder
	b.Grow(len(prompt))
	var out []engine.Media
	prev := 0
	for _, mk := range marks {
		if mk.Index >= len(media) {
			continue // no medium of that number: the marker stays text
		}
		b.WriteString(prompt[prev:mk.Start])
		m := media[mk.Index]
		m.At = b.Len()
		out = append(out, m)
		prev = mk.End
	}
	b.WriteString(prompt[prev:])
	// shift maps an offset of prompt to the prompt without markers.
	shift := func(o int) int {
		cut := 0
		for _, mk := range marks {
			if mk.Index >= len(media) || mk.Start >= o {
				break
			}
			cut += min(o, mk.End) - mk.Start
		}
		return o - cut
	}
	spans := make([]engine.Span, 0, len(plain))
	for _, sp := range plain {
		if s, e := shift(sp.Start), shift(sp.End); s < e {
			spans = append(spans, engine.Span{Start: s, End: e})
		}
	}
	return b.String(), out, spans
}
