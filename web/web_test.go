package web

import (
	"io/fs"
	"net/http"
	"strings"
	"testing"
)

func TestWantsHTML(t *testing.T) {
	for accept, want := range map[string]bool{
		"": false, "*/*": false, "application/json": false, "text/plain": false,
		"text/html": true, "TEXT/HTML; charset=utf-8": true,
		"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8": true,
		"application/json, text/html;q=0.5":                               true,
		"text/html;q=0":                                                   false, "text/html; q=0.0": false, "text/html;q=0.001": true,
	} {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		if got := WantsHTML(r); got != want {
			t.Errorf("WantsHTML(Accept: %q) = %v, want %v", accept, got, want)
		}
	}
}

// TestPageIsOffline: nothing in the page's files refers to another origin
// (the only absolute URL is the SVG namespace, an identifier never
// fetched), and the page loads its assets from AssetPrefix.
func TestPageIsOffline(t *testing.T) {
	err := fs.WalkDir(static, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(static, path)
		if err != nil {
			return err
		}
		text := strings.ReplaceAll(string(b), `"http://www.w3.org/2000/svg"`, "")
		for _, bad := range []string{"http://", "https://", "//cdn", "@import"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s refers to %q", path, bad)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	page, _ := static.ReadFile("static/index.html")
	for _, ref := range []string{`src="` + AssetPrefix + `app.js"`, `href="` + AssetPrefix + `style.css"`} {
		if !strings.Contains(string(page), ref) {
			t.Errorf("index.html lacks %s", ref)
		}
	}
}
