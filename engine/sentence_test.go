package engine

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// bpeSplit cuts s into token-like pieces the way BPE tokenizers do: a word
// keeps the single space before it ("Hello", ",", " world", "!"), other
// characters stand alone and whitespace runs make pieces of their own.
func bpeSplit(s string) []string {
	rs := []rune(s)
	word := func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }
	var pieces []string
	for i := 0; i < len(rs); {
		j := i
		if rs[j] == ' ' && j+1 < len(rs) && !unicode.IsSpace(rs[j+1]) {
			j++
		}
		switch {
		case unicode.IsSpace(rs[j]):
			for j < len(rs) && unicode.IsSpace(rs[j]) {
				j++
			}
		case word(rs[j]):
			for j < len(rs) && word(rs[j]) {
				j++
			}
		default:
			j++
		}
		pieces = append(pieces, string(rs[i:j]))
		i = j
	}
	return pieces
}

// chunkAll pushes each piece as one token, calls next after every push as
// the scheduler does, and flushes at the end. It checks what holds for any
// input: chunks from next are neither blank nor split characters, the
// chunks join to the input, and their token counts sum to the pieces.
func chunkAll(t *testing.T, cfg Chunking, pieces []string) (chunks []string, ntoks []int) {
	t.Helper()
	c := newChunker(cfg)
	for _, p := range pieces {
		c.push(p, 1)
		for {
			text, n, ok := c.next()
			if !ok {
				break
			}
			if strings.TrimSpace(text) == "" || !utf8.ValidString(text) {
				t.Errorf("next returned %q", text)
			}
			chunks, ntoks = append(chunks, text), append(ntoks, n)
		}
	}
	if text, n := c.flush(); text != "" || n > 0 {
		chunks, ntoks = append(chunks, text), append(ntoks, n)
	}
	if got, want := strings.Join(chunks, ""), strings.Join(pieces, ""); got != want {
		t.Errorf("chunks join to %q, want %q", got, want)
	}
	sum := 0
	for _, n := range ntoks {
		sum += n
	}
	if sum != len(pieces) {
		t.Errorf("chunks cover %d tokens, %d pushed", sum, len(pieces))
	}
	return chunks, ntoks
}

