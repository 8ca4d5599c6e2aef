package serving

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-llm/corral/internal/testsynth"
	"github.com/corral-llm/corral/media"
)

// urlLimits are the default limits with a fetcher of hosts, each fetch
// bounded by timeout (0: the default).
func urlLimits(t *testing.T, timeout time.Duration, hosts ...string) Limits {
	t.Helper()
	f, err := media.NewFetcher(hosts, timeout)
	if err != nil {
		t.Fatal(err)
	}
	lim := DefaultLimits.WithDefaults()
	lim.MediaFetcher = f
	return lim
}

// testPNG is the test image's bytes.
func testPNG(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testsynth.MediaDir(), "gradient-64.png"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// serveImages serves h on 127.0.0.1 until the test ends; it returns the
// server's port and the count of the requests it got.
func serveImages(t *testing.T, h http.HandlerFunc) (port string, hits *atomic.Int32) {
	t.Helper()
	hits = new(atomic.Int32)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(ts.Close)
	_, port, _ = strings.Cut(strings.TrimPrefix(ts.URL, "http://"), ":")
	return port, hits
}

// TestImageURLFetched: an http URL of a listed IP address is fetched, a
// redirect to the same host followed, and the image is the one its bytes
// sent inline make, ID included (so the two share the prefix cache),
// through ImageURL (OpenAI's image_url) and DecodeMedia (Anthropic's and
// the Responses API's URL sources). A response that names no type, or
// application/octet-stream, is taken as its bytes say.
func TestImageURLFetched(t *testing.T) {
	png := testPNG(t)
	port, hits := serveImages(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hop":
			http.Redirect(w, r, "/g.png", http.StatusFound)
			return
		case "/g.png":
			w.Header().Set("Content-Type", "image/png")
		case "/octet":
			w.Header().Set("Content-Type", "application/octet-stream")
		}
		w.Write(png)
	})
	lim := urlLimits(t, 0, "127.0.0.1")
	ctx := context.Background()
	inline, e := lim.ImageURL(ctx, "data:image/png;base64,"+base64.StdEncoding.EncodeToString(png), "x")
	if e != nil {
		t.Fatal(e)
	}
	base := "http://127.0.0.1:" + port
	for _, u := range []string{base + "/g.png", "HTTP://127.0.0.1:" + port + "/hop", base + "/octet"} {
		m, e := lim.ImageURL(ctx, u, "x")
		if e != nil {
			t.Errorf("%s: %+v", u, e)
			continue
		}
		if m.ID != inline.ID || m.W != inline.W || m.H != inline.H || !bytes.Equal(m.RGB, inline.RGB) {
			t.Errorf("%s: %d×%d, ID %s; inline: %d×%d, ID %s", u, m.W, m.H, m.ID, inline.W, inline.H, inline.ID)
		}
	}
	ms, e := lim.DecodeMedia(ctx, []MediaSource{{Param: "y", Kind: media.KindImage, URL: base + "/g.png"}}, "input")
	if e != nil || len(ms) != 1 || ms[0].ID != inline.ID {
		t.Errorf("DecodeMedia: %+v, %+v; want the inline image", ms, e)
	}
	if n := hits.Load(); n != 5 {
		t.Errorf("%d requests; want 5 (one a redirect)", n)
	}
}

