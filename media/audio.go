package media

import (
	"encoding/binary"
	"fmt"
	"math"
)

// DecodeAudio decodes a WAV, MP3 or FLAC file into mono float32 samples
// at rate Hz, as llama.cpp's mtmd helper gets them from miniaudio
// (ma_decoder_config_init(ma_format_f32, 1, rate)):
//   - WAV: PCM of 8 (unsigned), 16, 24 or 32 bits (or any width up to 64
//     in whole bytes) and IEEE float of 32 or 64 bits, plain or
//     WAVE_FORMAT_EXTENSIBLE, 1 to 256 channels; each sample scaled to
//     [-1, 1) as dr_wav does (x/32768 for 16 bits). Bit for bit
//     miniaudio's.
//   - MP3: MPEG-1 and MPEG-2 layer III (hajimehoshi/go-mp3), 16-bit
//     samples scaled as WAV's. Close to miniaudio's (dr_mp3) but not
//     equal: the decoders round differently, and go-mp3 decodes a
//     Xing/Info frame as a frame of silence where dr_mp3 skips it.
//   - FLAC: 4 to 32 bits, 1 to 8 channels (decodeFLAC), scaled as 32-bit
//     WAV samples once shifted to the top of 32 bits (x/32768 for 16 bits);
//     bit for bit miniaudio's (dr_flac) for the files tested.
//
// Then, whatever the format: the channels averaged into one (miniaudio's
// mono downmix); resampled, when the file's rate (1 to 384000 Hz) is not
// rate, by miniaudio's linear resampler with its 4th-order low-pass
// filter, to as many samples as ma_decoder_get_length_in_pcm_frames says
// (zeros past what the resampler yields, as mtmd's buffer holds).
//
// It refuses, before decoding: more bytes than lim.MaxAudioBytes; bytes
// that are none of those formats (Ogg with an error wrapping
// ErrUnsupported); a malformed header; for WAV, a clip longer than
// lim.MaxAudioSeconds. MP3 and FLAC hold no length to trust, so they are
// decoded frame by frame, each frame resampled as it comes, and refused as
// soon as their frames pass lim.MaxAudioSeconds, whatever their headers
// claim: what is kept is the output, at most lim.MaxAudioSeconds × rate
// samples, and one frame's samples (a FLAC frame's header is checked
// before its samples are decoded). A clip shorter than MinAudioSeconds is
// refused. A WAV's length is the frames the file holds: a data chunk
// claiming more than the file has is cut to the file, as dr_wav does.
// Float samples that are not finite are refused. Every error is an *Error
// but for a rate outside 1 to 384000 Hz, which is the caller's mistake.
func DecodeAudio(data []byte, rate int, lim Limits) ([]float32, error) {
	lim = lim.WithDefaults()
	if n := int64(len(data)); n > lim.MaxAudioBytes {
		return nil, overLimit(KindAudio, "max-audio-bytes", "audio is %d bytes, over --max-audio-bytes %d", n, lim.MaxAudioBytes)
	}
	if rate < 1 || rate > maxAudioRate {
		return nil, fmt.Errorf("media: sample rate %d out of range", rate)
	}
	switch kind, format := Sniff(data); {
	case format == FormatWAV:
		return decodeWAV(data, rate, lim)
	case format == FormatMP3:
		return decodeMP3(data, rate, lim)
	case format == FormatFLAC:
		return decodeFLAC(data, rate, lim)
	case kind == KindAudio:
		return nil, &Error{Kind: KindAudio, Msg: fmt.Sprintf("%s audio is not supported: send %s", formatName(format), AudioFormats), err: ErrUnsupported}
	default:
		return nil, invalid(KindAudio, nil, "audio format not recognised: want %s", AudioFormats)
	}
}

// AudioFormats names the audio formats DecodeAudio reads, for messages.
const AudioFormats = "WAV, MP3 or FLAC"

