package media

import (
	"bytes"
	"errors"
	"io"
	"strings"

	"github.com/hajimehoshi/go-mp3"
)

// mp3FrameBytes is the most one MP3 frame decodes to in go-mp3's stream
// of 16-bit stereo: 1152 samples (MPEG-1 layer III) of 4 bytes.
const mp3FrameBytes = 1152 * 4

// decodeMP3 is DecodeAudio for an MP3 file: its leading ID3v2 tags
// skipped, then decoded by go-mp3 one frame at a time, each frame mixed
// down and resampled into the clip before the next is decoded. go-mp3
// gives every frame as 16-bit stereo (a mono frame's samples twice) at
// the first frame's rate; it is given a plain io.Reader, so that it does
// not scan the whole file for its length first. go-mp3 indexes out of
// range on some malformed frames (found by FuzzDecodeAudio): such a panic
// is the MP3's error, as its state is this call's alone.
func decodeMP3(data []byte, rate int, lim Limits) (pcm []float32, err error) {
	defer func() {
		if r := recover(); r != nil {
			pcm, err = nil, invalid(KindAudio, nil, "audio is not a valid MP3: %v", r)
		}
	}()
	body, ok := pastID3(data)
	if !ok {
		return nil, invalid(KindAudio, nil, "MP3 file's ID3 tag runs past the end of the file")
	}
	d, err := mp3.NewDecoder(struct{ io.Reader }{bytes.NewReader(body)})
	if err != nil {
		return nil, invalid(KindAudio, err, "audio is not a valid MP3: %v", mp3Error(err))
	}
	c := newClip(d.SampleRate(), rate, lim, 0)
	var buf [mp3FrameBytes]byte
	for {
		// Each Read gives the rest of the frame decoded last, or the
		// next frame whole: a multiple of 4 bytes.
		n, err := d.Read(buf[:])
		if err := c.room(n / 4); err != nil {
			return nil, err
		}
		for i := 0; i+4 <= n; i += 4 {
			c.add(mix(2, func(ch int) float32 { return s16(buf[i+2*ch:]) }))
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, invalid(KindAudio, err, "audio is not a valid MP3: frame at %.2f s: %v", float64(c.frames)/float64(c.in), mp3Error(err))
		}
	}
	return c.finish()
}

// mp3Error is go-mp3's error without its package's prefix.
func mp3Error(err error) string { return strings.TrimPrefix(err.Error(), "mp3: ") }

// pastID3 returns data past its leading ID3v2 tags (a 10-byte header, a
// synchsafe size, 10 bytes more for a footer), and false when a tag runs
// past the end of data.
func pastID3(data []byte) ([]byte, bool) {
	for bytes.HasPrefix(data, []byte("ID3")) {
		if len(data) < 10 {
			return data, false
		}
		n := 10 + (int(data[6]&0x7f)<<21 | int(data[7]&0x7f)<<14 | int(data[8]&0x7f)<<7 | int(data[9]&0x7f))
		if data[5]&0x10 != 0 {
			n += 10
		}
		if n > len(data) {
			return data, false
		}
		data = data[n:]
	}
	return data, true
}
