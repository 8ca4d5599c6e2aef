package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// corral pull's --insecure and --max-size reach the pull: plain http is
// refused without --insecure, and a body whose size is not announced is cut
// at --max-size (0: no limit).
func TestPullFlags(t *testing.T) {
	body := bytes.Repeat([]byte("m"), 1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(body[:500])
		http.NewResponseController(w).Flush() // chunked: no Content-Length
		w.Write(body[500:])
	}))
	defer srv.Close()
	url := srv.URL + "/m.gguf"
	ctx := context.Background()
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string // "" for success
	}{
		{[]string{url}, "not https (--insecure allows plain http)"},
		{[]string{"--insecure", "--max-size", "999", url}, "more than the size limit of 999 bytes"},
		{[]string{"--insecure", "--max-size", "lots", url}, `--max-size: size "lots"`},
		{[]string{"--insecure", "--max-size", "1000", url}, ""},
		{[]string{"--insecure", "--max-size", "0", "--name", "m2", url}, ""},
	} {
		err := runPull(ctx, append([]string{"--dir", dir}, tt.args...))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("corral pull %q: %v", tt.args, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("corral pull %q: error %v, want one containing %q", tt.args, err, tt.want)
		}
	}
	for _, name := range []string{"m.gguf", "m2.gguf"} {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(got, body) {
			t.Errorf("%s: %d bytes, %v; want the %d served", name, len(got), err, len(body))
		}
	}
}
