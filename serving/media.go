package serving

import (
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/media"
	"golang.org/x/sync/semaphore"
)

// Decoding the media clients send, for every dialect: within the
// Limits, in the handler's goroutine before a model is leased, into the
// engine's media (RGB pixels, 16 kHz mono samples), each named by the
// SHA-256 of its bytes as llama-server names them, so that a repeated
// image is found in the prefix cache.

// mediaBudget bounds the decoded media the requests being served hold:
// at most mediaDecoders requests decode at once (each within the
// Limits), and a decoded request holds its bytes of the budget until it
// is answered, waiting for them if need be. So decoded media never
// exceed the budget plus mediaDecoders requests' worth, however many
// requests queue.
type mediaBudget struct {
	gate  chan struct{}
	bytes *semaphore.Weighted
	max   int64
}

// mediaDecoders is how many requests decode their media at once.
const mediaDecoders = 4

func newMediaBudget(max int64) mediaBudget {
	return mediaBudget{gate: make(chan struct{}, mediaDecoders), bytes: semaphore.NewWeighted(max), max: max}
}

// decode decodes the body's media and takes their bytes from the
// budget, returning what gives them back.
func (b *mediaBudget) decode(ctx context.Context, body MediaBody, lim *Limits) (release func(), e *Error) {
	select {
	case b.gate <- struct{}{}:
	case <-ctx.Done():
		return nil, &Error{Status: 499, Message: ctx.Err().Error()}
	}
	defer func() { <-b.gate }()
	if e := body.CheckMedia(ctx, lim); e != nil {
		return nil, e
	}
	var n int64
	for _, m := range body.Media() {
		n += int64(len(m.RGB)) + 4*int64(len(m.PCM))
	}
	if n == 0 {
		return func() {}, nil
	}
	if n > b.max {
		return nil, OverLimit("", "max-media-memory", int(b.max), "bytes of decoded images and sounds", "the request's media decode to %d bytes", n)
	}
	if err := b.bytes.Acquire(ctx, n); err != nil {
		return nil, &Error{Status: 499, Message: err.Error()}
	}
	return func() { b.bytes.Release(n) }, nil
}

// AudioRate is the sample rate sounds are decoded at: that of every
// audio encoder llama.cpp has (the Whisper family's). Build refuses a
// model that wants another.
const AudioRate = 16000

// CheckMedia refuses more media than l allows in one request.
func (l *Limits) CheckMedia(n int, param string) *Error {
	if n > l.MaxMedia {
		return OverLimit(param, "max-media", l.MaxMedia, "images and sounds", "'%s' holds %d images and sounds", param, n)
	}
	return nil
}

// Image decodes the bytes of an image a client sent (PNG, JPEG, GIF or
// WebP); param names its field.
func (l *Limits) Image(ctx context.Context, data []byte, param string) (engine.Media, *Error) {
	img, err := media.DecodeImage(ctx, data, l.Media)
	if err != nil {
		return engine.Media{}, mediaError(err, param)
	}
	return engine.Media{RGB: img.RGB, W: img.W, H: img.H, ID: mediaID(data)}, nil
}

// MediaFetcher fetches a medium of kind k given by http(s) URL, within
// lim's bound on its bytes: media.Fetcher, of the hosts
// --allowed-media-domains lists. It returns the media type the response
// gives ("" for none) and the bytes; what it refuses is a *media.Error,
// and when ctx ends it returns ctx's error.
type MediaFetcher interface {
	Fetch(ctx context.Context, url string, k media.Kind, lim media.Limits) (mediaType string, data []byte, err error)
}