// decodeWAV is DecodeAudio for a WAV file.
func decodeWAV(data []byte, rate int, lim Limits) ([]float32, error) {
	w, err := parseWAV(data)
	if err != nil {
		return nil, err
	}
	secs := float64(w.frames) / float64(w.rate)
	if secs > lim.MaxAudioSeconds {
		return nil, overLimit(KindAudio, "max-audio-seconds", "audio is %.2f seconds long, over --max-audio-seconds %g", secs, lim.MaxAudioSeconds)
	}
	if err := w.checkFinite(); err != nil {
		return nil, err
	}
	c := newClip(w.rate, rate, lim, int64(w.frames))
	for i := range w.frames {
		c.add(w.mono(i))
	}
	return c.finish()
}

// clip is a sound being decoded: its frames, mixed down to mono, are fed
// one by one to the resampler, so that what it keeps is its output alone.
type clip struct {
	in, out   int   // rates
	maxFrames int64 // frames at in that lim.MaxAudioSeconds allows
	maxSecs   float64
	frames    int64      // frames taken
	rs        *resampler // nil when in == out
	pcm       []float32
}

// newClip starts a clip of frames at in Hz (1 to maxAudioRate) to be
// resampled to out Hz. expect, if positive, is the frames the caller
// expects, which sizes the output up front (within the bound).
func newClip(in, out int, lim Limits, expect int64) *clip {
	c := &clip{in: in, out: out, maxFrames: int64(math.Floor(lim.MaxAudioSeconds * float64(in))), maxSecs: lim.MaxAudioSeconds}
	if in != out {
		c.rs = newResampler(uint32(in), uint32(out))
	}
	if expect > 0 {
		// With room for add's check at the end.
		c.pcm = make([]float32, 0, int(resampledLen(uint64(out), uint64(in), uint64(min(expect, c.maxFrames))))+2*c.most())
	}
	return c
}

// room refuses n more frames if they take the clip past the seconds
// bound. Decoders call it before they decode or add the frames.
func (c *clip) room(n int) error {
	if c.frames+int64(n) > c.maxFrames {
		return overLimit(KindAudio, "max-audio-seconds", "audio is longer than --max-audio-seconds %g", c.maxSecs)
	}
	return nil
}

// most is the most output frames one input frame completes, and one.
func (c *clip) most() int { return (c.out+c.in-1)/c.in + 1 }

// add takes one mono frame.
func (c *clip) add(x float32) {
	// Room for what the frame completes: the output's capacity doubles (append's grows by a quarter
	// once large, which allocates five times the output all told), up to
	// what the bound allows.
	most := c.most()
	if cap(c.pcm)-len(c.pcm) < most {
		n := 2 * cap(c.pcm)
		if limit := int(resampledLen(uint64(c.out), uint64(c.in), uint64(c.maxFrames))) + most; n > limit && limit >= len(c.pcm)+most {
			n = limit
		}
		grown := make([]float32, len(c.pcm), max(n, len(c.pcm)+most, 1024))
		copy(grown, c.pcm)
		c.pcm = grown
	}
	c.frames++
	if c.rs == nil {
		c.pcm = append(c.pcm, x)
		return
	}
	c.pcm = c.rs.push(x, c.pcm)
}

// finish refuses a clip under MinAudioSeconds and returns its samples:
// resampledLen of them, cut or padded with zeros.
func (c *clip) finish() ([]float32, error) {
	if secs := float64(c.frames) / float64(c.in); secs < MinAudioSeconds {
		return nil, invalid(KindAudio, nil, "audio is %.3f seconds long: at least %g s is needed", secs, MinAudioSeconds)
	}
	n := int(resampledLen(uint64(c.out), uint64(c.in), uint64(c.frames)))
	if n <= len(c.pcm) {
		return c.pcm[:n], nil
	}
	return append(c.pcm, make([]float32, n-len(c.pcm))...), nil
}

// mix averages one frame's channels as miniaudio's channel converter
// mixes down to mono (ma_channel_converter_process_pcm_frames__mono_out,
// f32): summed in float from 0, divided by the channel count. sample(c)
// is channel c's sample.
func mix(channels int, sample func(c int) float32) float32 {
	if channels == 1 {
		return sample(0)
	}
	var t float32
	for c := range channels {
		t += sample(c)
	}
	return t / float32(channels)
}

