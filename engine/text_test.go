package engine

import (
	"strings"
	"testing"
)

func TestTextOutStopAcrossTokens(t *testing.T) {
	out := textOut{stops: []string{"END"}}
	var got strings.Builder
	for _, p := range []string{"hello E", "N", "D tail"} {
		ready, stop := out.push([]byte(p))
		got.WriteString(ready)
		if stop != "" {
			if stop != "END" {
				t.Fatalf("stop = %q", stop)
			}
			if got.String() != "hello " {
				t.Fatalf("text before stop = %q, want %q", got.String(), "hello ")
			}
			return
		}
	}
	t.Fatal("stop string spanning three tokens was not detected")
}

func TestTextOutHoldsPartialStopThenReleases(t *testing.T) {
	out := textOut{stops: []string{"</s>"}}
	ready, _ := out.push([]byte("a </"))
	if ready != "a " {
		t.Fatalf("ready = %q, want %q (the possible stop start held back)", ready, "a ")
	}
	ready, stop := out.push([]byte("b>"))
	if stop != "" || ready != "</b>" {
		t.Fatalf("ready, stop = %q, %q; want the held text released", ready, stop)
	}
}

func TestTextOutSplitUTF8(t *testing.T) {
	euro := []byte("€") // 3 bytes
	var out textOut
	if r, _ := out.push(euro[:1]); r != "" {
		t.Fatalf("partial rune delivered: %q", r)
	}
	if r, _ := out.push(euro[1:2]); r != "" {
		t.Fatalf("partial rune delivered: %q", r)
	}
	if r, _ := out.push(append(euro[2:], 'x')); r != "€x" {
		t.Fatalf("got %q, want %q", r, "€x")
	}
	out.push(euro[:2])
	if f := out.flush(); f != "\uFFFD" {
		t.Fatalf("flush of a truncated rune = %q, want U+FFFD", f)
	}
}

func TestTextOutEarliestStopWins(t *testing.T) {
	out := textOut{stops: []string{"cd", "b"}}
	ready, stop := out.push([]byte("abcd"))
	if ready != "a" || stop != "b" {
		t.Fatalf("got %q, %q; want %q, %q", ready, stop, "a", "b")
	}
}

func TestCommonPrefix(t *testing.T) {
	for _, c := range []struct {
		a, b []int32
		want int
	}{
		{nil, []int32{1}, 0},
		{[]int32{1, 2, 3}, []int32{1, 2, 4}, 2},
		{[]int32{1, 2}, []int32{1, 2, 3}, 2},
		{[]int32{5}, []int32{6}, 0},
	} {
		if got := commonPrefix(c.a, c.b); got != c.want {
			t.Errorf("commonPrefix(%v, %v) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// TestLogprobQueue: an entry goes out with its token's first released
// byte; a stop cut drops the entries after it; the end releases the rest.
func TestLogprobQueue(t *testing.T) {
	var q logprobQueue
	names := func(es []TokenLogprobs) string {
		var b strings.Builder
		for _, e := range es {
			b.WriteString(e.Text + "|")
		}
		return b.String()
	}
	add := func(s string) { q.add(TokenLogprobs{TokenLogprob: TokenLogprob{Text: s}}, len(s)) }
	add("ab")
	add("c")
	if got := names(q.release(1, false, false)); got != "ab|" { // "a" released, "b" "c" held
		t.Fatalf("after 1 byte: %q", got)
	}
	if got := names(q.release(0, false, false)); got != "" {
		t.Fatalf("after nothing more: %q", got)
	}
	add("")
	add("de")
	// "bc" released; the empty token begins after them, with "de".
	if got := names(q.release(2, false, false)); got != "c|" {
		t.Fatalf("after 3 bytes: %q", got)
	}
	add("f")
	// A stop string began at "d": "", "de" and "f" are dropped.
	if got := names(q.release(0, true, false)); got != "" {
		t.Fatalf("at a cut before \"de\": %q", got)
	}
	add("g")
	add("h")
	if got := names(q.release(0, false, true)); got != "g|h|" {
		t.Fatalf("at the end: %q", got)
	}
}
