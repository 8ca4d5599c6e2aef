package gguf

import (
	"strings"
	"testing"
)

func TestParseShape(t *testing.T) {
	tiny := Shapes["tiny"]
	tinyF32 := tiny
	tinyF32.Type = "f32"
	for _, tc := range []struct {
		in   string
		want Shape
	}{
		{"135m", Shape{576, 30, 9, 3, 1536, 49152, 2048, "q8_0", false, 0, 0, 0, false}},
		{"tiny", tiny},
		{"tiny,type=f32", tinyF32},
		{"embd=576,layers=30,heads=9,kv=3,ff=1536,vocab=49152,ctx=2048,type=q8_0", Shapes["135m"]},
		{" embd=64, layers=1, heads=2, ff=64, vocab=300, ctx=32 ", Shape{64, 1, 2, 2, 64, 300, 32, "q8_0", false, 0, 0, 0, false}},
		{"tiny,chatml=true", Shape{64, 2, 4, 2, 128, 512, 256, "q8_0", true, 0, 0, 0, false}},
		{Shape{64, 2, 4, 2, 128, 512, 256, "q8_0", true, 0, 0, 0, false}.String(), Shape{64, 2, 4, 2, 128, 512, 256, "q8_0", true, 0, 0, 0, false}},
		{Shapes["135m"].String(), Shapes["135m"]},
		{"135m,copy=true", Shape{576, 30, 9, 3, 1536, 49152, 2048, "q8_0", false, 0, 0, 0, true}},
		{Shape{576, 30, 9, 3, 1536, 49152, 2048, "q8_0", false, 0, 0, 0, true}.String(), Shape{576, 30, 9, 3, 1536, 49152, 2048, "q8_0", false, 0, 0, 0, true}},
		{"tiny,mtp=1", Shape{64, 2, 4, 2, 128, 512, 256, "q8_0", false, 0, 0, 1, false}},
		{Shape{64, 2, 4, 2, 128, 512, 256, "q8_0", false, 0, 0, 1, false}.String(), Shape{64, 2, 4, 2, 128, 512, 256, "q8_0", false, 0, 0, 1, false}},
	} {
		got, err := ParseShape(tc.in)
		if err != nil {
			t.Errorf("ParseShape(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseShape(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestParseShapeErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "neither a known shape"},
		{"huge", "neither a known shape"},
		{"tiny,depth=3", `unknown key "depth"`},
		{"tiny,embd=x", "embd"},
		{"embd=64,layers=2", "heads=0"},
		{"tiny,type=q4_0", `type "q4_0"`},
		{"tiny,embd=48", "multiple of 32"},
		{"tiny,embd=96,heads=5,kv=5,type=f32", "not a multiple of heads"},
		{"tiny,heads=4,kv=3", "not a multiple of kv"},
		{"tiny,embd=96,heads=32,kv=32,type=f32", "odd"},
		{"tiny,vocab=259", "vocab=259"},
		{"tiny,layers=0", "layers=0"},
		{"tiny,ctx=-1", "ctx=-1"},
		{"tiny,ff=100", "ff=100"},
		{"tiny,embd=100000", "embd=100000"},
		{"tiny,copy=yes", "copy"},
		{"tiny,copy=true", "copy=true needs a head size of 32"}, // 16: no room for a code beside the position pairs
		{"135m,layers=1,copy=true", "copy=true needs 2 layers"},
	} {
		_, err := ParseShape(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseShape(%q) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}

func TestShapeParams(t *testing.T) {
	// 135m: embeddings and output 2·576·49152, per layer
	// q,o 576², k,v 576·192, three FFN 576·1536 and two norms; one final norm.
	want := int64(2*576*49152 + 30*(2*576*576+2*576*192+3*576*1536+2*576) + 576)
	if got := Shapes["135m"].Params(); got != want {
		t.Errorf("135m Params() = %d, want %d", got, want)
	}
}

func TestSynthVocab(t *testing.T) {
	for _, n := range []int{260, 512, 49152} {
		v := synthVocab(n, false)
		if len(v.tokens) != n || len(v.scores) != n || len(v.types) != n {
			t.Fatalf("synthVocab(%d): %d tokens, %d scores, %d types", n, len(v.tokens), len(v.scores), len(v.types))
		}
		ids := make(map[string]int, n)
		for i, tok := range v.tokens {
			if j, dup := ids[tok]; dup {
				t.Fatalf("synthVocab(%d): %q is both %d and %d", n, tok, j, i)
			}
			ids[tok] = i
		}
		for i := firstPiece; i < n; i++ {
			tok := v.tokens[i]
			if v.types[i] != tokenNormal {
				t.Errorf("token %d %q has type %d", i, tok, v.types[i])
			}
			if i > firstPiece && v.scores[i] >= v.scores[i-1] {
				t.Errorf("score of %d not below its predecessor", i)
			}
			if len([]rune(tok)) == 1 {
				continue
			}
			// A longer piece must split into two earlier pieces.
			found := false
			for k := 1; k < len(tok) && !found; k++ {
				a, okA := ids[tok[:k]]
				b, okB := ids[tok[k:]]
				found = okA && okB && a < i && b < i
			}
			if !found {
				t.Errorf("piece %d %q is not a merge of two earlier pieces", i, tok)
			}
		}
	}
}