// ImageURL decodes an image given by URL: a base64 data URL, or an
// http(s) URL that l.MediaFetcher fetches (refused without one). The MIME
// type the data URL or the response names, if any, must be the bytes'.
func (l *Limits) ImageURL(ctx context.Context, url, param string) (engine.Media, *Error) {
	var mime string
	var data []byte
	var err error
	if u := strings.ToLower(url); strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") {
		if l.MediaFetcher == nil {
			return engine.Media{}, &Error{Status: http.StatusBadRequest, Param: param, Code: "invalid_image_url",
				Message: "'" + param + "' is an http(s) URL, and this server fetches no URLs (corral serve --allowed-media-domains lists none): send the image inline as a base64 data URL (data:image/png;base64,...)"}
		}
		mime, data, err = l.MediaFetcher.Fetch(ctx, url, media.KindImage, l.Media)
	} else {
		mime, data, err = media.ParseDataURL(url, media.KindImage, l.Media)
	}
	if err != nil {
		return engine.Media{}, mediaError(err, param)
	}
	if e := checkMIME(mime, data, param); e != nil {
		return engine.Media{}, e
	}
	return l.Image(ctx, data, param)
}

// ImageBase64 decodes an image given as base64 text of the MIME type
// mime ("" for any).
func (l *Limits) ImageBase64(ctx context.Context, b64, mime, param string) (engine.Media, *Error) {
	data, err := media.DecodeBase64(b64, media.KindImage, l.Media)
	if err != nil {
		return engine.Media{}, mediaError(err, param)
	}
	if e := checkMIME(mime, data, param); e != nil {
		return engine.Media{}, e
	}
	return l.Image(ctx, data, param)
}

// MediaSource is an image or a sound as a dialect read it from a
// request, not yet decoded: the dialects that translate a request
// before they decode its media (Anthropic, Responses, Ollama,
// /completion) collect them in order, the k-th standing where
// chat.MediaMarker(k) is, and decode them with Limits.DecodeMedia
// before the model is leased.
type MediaSource struct {
	// Param names the field that holds it, for errors.
	Param string
	// Kind is what the field takes: media.KindImage, media.KindAudio,
	// or media.KindUnknown for either, told by its bytes.
	Kind media.Kind
	// URL is an image's URL (a base64 data URL, or an http(s) URL,
	// fetched as Limits.ImageURL says); else Base64 is the medium's
	// bytes in base64.
	URL, Base64 string
	// Type is what the client says it is: an image's MIME type
	// ("image/png"), a sound's format ("wav"); "" says nothing.
	Type string
}

// DecodeMedia decodes srcs in order within l; more than --max-media of
// them are refused, naming param, before any is decoded.
func (l *Limits) DecodeMedia(ctx context.Context, srcs []MediaSource, param string) ([]engine.Media, *Error) {
	if len(srcs) == 0 {
		return nil, nil
	}
	if e := l.CheckMedia(len(srcs), param); e != nil {
		return nil, e
	}
	out := make([]engine.Media, len(srcs))
	for i, s := range srcs {
		var e *Error
		switch {
		case s.URL != "":
			out[i], e = l.ImageURL(ctx, s.URL, s.Param)
		case s.Kind == media.KindImage:
			out[i], e = l.ImageBase64(ctx, s.Base64, s.Type, s.Param)
		case s.Kind == media.KindAudio:
			out[i], e = l.AudioBase64(s.Base64, s.Type, s.Param)
		default:
			out[i], e = l.sniffed(ctx, s.Base64, s.Param)
		}
		if e != nil {
			return nil, e
		}
	}
	return out, nil
}

// sniffed decodes base64 bytes of an image or a sound, whichever they
// are.
func (l *Limits) sniffed(ctx context.Context, b64, param string) (engine.Media, *Error) {
	// Bounded by the larger of the two byte limits before decoding; the
	// decoder of the kind found applies its own.
	k := media.KindImage
	if l.Media.MaxAudioBytes > l.Media.MaxImageBytes {
		k = media.KindAudio
	}
	data, err := media.DecodeBase64(b64, k, l.Media)
	if err != nil {
		return engine.Media{}, mediaError(err, param)
	}
	switch kind, _ := media.Sniff(data); kind {
	case media.KindImage:
		return l.Image(ctx, data, param)
	case media.KindAudio:
		return l.Audio(data, "", param)
	}
	return engine.Media{}, &Error{Status: http.StatusBadRequest, Param: param, Code: "invalid_media",
		Message: "'" + param + "' is neither an image nor a sound this server reads (PNG, JPEG, GIF, WebP; WAV, MP3, FLAC)"}
}

