package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/serving"
)

// CheckMedia decodes the images (image_url parts) and sounds
// (input_audio parts) of the messages, within lim, into the request's
// media, and puts in each one's place the part that stands for it
// (chat.MediaPart).
func (body *chatRequest) CheckMedia(ctx context.Context, lim *serving.Limits) *serving.Error {
	ms, e := messageMedia(ctx, body.req.Messages, lim)
	body.req.Media = ms
	return e
}

// Media returns the request's media, decoded by CheckMedia.
func (body *chatRequest) Media() []engine.Media { return body.req.Media }

// mediaPart is what an OpenAI content part may hold of a medium.
type mediaPart struct {
	Type     string `json:"type"`
	ImageURL *struct {
		URL string `json:"url"`
	} `json:"image_url"`
	InputAudio *struct {
		Data   string `json:"data"`
		Format string `json:"format"`
	} `json:"input_audio"`
}

// messageMedia decodes the media parts of msgs' contents and rewrites
// those contents with chat.MediaPart in their place. A content without
// one is left as it is, byte for byte.
func messageMedia(ctx context.Context, msgs []chat.Message, lim *serving.Limits) ([]engine.Media, *serving.Error) {
	var out []engine.Media
	for i := range msgs {
		c := bytes.TrimSpace(msgs[i].Content)
		if len(c) == 0 || c[0] != '[' || !bytes.Contains(c, []byte(`"image_url"`)) && !bytes.Contains(c, []byte(`"input_audio"`)) {
			continue
		}
		var parts []json.RawMessage
		if err := json.Unmarshal(c, &parts); err != nil {
			continue // Text says what is wrong with it
		}
		changed := false
		for j, raw := range parts {
			var p mediaPart
			if json.Unmarshal(raw, &p) != nil || (p.Type != "image_url" && p.Type != "input_audio") {
				continue
			}
			param := fmt.Sprintf("messages[%d].content[%d]", i, j)
			if e := lim.CheckMedia(len(out)+1, "messages"); e != nil {
				return nil, e
			}
			var m engine.Media
			var e *serving.Error
			switch {
			case p.Type == "image_url" && p.ImageURL != nil:
				m, e = lim.ImageURL(ctx, p.ImageURL.URL, param+".image_url.url")
			case p.Type == "image_url":
				e = serving.Invalid(param, "'%s' has no image_url", param)
			case p.InputAudio != nil:
				m, e = lim.AudioBase64(p.InputAudio.Data, p.InputAudio.Format, param+".input_audio.data")
			default:
				e = serving.Invalid(param, "'%s' has no input_audio", param)
			}
			if e != nil {
				return nil, e
			}
			parts[j] = chat.MediaPart(len(out))
			out = append(out, m)
			changed = true
		}
		if changed {
			b, err := json.Marshal(parts)
			if err != nil {
				return nil, &serving.Error{Status: 500, Message: err.Error()}
			}
			msgs[i].Content = b
		}
	}
	return out, nil
}
