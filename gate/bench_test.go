package gate

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
)

// The gate's cost per request: a handler that does nothing, behind no gate,
// a gate without keys, and gates with a Host allowlist, CORS origins and 1
// or 100 keys (every key is compared, whichever matches). Each request is
// a browser's same-origin POST with a key.
func BenchmarkGate(b *testing.B) {
	nop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	specs := make([]string, 100)
	for i := range specs {
		specs[i] = fmt.Sprintf("sk-bench-%08d name=k%d", i, i)
	}
	keys, err := LoadKeys(specs, "")
	if err != nil {
		b.Fatal(err)
	}
	keyed, err := NewPolicy(keys, []string{"llm.example.com"}, []string{"https://app.example.com"})
	if err != nil {
		b.Fatal(err)
	}
	oneKey, err := LoadKeys(specs[99:], "")
	if err != nil {
		b.Fatal(err)
	}
	keyed1, _ := NewPolicy(oneKey, []string{"llm.example.com"}, []string{"https://app.example.com"})
	quiet := slog.New(slog.DiscardHandler)
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{
		{"bare", nop},
		{"gate", New(Config{Logger: quiet}, nop)},
		{"gate+1key", New(Config{Logger: quiet, Policy: keyed1}, nop)},
		{"gate+100keys", New(Config{Logger: quiet, Policy: keyed}, nop)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			r := httptest.NewRequest("POST", "http://llm.example.com/v1/chat/completions", nil)
			r.Header.Set("Authorization", "Bearer sk-bench-00000099")
			r.Header.Set("Origin", "http://llm.example.com")
			r.Header.Set("Sec-Fetch-Site", "same-origin")
			for b.Loop() {
				w := httptest.NewRecorder()
				bc.h.ServeHTTP(w, r)
				if w.Code != 200 {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}