// TestImageURLRefused: each URL the fetcher must not fetch, or whose
// answer it must not take, is a 400 naming the field and, where a flag
// sets the rule, the flag; a host not listed, user information, and a
// listed name that resolves to a loopback address get no request at all.
func TestImageURLRefused(t *testing.T) {
	png := testPNG(t)
	port, hits := serveImages(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away": // a listed IP address sends the client to a name not listed
			http.Redirect(w, r, "http://localhost:"+r.URL.Query().Get("port")+"/g.png", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/says-jpeg":
			w.Header().Set("Content-Type", "image/jpeg")
			w.Write(png)
		case "/big":
			w.Header().Set("Content-Length", strconv.Itoa(len(png)))
			w.Write(png)
		default:
			http.NotFound(w, r)
		}
	})
	base := "http://127.0.0.1:" + port
	small := urlLimits(t, 0, "127.0.0.1")
	small.Media.MaxImageBytes = int64(len(png)) - 1
	for _, c := range []struct {
		name string
		lim  Limits
		url  string
		hits int32  // the requests the server gets
		code string // the error's code
		says []string
	}{
		{"host not listed", urlLimits(t, 0, "images.example"), base + "/g.png", 0, "invalid_image", []string{`host "127.0.0.1"`, "--allowed-media-domains"}},
		{"user information", urlLimits(t, 0, "127.0.0.1"), "http://me:secret@127.0.0.1:" + port + "/g.png", 0, "invalid_image", []string{"user information"}},
		{"a name that resolves to loopback", urlLimits(t, 0, "localhost"), "http://localhost:" + port + "/g.png", 0, "invalid_image", []string{`"localhost" resolves to a loopback address`}},
		{"redirect to a host not listed", urlLimits(t, 0, "127.0.0.1"), base + "/away?port=" + port, 1, "invalid_image", []string{`host "localhost"`, "--allowed-media-domains"}},
		{"redirect loop", urlLimits(t, 0, "127.0.0.1"), base + "/loop", 4, "invalid_image", []string{"redirects more than 3 times"}},
		{"not found", urlLimits(t, 0, "127.0.0.1"), base + "/nothing.png", 1, "invalid_image", []string{"HTTP 404"}},
		{"type the bytes contradict", urlLimits(t, 0, "127.0.0.1"), base + "/says-jpeg", 1, "", []string{"image/jpeg but its bytes are png"}},
		{"declared larger than the bound", small, base + "/big", 1, "limit_exceeded", []string{"--max-image-bytes", strconv.Itoa(len(png)) + " bytes"}},
	} {
		hits.Store(0)
		_, e := c.lim.ImageURL(context.Background(), c.url, "messages[0].content[1].image_url.url")
		if e == nil || e.Status != http.StatusBadRequest || e.Param != "messages[0].content[1].image_url.url" || !strings.Contains(e.Message, "'messages[0].content[1].image_url.url'") || e.Code != c.code {
			t.Errorf("%s: %+v; want a 400 (%s) naming the field", c.name, e, c.code)
			continue
		}
		for _, s := range c.says {
			if !strings.Contains(e.Message, s) {
				t.Errorf("%s: %q; want it to say %q", c.name, e.Message, s)
			}
		}
		if n := hits.Load(); n != c.hits {
			t.Errorf("%s: the server got %d requests; want %d", c.name, n, c.hits)
		}
	}
}

// TestImageURLBounded: a body longer than --max-image-bytes, without a
// declared length, is refused once the bound is passed, and the fetcher
// reads no further (the server's writes fail long before it has written
// all); a server that does not answer within --media-fetch-timeout is a
// 400 naming that flag; a request cancelled during a fetch ends it.
func TestImageURLBounded(t *testing.T) {
	const chunk, total = 32 << 10, 256 << 20
	wrote := make(chan int64, 1)
	arrived := make(chan struct{})
	port, _ := serveImages(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/endless":
			w.Header().Set("Content-Type", "image/png")
			buf := make([]byte, chunk)
			var n int64
			for n < total {
				if _, err := w.Write(buf); err != nil {
					break
				}
				w.(http.Flusher).Flush()
				n += chunk
			}
			wrote <- n
		case "/silent":
			<-r.Context().Done() // the client gives up
		case "/arrive":
			arrived <- struct{}{}
			<-r.Context().Done()
		}
	})
	base := "http://127.0.0.1:" + port
	lim := urlLimits(t, 0, "127.0.0.1")
	lim.Media.MaxImageBytes = 1 << 20
	_, e := lim.ImageURL(context.Background(), base+"/endless", "x")
	if e == nil || e.Status != http.StatusBadRequest || e.Code != "limit_exceeded" || !strings.Contains(e.Message, "over --max-image-bytes 1048576") {
		t.Errorf("an endless body: %+v; want a 400 naming --max-image-bytes", e)
	}
	if n := <-wrote; n >= total {
		t.Errorf("the server wrote all %d bytes: the fetcher read past the bound", n)
	}

	slow := urlLimits(t, 50*time.Millisecond, "127.0.0.1")
	_, e = slow.ImageURL(context.Background(), base+"/silent", "x")
	if e == nil || e.Status != http.StatusBadRequest || e.Param != "x" || !strings.Contains(e.Message, "took over --media-fetch-timeout 50ms") {
		t.Errorf("a server that does not answer: %+v; want a 400 naming --media-fetch-timeout", e)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	if _, e = lim.ImageURL(ctx, base+"/arrive", "x"); e == nil || e.Status != 499 {
		t.Errorf("a request cancelled during its fetch: %+v; want 499", e)
	}
}
