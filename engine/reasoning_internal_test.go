package engine

import "testing"

// TestMidRune: the budget's Close waits while the output ends inside a
// UTF-8 character (a grammar takes only the rest of it), and only then.
func TestMidRune(t *testing.T) {
	for _, tc := range []struct {
		p    string
		want bool
	}{
		{"", false},
		{"abc", false},
		{"ab\xe4", true},          // the first byte of 3
		{"ab\xe4\xb8", true},      // 2 of 3
		{"ab\xe4\xb8\x80", false}, // 一, whole
		{"\xf0\x9f\x98", true},    // 3 of 4
		{"é", false},
	} {
		if got := midRune([]byte(tc.p)); got != tc.want {
			t.Errorf("midRune(%q) = %v, want %v", tc.p, got, tc.want)
		}
	}
}
