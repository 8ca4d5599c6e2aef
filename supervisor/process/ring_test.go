package process

import (
	"slices"
	"strings"
	"testing"
)

func TestLineRingKeepsLastLines(t *testing.T) {
	r := NewRing(3)
	w := r.writer("out: ")
	// Lines split across writes, a CRLF line and a partial tail.
	for _, s := range []string{"one\ntw", "o\nthree\r\n", "four\nfi"} {
		if n, err := w.Write([]byte(s)); err != nil || n != len(s) {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got, want := r.Lines(), []string{"out: two", "out: three", "out: four"}; !slices.Equal(got, want) {
		t.Fatalf("Lines() = %q, want %q", got, want)
	}
	w.Flush()
	if got, want := r.Lines(), []string{"out: three", "out: four", "out: fi"}; !slices.Equal(got, want) {
		t.Fatalf("after Flush, Lines() = %q, want %q", got, want)
	}
}

func TestLineRingTruncatesLongLines(t *testing.T) {
	r := NewRing(4)
	w := r.writer("")
	long := strings.Repeat("x", MaxLineBytes+100)
	w.Write([]byte(long[:MaxLineBytes/2]))
	w.Write([]byte(long[MaxLineBytes/2:] + "\nshort\n"))
	got := r.Lines()
	if len(got) != 2 {
		t.Fatalf("got %d lines, want 2", len(got))
	}
	if want := strings.Repeat("x", MaxLineBytes) + truncMark; got[0] != want {
		t.Errorf("long line: got %d bytes, want %d bytes ending in the truncation mark", len(got[0]), len(want))
	}
	if got[1] != "short" {
		t.Errorf("second line = %q, want %q", got[1], "short")
	}
}

func TestLineRingInterleavedWriters(t *testing.T) {
	r := NewRing(10)
	out, errw := r.writer("stdout: "), r.writer("stderr: ")
	out.Write([]byte("half"))
	errw.Write([]byte("error line\n"))
	out.Write([]byte(" done\n"))
	want := []string{"stderr: error line", "stdout: half done"}
	if got := r.Lines(); !slices.Equal(got, want) {
		t.Fatalf("Lines() = %q, want %q", got, want)
	}
}
