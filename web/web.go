// Package web serves corral's built-in web page: a chat playground and a
// live view of the server, plain HTML, CSS and JavaScript embedded in the
// binary (no framework, no build step, no external URL: the page works
// offline).
//
// The page is index.html at "/" (for browsers, see WantsHTML) with its
// assets under AssetPrefix. The playground talks to the OpenAI API
// (/v1/models, /v1/chat/completions with stream: true); the live view
// listens to the event stream of Live (GET /v1/live). The page and its
// assets need no API key; on a server with keys the page asks for one
// when a call gets 401, keeps it for the tab (sessionStorage) and sends
// it with every call, the live view's included (read with fetch, since an
// EventSource cannot send it).
package web

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var static embed.FS

// AssetPrefix is the path under which the page's scripts and styles are
// served.
const AssetPrefix = "/ui/"

// contentSecurityPolicy keeps the page to its own origin: nothing is
// loaded from elsewhere, so the page behaves the same offline.
const contentSecurityPolicy = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// WantsHTML reports whether r is a browser's request for a page: its
// Accept header lists text/html (with a q-value other than 0). Browsers
// send one; curl ("*/*"), Ollama's client (HEAD / as a heartbeat) and
// other tools checking that the server runs do not, and get the plain
// "corral is running".
func WantsHTML(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			media, params, _ := strings.Cut(part, ";")
			if !strings.EqualFold(strings.TrimSpace(media), "text/html") {
				continue
			}
			if q, ok := strings.CutPrefix(strings.ReplaceAll(params, " ", ""), "q="); ok && strings.Trim(q, "0.") == "" {
				continue // q=0: not acceptable
			}
			return true
		}
	}
	return false
}

// Page serves index.html.
func Page() http.Handler {
	page, err := static.ReadFile("static/index.html")
	if err != nil {
		panic("web: index.html is not embedded: " + err.Error()) // a build error
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Add("Vary", "Accept")
		w.Write(page)
	})
}

// Assets serves the page's scripts and styles under AssetPrefix.
func Assets() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic("web: " + err.Error()) // a build error
	}
	files := http.FileServerFS(sub)
	return http.StripPrefix(strings.TrimSuffix(AssetPrefix, "/"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" || r.URL.Path == "/index.html" {
			http.NotFound(w, r) // the page is at "/"
			return
		}
		h := w.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		files.ServeHTTP(w, r)
	}))
}
