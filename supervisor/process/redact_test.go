package process

import (
	"slices"
	"strings"
	"testing"
)

func TestRedactor(t *testing.T) {
	r := NewRedactor("sk-worker-0123", "")
	r.AddEnv([]string{"HF_TOKEN=hf_abcdefgh", "SHORT_KEY=1", "PATH=/usr/bin:/bin", "MAX_TOKENS=123456789"})
	for _, c := range []struct{ in, want string }{
		{"key sk-worker-0123 in the middle", "key [redacted] in the middle"},
		{"token hf_abcdefgh printed", "token [redacted] printed"},
		{"Authorization: Bearer abc.def-ghi", "Authorization: Bearer [redacted]"},
		{`{"authorization":"Basic dXNlcjpwYXNz"}`, `{"authorization":"Basic [redacted]"}`},
		{"x-api-key: zzz123", "x-api-key: [redacted]"},
		{"X-Api-Key=zzz123 next", "X-Api-Key=[redacted] next"},
		{"sent bearer QWERTY123 upstream", "sent bearer [redacted] upstream"},
		{"env SHORT_KEY=1 OPENAI_API_KEY=sk-x y", "env SHORT_KEY=[redacted] OPENAI_API_KEY=[redacted] y"},
		{"args: --api-key sk-abc --port 8080", "args: --api-key [redacted] --port 8080"},
		{`["llama-server" "--hf-token" "hf_zzz" "-m" "x.gguf"]`, `["llama-server" "--hf-token" "[redacted]" "-m" "x.gguf"]`},
		{"--api-key=sk-abc", "--api-key=[redacted]"},
		{`{"api_key": "sk-abc", "model": "m"}`, `{"api_key": "[redacted]", "model": "m"}`},
		// MAX_TOKENS is named like *TOKEN*: its value goes wherever it
		// appears. But tokens, keep and keyboard are no secret words.
		{"limit 123456789", "limit [redacted]"},
		{"n_tokens=512 max_tokens=64 n_keep=4 -t 1", "n_tokens=512 max_tokens=64 n_keep=4 -t 1"},
		{"KEYBOARD=us monkey business", "KEYBOARD=us monkey business"},
		{"authorization failed", "authorization failed"},
	} {
		if got := r.String(c.in); got != c.want {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	argv := []string{"llama-server", "--api-key", "plain-secret", "--port", "8080", "HF_TOKEN=hf_x", "--token=t0k3n"}
	want := []string{"llama-server", "--api-key", Redacted, "--port", "8080", "HF_TOKEN=" + Redacted, "--token=" + Redacted}
	if got := r.Args(argv); !slices.Equal(got, want) {
		t.Errorf("Args(%q) = %q, want %q", argv, got, want)
	}
	// A nil Redactor still applies the patterns.
	var nr *Redactor
	if got := nr.String("Authorization: Bearer abc"); got != "Authorization: Bearer "+Redacted {
		t.Errorf("nil Redactor: %q", got)
	}
}

// TestRingRedacts feeds a line with a secret through a ring writer.
func TestRingRedacts(t *testing.T) {
	ring := NewRing(4)
	w := ring.writer("out: ")
	w.redact = NewRedactor("s3cr3t-value")
	w.Write([]byte("listening with key s3cr3t-value\n"))
	if got := ring.Lines(); len(got) != 1 || strings.Contains(got[0], "s3cr3t") {
		t.Fatalf("ring lines: %q", got)
	}
}
