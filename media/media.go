// Package media decodes the images and audio clients send, within bounds,
// into what llama.cpp's multimodal library (mtmd) takes: RGB pixels, 3
// bytes a pixel, and mono float32 PCM at the projector's sample rate.
//
// Every decoder checks its bounds before the work they bound: the encoded
// size first (for base64, on the encoded length, before decoding), then the
// size a header declares (an image's width × height, a WAV's duration), and
// only then does it decode; MP3 and FLAC, whose headers need not tell their
// length, are decoded frame by frame and refused as soon as they pass the
// seconds bound. What it allocates is proportional to the bound, never to
// what a header claims.
//
// The results match what llama.cpp's mtmd_helper_bitmap_init_from_buf gives
// for the same bytes where that is practical: stb_image's
// stbi_load_from_memory(..., 3) for PNG and GIF, bit for bit, and miniaudio's
// ma_decoder (f32, mono, the projector's rate) for WAV, bit for bit,
// resampling included. JPEG differs from stb's by the IDCT and chroma
// upsampling (a level or two); WebP, which stb cannot read, adds a format.
// MP3 (go-mp3) comes close to miniaudio's dr_mp3 but not bit for bit; FLAC
// is bit for bit dr_flac's. Ogg is refused as not supported
// (ErrUnsupported).
package media

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
)

// Limits bound what one medium may cost before it is decoded. A zero or
// negative field means DefaultLimits' value.
type Limits struct {
	// MaxImageBytes bounds an image's encoded bytes (--max-image-bytes).
	MaxImageBytes int64
	// MaxImagePixels bounds an image's width × height
	// (--max-image-pixels). A side is at most MaxImageSide whatever this
	// allows.
	MaxImagePixels int64
	// MaxAudioBytes bounds an audio file's encoded bytes
	// (--max-audio-bytes).
	MaxAudioBytes int64
	// MaxAudioSeconds bounds an audio clip's duration
	// (--max-audio-seconds).
	MaxAudioSeconds float64
}

// MaxImageSide is the most pixels an image's width or height may have.
const MaxImageSide = 16384

// MinAudioSeconds is the shortest audio clip taken. mtmd asserts that a
// clip has more than one sample; a clip this short holds nothing to hear.
const MinAudioSeconds = 0.1

// DefaultLimits returns the bounds in place of zero Limits fields: 20 MiB
// and 16,777,216 pixels (4096 × 4096) an image, 25 MiB and 300 seconds an
// audio clip (OpenAI's transcription endpoint takes 25 MB).
func DefaultLimits() Limits {
	return Limits{
		MaxImageBytes:   20 << 20,
		MaxImagePixels:  16_777_216,
		MaxAudioBytes:   25 << 20,
		MaxAudioSeconds: 300,
	}
}

// WithDefaults returns l with its zero fields set from DefaultLimits.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.MaxImageBytes <= 0 {
		l.MaxImageBytes = d.MaxImageBytes
	}
	if l.MaxImagePixels <= 0 {
		l.MaxImagePixels = d.MaxImagePixels
	}
	if l.MaxAudioBytes <= 0 {
		l.MaxAudioBytes = d.MaxAudioBytes
	}
	if l.MaxAudioSeconds <= 0 {
		l.MaxAudioSeconds = d.MaxAudioSeconds
	}
	return l
}

// maxBytes is l's bound on the encoded bytes of a medium of kind k, and
// the flag that sets it.
func (l Limits) maxBytes(k Kind) (int64, string) {
	l = l.WithDefaults()
	if k == KindAudio {
		return l.MaxAudioBytes, "max-audio-bytes"
	}
	return l.MaxImageBytes, "max-image-bytes"
}

// Kind is what a medium is: an image or audio.
type Kind int

// The kinds of media. KindUnknown, the zero Kind, is bytes Sniff does
// not recognise.
const (
	KindUnknown Kind = iota
	KindImage
	KindAudio
)

// String is "image", "audio" or "unknown".
func (k Kind) String() string {
	switch k {
	case KindImage:
		return "image"
	case KindAudio:
		return "audio"
	}
	return "unknown"
}

