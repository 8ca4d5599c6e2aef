package agent

import (
	"strings"
	"testing"
)

func TestLineLoopDetector(t *testing.T) {
	guard := RepeatedLineGuard{MinChars: 10, Repeats: 3}
	long := "the same long line"
	tests := []struct {
		name   string
		chunks []string
		trips  bool
	}{
		{"three in a row", []string{long + "\n" + long + "\n" + long + "\n"}, true},
		{"split across chunks", []string{"the same ", "long line\nthe same long", " line\n", long, "\n"}, true},
		{"blank lines do not break a run", []string{long + "\n\n" + long + "\n  \n" + long + "\n"}, true},
		{"surrounding spaces ignored", []string{long + "\n  " + long + "\t\n" + long + "\n"}, true},
		{"only twice", []string{long + "\n" + long + "\n"}, false},
		{"third line unterminated", []string{long + "\n" + long + "\n" + long}, false},
		{"short lines never count", []string{"short\nshort\nshort\nshort\n"}, false},
		{"short lines do not break a run", []string{long + "\n,\n" + long + "\nok\n" + long + "\n"}, true},
		{"a different line breaks the run", []string{long + "\n" + long + "\nanother long line\n" + long + "\n"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := LineLoopDetector{Guard: guard}
			tripped := false
			for _, c := range tt.chunks {
				if line, ok := d.Feed(c); ok {
					tripped = true
					if line != long {
						t.Errorf("looping line = %q, want %q", line, long)
					}
				}
			}
			if tripped != tt.trips {
				t.Fatalf("tripped = %v, want %v", tripped, tt.trips)
			}
		})
	}
}

func TestLineLoopDetectorDisabled(t *testing.T) {
	d := LineLoopDetector{}
	if _, ok := d.Feed(strings.Repeat("a repeated long line\n", 100)); ok {
		t.Fatal("zero guard tripped")
	}
}

func TestLineLoopDetectorBoundsLongLines(t *testing.T) {
	d := LineLoopDetector{Guard: RepeatedLineGuard{MinChars: 1, Repeats: 2}}
	huge := strings.Repeat("y", 3*maxLineBytes)
	d.Feed(huge)
	if d.partial.Len() > maxLineBytes {
		t.Fatalf("partial line holds %d bytes, bound is %d", d.partial.Len(), maxLineBytes)
	}
	if _, ok := d.Feed("\n" + huge + "\n"); !ok {
		t.Fatal("two equal huge lines did not trip (compared by their bounded prefix)")
	}
}