// checkMIME refuses bytes that are not what their MIME type says.
func checkMIME(mime string, data []byte, param string) *Error {
	if mime == "" {
		return nil
	}
	kind, format := media.Sniff(data)
	want := strings.TrimPrefix(strings.TrimPrefix(mime, "image/"), "audio/")
	if want == "jpg" {
		want = media.FormatJPEG
	}
	if want == "x-wav" || want == "wave" {
		want = media.FormatWAV
	}
	if want == "mpeg" {
		want = media.FormatMP3
	}
	if want == "x-flac" {
		want = media.FormatFLAC
	}
	if kind == media.KindUnknown || format != want {
		got := format
		if got == "" {
			got = "not a format this server reads"
		}
		return Invalid(param, "'%s' says %s but its bytes are %s", param, mime, got)
	}
	return nil
}

// AudioBase64 decodes a sound given as base64 text in format ("wav",
// "mp3", "flac"; "" for any), at AudioRate.
func (l *Limits) AudioBase64(b64, format, param string) (engine.Media, *Error) {
	data, err := media.DecodeBase64(b64, media.KindAudio, l.Media)
	if err != nil {
		return engine.Media{}, mediaError(err, param)
	}
	return l.Audio(data, format, param)
}

// Audio decodes the bytes of a sound in format ("" for any), at
// AudioRate.
func (l *Limits) Audio(data []byte, format, param string) (engine.Media, *Error) {
	if format != "" {
		if _, got := media.Sniff(data); got != strings.ToLower(format) {
			return engine.Media{}, Invalid(param, "'%s' says format %q but its bytes are %s", param, format, orUnknown(got))
		}
	}
	pcm, err := media.DecodeAudio(data, AudioRate, l.Media)
	if err != nil {
		return engine.Media{}, mediaError(err, param)
	}
	return engine.Media{PCM: pcm, ID: mediaID(data)}, nil
}

func orUnknown(format string) string {
	if format == "" {
		return "not a format this server reads"
	}
	return format
}

// mediaID names a medium by its bytes, as llama-server does.
func mediaID(data []byte) string {
	h := media.Hash(data)
	return hex.EncodeToString(h[:])
}

// mediaError is the 400 for a medium package media refused.
func mediaError(err error, param string) *Error {
	var me *media.Error
	switch {
	case errors.As(err, &me) && me.Limit != "":
		return &Error{Status: http.StatusBadRequest, Param: param, Code: "limit_exceeded", Message: "'" + param + "': " + me.Msg}
	case errors.As(err, &me):
		return &Error{Status: http.StatusBadRequest, Param: param, Code: "invalid_" + me.Kind.String(), Message: "'" + param + "': " + me.Msg}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &Error{Status: 499, Message: err.Error()}
	}
	return &Error{Status: http.StatusInternalServerError, Message: err.Error()}
}

// checkModalities refuses media the model cannot take: a model without
// a projector, or without the encoder for that kind (param names the
// field of the prompt or messages).
func checkModalities(info engine.ModelInfo, ms []engine.Media, param string) *Error {
	for _, m := range ms {
		switch {
		case m.PCM != nil && info.Audio && info.AudioSampleRate != AudioRate:
			return &Error{Status: 400, Param: param, Code: "unsupported_modality", Message: "model " + info.Name + " takes audio at " + strconv.Itoa(info.AudioSampleRate) + " Hz, which this server does not resample to"}
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
func placeMedia(prompt string, plain []engine.Span, ms []engine.Media) (string, []engine.Media, []engine.Span) {
	marks := chat.FindMediaMarkers(prompt)
	var b strings.Builder
	b.Grow(len(prompt))
	var out []engine.Media
	prev := 0
	for _, mk := range marks {
		if mk.Index >= len(ms) {
			continue // no medium of that number: the marker stays text
		}
		b.WriteString(prompt[prev:mk.Start])
		m := ms[mk.Index]
		m.At = b.Len()
		out = append(out, m)
		prev = mk.End
	}
	b.WriteString(prompt[prev:])
	// shift maps an offset of prompt to the prompt without markers.
	shift := func(o int) int {
		cut := 0
		for _, mk := range marks {
			if mk.Index >= len(ms) || mk.Start >= o {
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
