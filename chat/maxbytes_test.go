package chat

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

// TestRenderMaxBytes: a template whose output grows with the square of the
// conversation (every message written once per message: 2000 messages of
// 1 KB would be 4 GB) stops as soon as its output passes MaxBytes, having
// allocated little; within the bound the text is the template's.
func TestRenderMaxBytes(t *testing.T) {
	tmpl, err := Parse(`{% for m in messages %}{% for n in messages %}{{ n.content }}{% endfor %}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]Message, 2000)
	for i := range msgs {
		msgs[i] = msg("user", strings.Repeat("x", 1000))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = tmpl.Render(msgs, Options{MaxBytes: 1 << 20})
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooLong) {
		t.Fatalf("error %v, want ErrTooLong", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Errorf("rendering allocated %d MB before it stopped, want at most 64", alloc>>20)
	}

	small := msgs[:3]
	out, err := tmpl.Render(small, Options{MaxBytes: 9000})
	if err != nil || len(out) != 9000 {
		t.Fatalf("9000 bytes within a bound of 9000: %d bytes, %v", len(out), err)
	}
	if _, err := tmpl.Render(small, Options{MaxBytes: 8999}); !errors.Is(err, ErrTooLong) {
		t.Fatalf("9000 bytes within a bound of 8999: error %v, want ErrTooLong", err)
	}
	if out, err := tmpl.Render(small, Options{}); err != nil || len(out) != 9000 {
		t.Fatalf("no bound: %d bytes, %v", len(out), err)
	}
}