// maxAudioRate is the highest sample rate taken, in any format: dr_wav's
// (MA_DR_WAV_MAX_SAMPLE_RATE).
const maxAudioRate = 384000

// The WAV format tags taken (a WAVE_FORMAT_EXTENSIBLE file's subformat
// GUID starts with one).
const (
	wavPCM        = 1
	wavFloat      = 3
	wavExtensible = 0xfffe
)

// wav is a parsed WAV file: its format and its sample data, whole frames.
type wav struct {
	tag            uint16 // wavPCM or wavFloat
	channels, rate int
	bytesPerSample int
	frames         int
	data           []byte // frames × channels × bytesPerSample
}

// parseWAV reads a RIFF WAVE file's "fmt " and "data" chunks as dr_wav
// (ma_dr_wav_init__internal) does: chunks are word aligned and unknown ones
// skipped; "fmt " must come before "data", which ends the header; the
// frame size is bits × channels / 8, or the block align when the bits are
// not whole bytes; the data is cut to the file and to whole frames.
func parseWAV(b []byte) (*wav, error) {
	var (
		haveFmt                       bool
		tag                           uint16
		channels, rate, bits, blockAl int
	)
	off := 12
	for {
		if off+8 > len(b) {
			if !haveFmt {
				return nil, invalid(KindAudio, nil, "WAV file has no fmt chunk")
			}
			return nil, invalid(KindAudio, nil, "WAV file has no data chunk")
		}
		id := string(b[off : off+4])
		size := int64(binary.LittleEndian.Uint32(b[off+4:]))
		body := b[off+8:]
		if id == "data" {
			if !haveFmt {
				return nil, invalid(KindAudio, nil, "WAV file has its data chunk before its fmt chunk")
			}
			if int64(len(body)) > size {
				body = body[:size]
			}
			return newWAV(tag, channels, rate, bits, blockAl, body)
		}
		if id == "fmt " {
			if size < 16 || len(body) < 16 {
				return nil, invalid(KindAudio, nil, "WAV fmt chunk is truncated")
			}
			haveFmt = true
			tag = binary.LittleEndian.Uint16(body)
			channels = int(binary.LittleEndian.Uint16(body[2:]))
			rate = int(binary.LittleEndian.Uint32(body[4:]))
			blockAl = int(binary.LittleEndian.Uint16(body[12:]))
			bits = int(binary.LittleEndian.Uint16(body[14:]))
			if size > 16 {
				if len(body) < 18 {
					return nil, invalid(KindAudio, nil, "WAV fmt chunk is truncated")
				}
				ext := int64(binary.LittleEndian.Uint16(body[16:]))
				if tag == wavExtensible {
					// dr_wav takes only the 22-byte extension:
					// valid bits, channel mask, subformat GUID.
					if ext != 22 || size < 18+22 || len(body) < 18+22 {
						return nil, invalid(KindAudio, nil, "WAV fmt chunk's extension is %d bytes, not 22", ext)
					}
					tag = binary.LittleEndian.Uint16(body[18+6:])
				}
			} else if tag == wavExtensible {
				return nil, invalid(KindAudio, nil, "WAV fmt chunk is WAVE_FORMAT_EXTENSIBLE without its extension")
			}
		}
		next := int64(off) + 8 + size + size&1
		if next > int64(len(b)) {
			return nil, invalid(KindAudio, nil, "WAV %q chunk runs past the end of the file", id)
		}
		off = int(next)
	}
}