// Error is a medium refused: over a bound, malformed, or in a format not
// taken. Every one is the client's (an HTTP 400).
type Error struct {
	// Kind is what the medium was to be.
	Kind Kind
	// Limit names the `corral serve` flag of the bound the medium is
	// over, without its dashes ("max-image-pixels"); it is "" when the
	// medium is refused for what it holds.
	Limit string
	// Msg says what is wrong, naming the flag when Limit is set: "image is
	// 20000 × 20000 pixels, over --max-image-pixels 16777216".
	Msg string
	err error
}

// Error returns e.Msg.
func (e *Error) Error() string { return e.Msg }

// Unwrap returns ErrUnsupported for a format not taken yet, else the
// decoder's own error if there was one.
func (e *Error) Unwrap() error { return e.err }

// ErrUnsupported is wrapped by the Error for a medium in a format that is
// recognised but not decoded (Ogg, a WAV codec other than PCM and IEEE
// float).
var ErrUnsupported = errors.New("format not supported")

// overLimit is the Error for a medium of kind k over the bound flag.
func overLimit(k Kind, flag, format string, args ...any) *Error {
	return &Error{Kind: k, Limit: flag, Msg: fmt.Sprintf(format, args...)}
}

// invalid is the Error for a malformed medium of kind k, wrapping err
// (which may be nil).
func invalid(k Kind, err error, format string, args ...any) *Error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...), err: err}
}

// Hash is the SHA-256 of a medium's encoded bytes, as llama-server keys
// media in its prompt cache (mtmd_helper_bitmap_init_from_buf's id is its
// hex form).
func Hash(data []byte) [32]byte { return sha256.Sum256(data) }

// The formats Sniff names.
const (
	FormatPNG  = "png"
	FormatJPEG = "jpeg"
	FormatGIF  = "gif"
	FormatWebP = "webp"
	FormatWAV  = "wav"
	FormatMP3  = "mp3"
	FormatFLAC = "flac"
	FormatOgg  = "ogg"
)

// Sniff tells what data is from its first bytes: the kind and the format
// (FormatPNG…FormatOgg), or KindUnknown and "". Dialects check a MIME type or
// format a client claims against it. MP3 is an ID3 tag or an MPEG audio
// frame header (sync, a valid version and layer), a little stricter than
// mtmd's check, which takes any 0xFFE sync; ID3 tags followed by "fLaC"
// are FLAC.
func Sniff(data []byte) (Kind, string) {
	switch {
	case bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")):
		return KindImage, FormatPNG
	case bytes.HasPrefix(data, []byte("\xff\xd8\xff")):
		return KindImage, FormatJPEG
	case bytes.HasPrefix(data, []byte("GIF87a")), bytes.HasPrefix(data, []byte("GIF89a")):
		return KindImage, FormatGIF
	case len(data) >= 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "WEBP":
		return KindImage, FormatWebP
	case len(data) >= 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "WAVE":
		return KindAudio, FormatWAV
	case bytes.HasPrefix(data, []byte("fLaC")):
		return KindAudio, FormatFLAC
	case bytes.HasPrefix(data, []byte("OggS")):
		return KindAudio, FormatOgg
	case bytes.HasPrefix(data, []byte("ID3")):
		// MP3's tag, which a FLAC file may start with too.
		if rest, _ := pastID3(data); bytes.HasPrefix(rest, []byte("fLaC")) {
			return KindAudio, FormatFLAC
		}
		return KindAudio, FormatMP3
	case len(data) >= 4 && data[0] == 0xff && data[1]&0xe0 == 0xe0 &&
		(data[1]>>3)&3 != 1 && (data[1]>>1)&3 != 0 && data[2]>>4 != 15:
		// Frame sync, then a version that is not the reserved 01, a
		// layer that is not the reserved 00 (ADTS AAC has 00) and a
		// bitrate index that is not the invalid 1111.
		return KindAudio, FormatMP3
	}
	return KindUnknown, ""
}