func TestChunkerSentences(t *testing.T) {
	loose := Chunking{FirstMinTokens: 1}
	tests := []struct {
		name string
		cfg  Chunking
		text string
		want []string
	}{
		{"two sentences", loose, "The sky is blue. The grass is green.",
			[]string{"The sky is blue.", " The grass is green."}},
		{"quote after the terminator", loose, `He said "Hello!" Then he left.`,
			[]string{`He said "Hello!"`, ` Then he left.`}},
		{"question and exclamation", loose, "Are you there? Yes! I am here.",
			[]string{"Are you there?", " Yes!", " I am here."}},
		{"terminator run", loose, "Really?! Yes.", []string{"Really?!", " Yes."}},
		{"Mr.", loose, "Mr. Smith went to Washington. He was late.",
			[]string{"Mr. Smith went to Washington.", " He was late."}},
		{"Dr.", loose, "Dr. Jones is here. She is kind.",
			[]string{"Dr. Jones is here.", " She is kind."}},
		{"e.g.", loose, "Bring tools, e.g. Hammers and saws. Then start.",
			[]string{"Bring tools, e.g. Hammers and saws.", " Then start."}},
		{"i.e.", loose, "Use the big one, i.e. The red one. Thanks.",
			[]string{"Use the big one, i.e. The red one.", " Thanks."}},
		{"a.m.", loose, "We met at 9 a.m. Eastern time. It was early.",
			[]string{"We met at 9 a.m. Eastern time.", " It was early."}},
		{"No. before a number", loose, "Call No. 5 now. The answer is no. We left.",
			[]string{"Call No. 5 now.", " The answer is no.", " We left."}},
		{"initials", loose, "J. K. Rowling wrote it. Then she rested.",
			[]string{"J. K. Rowling wrote it.", " Then she rested."}},
		{"the pronoun I is no initial", loose, "So did I. Then we left.",
			[]string{"So did I.", " Then we left."}},
		{"decimals", loose, "It costs 3.5 dollars. That is cheap.",
			[]string{"It costs 3.5 dollars.", " That is cheap."}},
		{"domain", loose, "Visit example.com today. It is fine.",
			[]string{"Visit example.com today.", " It is fine."}},
		{"list numbers", loose, "1. Preheat the oven.\n2. Mix the flour.",
			[]string{"1. Preheat the oven.\n", "2. Mix the flour."}},
		{"number ending a sentence", loose, "I have 3. Then I left.",
			[]string{"I have 3.", " Then I left."}},
		{"ellipsis then lowercase", loose, "Wait... what happened? I see.",
			[]string{"Wait... what happened?", " I see."}},
		{"ellipsis then uppercase", loose, "I waited... Then it came.",
			[]string{"I waited...", " Then it came."}},
		{"ellipsis character", loose, "I waited… Then it came. Wait… what",
			[]string{"I waited…", " Then it came.", " Wait… what"}},
		{"CJK", loose, "你好。我很好！谢谢。", []string{"你好。", "我很好！", "谢谢。"}},
		{"CJK quote", loose, "他说：「好。」然后走了。", []string{"他说：「好。」", "然后走了。"}},
		{"newline list", loose, "Apples\nPears\n\nPlums\n",
			[]string{"Apples\n", "Pears\n\n", "Plums\n"}},
		{"paragraphs", loose, "Hello there.\n\n  Next part. Done",
			[]string{"Hello there.\n\n", "  Next part.", " Done"}},
		{"leading blank lines", loose, "\n\nHello.\nBye.", []string{"\n\nHello.\n", "Bye."}},
		{"parentheses", loose, "(It was late.) Then we left.",
			[]string{"(It was late.)", " Then we left."}},
		{"multibyte", loose, "Ça coûte cher. Très cher! Vraiment? Oui 🎉. Fin.",
			[]string{"Ça coûte cher.", " Très cher!", " Vraiment?", " Oui 🎉.", " Fin."}},
		{"first chunk minimum", Chunking{}, "Hi! How are you today, my dear friend? I am fine.",
			[]string{"Hi! How are you today, my dear friend?", " I am fine."}},
		{"minimum above maximum", Chunking{FirstMinTokens: 50, FirstMaxTokens: 4}, "Hi! How are you? Fine.",
			[]string{"Hi! How", " are you?", " Fine."}},
		{"max chars", Chunking{FirstMinTokens: 1, MaxChars: 20},
			"Go. This sentence runs on far longer than twenty bytes. Ok.",
			[]string{"Go.", " This sentence runs", " on far longer than", " twenty bytes.", " Ok."}},
		{"max chars without spaces", Chunking{FirstMinTokens: 1, MaxChars: 5}, "ééééé",
			[]string{"éé", "éé", "é"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := chunkAll(t, tt.cfg, bpeSplit(tt.text))
			if !slices.Equal(got, tt.want) {
				t.Errorf("chunks\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestChunkerFirstMaxTokens(t *testing.T) {
	words := strings.Fields("so this sentence goes on and on without any punctuation at all " +
		"because the speaker keeps talking about nothing in particular for a very long " +
		"time indeed and then some more")
	text := strings.Join(words, " ")
	got, ntoks := chunkAll(t, Chunking{}, bpeSplit(text))
	if len(got) != 2 || got[0] != strings.Join(words[:23], " ") || ntoks[0] != 23 {
		t.Fatalf("chunks %q (%v tokens), want the first 23 words and the rest", got, ntoks)
	}
	// After the first chunk only MaxChars bounds a chunk.
	if got[1] != " "+strings.Join(words[23:], " ") {
		t.Errorf("second chunk %q", got[1])
	}
}

func TestChunkerTokenCounts(t *testing.T) {
	c := newChunker(Chunking{FirstMinTokens: 1})
	c.push("Hi", 1)
	c.push("", 1) // no text yet, as a token that starts a multibyte character
	c.push("!", 2)
	if _, _, ok := c.next(); ok {
		t.Fatal("boundary decided without look-ahead")
	}
	c.push(" Bye", 1) // straddles the boundary: counts for the next chunk
	text, n, ok := c.next()
	if !ok || text != "Hi!" || n != 4 {
		t.Fatalf("next = %q, %d, %v; want \"Hi!\", 4, true", text, n, ok)
	}
	c.push(".", 1)
	c.push("", 0)
	if text, n := c.flush(); text != " Bye." || n != 2 {
		t.Fatalf("flush = %q, %d; want \" Bye.\", 2", text, n)
	}
	if text, n := c.flush(); text != "" || n != 0 {
		t.Fatalf("second flush = %q, %d", text, n)
	}
}

// TestChunkerPieces feeds text in pieces that split words, with empty
// pushes between them: the chunks are those of a token-wise split (the
// first chunk's token bounds set out of the way).
func TestChunkerPieces(t *testing.T) {
	const text = "Mr. Smith paid 3.5 dollars. Wait... what? 你好。我很好！J. K. Rowling (wrote it.) The end.\n1. One.\n"
	cfg := Chunking{FirstMinTokens: 1, FirstMaxTokens: 1000}
	want, _ := chunkAll(t, cfg, bpeSplit(text))
	rs := []rune(text)
	for size := 1; size <= 4; size++ {
		var pieces []string
		for i := 0; i < len(rs); i += size {
			pieces = append(pieces, string(rs[i:min(i+size, len(rs))]), "")
		}
		if got, _ := chunkAll(t, cfg, pieces); !slices.Equal(got, want) {
			t.Errorf("pieces of %d characters: chunks\n got %q\nwant %q", size, got, want)
		}
	}
}

// TestChunkerRandomSplits checks that, with the token bounds out of the
// way, where the text is split into pushes does not move the boundaries.
func TestChunkerRandomSplits(t *testing.T) {
	const text = "Yesterday Mr. Smith met Dr. Jones at 9 a.m. on Main St. near the park. " +
		"They talked about J. K. Rowling, e.g. her books, i.e. the famous ones! " +
		"Did it cost 3.5 dollars? No. It cost more... much more. Then:\n" +
		"1. Buy milk.\n2. Buy bread.\n\n你好。我很好！(It was late.) \"Really?!\" she asked. " +
		"Wait… What? Ça va. Über alles!\n"
	cfg := Chunking{FirstMinTokens: 1, FirstMaxTokens: 1 << 30, MaxChars: 1 << 30}
	want, _ := chunkAll(t, cfg, bpeSplit(text))
	if len(want) < 15 {
		t.Fatalf("only %d chunks: %q", len(want), want)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rs := []rune(text)
	for range 200 {
		var pieces []string
		// Pieces shorter than the first sentence, so that a token ends
		// before the first boundary, as FirstMinTokens asks.
		for i := 0; i < len(rs); {
			n := 1 + rng.IntN(12)
			pieces = append(pieces, string(rs[i:min(i+n, len(rs))]))
			if rng.IntN(5) == 0 {
				pieces = append(pieces, "")
			}
			i += n
		}
		if got, _ := chunkAll(t, cfg, pieces); !slices.Equal(got, want) {
			t.Fatalf("split %q: chunks\n got %q\nwant %q", pieces, got, want)
		}
	}
}

func TestForcedCut(t *testing.T) {
	tests := []struct {
		s     string
		limit int
		want  int
	}{
		{"one two three", 13, 7}, // before the last space
		{"one two three", 7, 7},  // a space at the limit ends the chunk there
		{"one  \t two", 10, 3},   // before the whole whitespace run
		{"onetwothree", 5, 5},    // no space: at the limit
		{"  onetwo", 5, 5},       // only leading space: at the limit
		{"a\u00e9b", 2, 1},       // down to a character boundary
		{"     word", 3, 9},      // blank up to the limit: after all
		{" \n\t ", 2, -1},        // blank
		{"tail ", 100, 4},        // limit past the end
		{"é", 1, 2},              // nothing before the limit: after all
	}
	for _, tt := range tests {
		if got := forcedCut(tt.s, tt.limit); got != tt.want {
			t.Errorf("forcedCut(%q, %d) = %d, want %d", tt.s, tt.limit, got, tt.want)
		}
	}
}