// newWAV checks a WAV's format and takes its data's whole frames.
func newWAV(tag uint16, channels, rate, bits, blockAlign int, data []byte) (*wav, error) {
	if rate < 1 || rate > maxAudioRate || channels < 1 || channels > 256 || bits < 1 || bits > 64 || blockAlign == 0 {
		return nil, invalid(KindAudio, nil, "WAV format is invalid: %d Hz, %d channels, %d bits, block align %d", rate, channels, bits, blockAlign)
	}
	frame := blockAlign
	if bits%8 == 0 {
		frame = bits * channels / 8
	}
	w := &wav{tag: tag, channels: channels, rate: rate, bytesPerSample: frame / channels}
	if frame%channels != 0 || w.bytesPerSample == 0 {
		return nil, invalid(KindAudio, nil, "WAV frame of %d bytes does not hold %d channels", frame, channels)
	}
	switch {
	case tag == wavPCM && w.bytesPerSample <= 8:
	case tag == wavFloat && (w.bytesPerSample == 4 || w.bytesPerSample == 8):
	case tag == wavPCM || tag == wavFloat:
		return nil, invalid(KindAudio, nil, "WAV samples of %d bytes are not supported", w.bytesPerSample)
	default:
		return nil, &Error{Kind: KindAudio, Msg: fmt.Sprintf("WAV codec 0x%04x is not supported: want PCM or IEEE float", tag), err: ErrUnsupported}
	}
	w.frames = len(data) / frame
	w.data = data[:w.frames*frame]
	return w, nil
}

// checkFinite refuses float samples that are NaN or infinite (64-bit ones
// too large for float32 become infinite).
func (w *wav) checkFinite() error {
	if w.tag != wavFloat {
		return nil
	}
	for i, n := 0, w.frames*w.channels; i < n; i++ {
		if v := w.sample(i); math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return invalid(KindAudio, nil, "WAV sample %d is %v", i, v)
		}
	}
	return nil
}

// sample is sample i (frame × channels + channel) as a float32, as dr_wav
// converts it (ma_dr_wav__pcm_to_f32, ma_dr_wav__ieee_to_f32).
func (w *wav) sample(i int) float32 {
	b := w.data[i*w.bytesPerSample:]
	if w.tag == wavFloat {
		if w.bytesPerSample == 4 {
			return math.Float32frombits(binary.LittleEndian.Uint32(b))
		}
		return float32(math.Float64frombits(binary.LittleEndian.Uint64(b)))
	}
	switch w.bytesPerSample {
	case 1: // ma_dr_wav_u8_to_f32: x * 0.00784313725490196078f - 1, in float
		return float32(float32(b[0])*float32(0.00784313725490196078)) - 1
	case 2:
		return s16(b)
	case 3: // ma_dr_wav_s24_to_f32: (float)(x * 0.00000011920928955078125)
		x := int32(uint32(b[0])<<8|uint32(b[1])<<16|uint32(b[2])<<24) >> 8
		return float32(float64(x) * 0.00000011920928955078125)
	case 4: // ma_dr_wav_s32_to_f32: (float)(x / 2147483648.0)
		return float32(float64(int32(binary.LittleEndian.Uint32(b))) / 2147483648.0)
	}
	// Wider: the bytes at the top of an int64, over INT64_MAX.
	var v uint64
	shift := uint(8-w.bytesPerSample) * 8
	for j := 0; j < w.bytesPerSample; j++ {
		v |= uint64(b[j]) << shift
		shift += 8
	}
	return float32(float64(int64(v)) / 9223372036854775807.0)
}

// s16 is a little-endian signed 16-bit sample as a float32, as dr_wav
// converts it (ma_dr_wav_s16_to_f32: x * 0.000030517578125f).
func s16(b []byte) float32 {
	return float32(int16(binary.LittleEndian.Uint16(b))) * 0.000030517578125
}

// mono is frame i's channels averaged (mix).
func (w *wav) mono(i int) float32 {
	return mix(w.channels, func(c int) float32 { return w.sample(i*w.channels + c) })
}

// resampledLen is the frames ma_decoder_get_length_in_pcm_frames gives for
// n frames at rate in resampled to rate out
// (ma_calculate_frame_count_after_resampling), which is mtmd's buffer.
func resampledLen(out, in, n uint64) uint64 {
	if in == 0 || out == 0 || n == 0 {
		return 0
	}
	if in == out {
		return n
	}
	count := n * out / in
	fromFrac := count * (in / out) / out
	if count*(in%out)+fromFrac <= n {
		count++
	}
	return count
}

