package llamacpp

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/media"
)

// TestParsePrompt: llama-server's prompt object, alone or the one
// element of an array: with multimodal_data each <__media__> becomes the
// next medium's marker, and markers and media must pair up; without it
// the text is a plain prompt, markers and all. The other forms are
// serving.ParsePrompt's.
func TestParsePrompt(t *testing.T) {
	for _, tc := range []struct {
		raw, text, param string
		media            []string
	}{
		{raw: `"a<__media__>"`, text: "a<__media__>"},
		{raw: `[1,2]`},
		{raw: `{"prompt_string":"a<__media__>b"}`, text: "a<__media__>b"},
		{raw: `{"prompt_string":"a<__media__>b<__media__>","multimodal_data":["AA==","BB=="]}`, text: "a" + chat.MediaMarker(0) + "b" + chat.MediaMarker(1), media: []string{"AA==", "BB=="}},
		{raw: ` [ {"prompt_string":"<__media__>x","multimodal_data":["AA=="]} ]`, text: chat.MediaMarker(0) + "x", media: []string{"AA=="}},
		{raw: `{"prompt_string":"x","multimodal_data":[]}`, text: "x"},
		{raw: `{"prompt_string":"a<__media__>","multimodal_data":[]}`, param: "prompt.multimodal_data"},
		{raw: `{"prompt_string":"a","multimodal_data":["AA=="]}`, param: "prompt.multimodal_data"},
		{raw: `{"prompt_string":"a<__media__>","multimodal_data":[1]}`, param: "prompt.multimodal_data[0]"},
		{raw: `{"multimodal_data":["AA=="]}`, param: "prompt.prompt_string"},
		{raw: `[{"prompt_string":"a"},{"prompt_string":"b"}]`, param: "prompt"},
		{raw: `{"prompt_string":1}`, param: "prompt"},
	} {
		p, srcs, e := parsePrompt(json.RawMessage(tc.raw))
		if tc.param != "" {
			if e == nil || e.Status != 400 || e.Param != tc.param {
				t.Errorf("%s: %+v; want a 400 naming %s", tc.raw, e, tc.param)
			}
			continue
		}
		if e != nil {
			t.Errorf("%s: %s", tc.raw, e.Message)
			continue
		}
		var got []string
		for k, s := range srcs {
			if s.Kind != media.KindUnknown || s.Param != fmt.Sprintf("prompt.multimodal_data[%d]", k) {
				t.Errorf("%s: source %d %+v", tc.raw, k, s)
			}
			got = append(got, s.Base64)
		}
		if p.Text != tc.text || strings.Join(got, ",") != strings.Join(tc.media, ",") {
			t.Errorf("%s: %q %q; want %q %q", tc.raw, p.Text, got, tc.text, tc.media)
		}
	}
}