// resampler is miniaudio's linear resampler (ma_linear_resampler, f32,
// one channel) with its default 4th-order low-pass filter, two cascaded
// Butterworth biquads (ma_lpf, ma_lpf2, ma_biquad in direct form 2
// transposed). Rates are reduced by their greatest common divisor, and
// the filter is designed at the higher reduced rate with its cutoff at
// half the lower, as ma_linear_resampler_set_rate_internal does.
type resampler struct {
	in, out           uint32 // reduced rates
	advInt, advFrac   uint32
	timeInt, timeFrac uint32
	x0, x1            float32
	lpf               [2]biquad
}

// biquad is one second-order section, normalised, and its state.
type biquad struct {
	b0, b1, b2, a1, a2 float32
	r1, r2             float32
}

func newResampler(in, out uint32) *resampler {
	g := gcd(in, out)
	r := &resampler{in: in / g, out: out / g, timeInt: 1}
	r.advInt, r.advFrac = r.in/r.out, r.in%r.out
	lpfRate := max(r.in, r.out)
	cutoff := float64(min(r.in, r.out)) * 0.5 * 1 // lpfNyquistFactor 1
	const order = 4
	for i := range r.lpf {
		// ma_lpf_reinit__internal: even order, q = 1 / (2 cos a).
		a := float64(1+uint32(i)*2) * (math.Pi / float64(order*2))
		q := 1 / (2 * cosd(a))
		r.lpf[i] = lpf2(lpfRate, cutoff, q)
	}
	return r
}

func gcd(a, b uint32) uint32 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// cosd is miniaudio's ma_cosd: sin(π/2 - x).
func cosd(x float64) float64 { return math.Sin(math.Pi*0.5 - x) }

// lpf2 is ma_lpf2__get_biquad_config's low-pass biquad, normalised to
// float as ma_biquad_reinit does.
func lpf2(rate uint32, cutoff, q float64) biquad {
	w := 2 * math.Pi * cutoff / float64(rate)
	s := math.Sin(w)
	c := cosd(w)
	a := s / (2 * q)
	b0, b1, b2 := (1-c)/2, 1-c, (1-c)/2
	a0, a1, a2 := 1+a, -2*c, 1-a
	return biquad{b0: float32(b0 / a0), b1: float32(b1 / a0), b2: float32(b2 / a0), a1: float32(a1 / a0), a2: float32(a2 / a0)}
}

// process is ma_biquad_process_pcm_frame_f32__direct_form_2_transposed;
// each product is rounded to float before it is added, as C does here
// (no fused multiply-add).
func (q *biquad) process(x float32) float32 {
	y := float32(q.b0*x) + q.r1
	q.r1 = float32(float32(q.b1*x)-float32(q.a1*y)) + q.r2
	q.r2 = float32(q.b2*x) - float32(q.a2*y)
	return y
}

func (r *resampler) filter(x float32) float32 {
	for i := range r.lpf {
		x = r.lpf[i].process(x)
	}
	return x
}

// push takes the next input frame and appends to out the output frames
// it completes, as ma_linear_resampler_process_pcm_frames_f32 does over
// the whole stream: downsampling filters each input frame as it is
// loaded, upsampling each output frame; frames are interpolated by
// ma_mix_f32_fast, x0 + (x1 - x0)·a, with a = timeFrac / out in float.
func (r *resampler) push(x float32, out []float32) []float32 {
	down := r.in > r.out
	r.x0, r.x1 = r.x1, x
	if down {
		r.x1 = r.filter(r.x1)
	}
	r.timeInt--
	for r.timeInt == 0 {
		a := float32(r.timeFrac) / float32(r.out)
		y := r.x0 + float32((r.x1-r.x0)*a)
		if !down {
			y = r.filter(y)
		}
		out = append(out, y)
		r.timeInt += r.advInt
		r.timeFrac += r.advFrac
		if r.timeFrac >= r.out {
			r.timeFrac -= r.out
			r.timeInt++
		}
	}
	return out
}
