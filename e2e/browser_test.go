package e2e

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/e2etest"
	"github.com/corral-llm/corral/internal/testbrowser"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/server"
)

// browser is a headless Chromium tab driven by chromedp, with the page's
// console errors and uncaught exceptions collected.
type browser struct {
	t      *testing.T
	ctx    context.Context
	shots  string // folder of the screenshots
	mu     sync.Mutex
	errors []chromedp.ConsoleMessage
	// expected are parts of the browser's network log entries that the
	// test causes ("Failed to load resource: the server responded with
	// a status of 401"): they are no error.
	expected []string
}

// newBrowser starts a headless Chromium (see testbrowser.Path) for the
// test; it is closed, and waited for, when the test ends.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(testbrowser.Path(t)),
		chromedp.WindowSize(1400, 1000),
		chromedp.NoSandbox, // tests may run as root, where Chromium's sandbox refuses to start
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	// A generous bound for a loaded machine: every step waits for the
	// page, none sleeps.
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	b := &browser{t: t, ctx: ctx, shots: testbrowser.ScreenshotDir(t)}
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		cancelTimeout()
		cancelTab()
		cancelAlloc()
		t.Fatalf("start Chromium %s: %v", testbrowser.Path(t), err)
	}
	console := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range console {
			if err != nil {
				return // the tab is closing
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.errors = append(b.errors, m)
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc() // waits for the browser to exit
		<-done
	})
	return b
}

// do runs steps in the tab, failing the test with what.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// waitJS waits until the JavaScript expression cond is true.
func (b *browser) waitJS(what, cond string) {
	b.t.Helper()
	b.do("wait for "+what, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingInterval(10*time.Millisecond)))
}

// eval returns the string the JavaScript expression evaluates to.
func (b *browser) eval(expr string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// screenshot saves a PNG of the viewport as name in the screenshot
// folder, checking that it shows something: many colours, and many
// pixels other than the background's.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	buf, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(b.shots, name)
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		b.t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(buf))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	colours, background, total := pixels(img)
	if len(colours) < 16 || float64(total-background) < 0.05*float64(total) {
		b.t.Fatalf("screenshot %s looks blank: %d colours, %d of %d pixels not the background's", path, len(colours), total-background, total)
	}
	b.t.Logf("screenshot %s: %dx%d, %d colours, %.0f%% not background", path, img.Bounds().Dx(), img.Bounds().Dy(),
		len(colours), 100*float64(total-background)/float64(total))
}

// pixels counts img's pixels per colour, and returns with the counts the
// number of pixels of the commonest colour (the background) and of all.
func pixels(img image.Image) (colours map[uint32]int, background, total int) {
	colours = make(map[uint32]int)
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			colours[cr>>8<<16|cg>>8<<8|cb>>8]++
		}
	}
	for _, n := range colours {
		background = max(background, n)
	}
	return colours, background, r.Dx() * r.Dy()
}

// expectNetwork tells jsErrors that the browser's network log entries
// containing any of parts are part of the test.
func (b *browser) expectNetwork(parts ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expected = append(b.expected, parts...)
}

// jsErrors fails the test if the page threw or logged an error, other
// than the network log entries expected.
func (b *browser) jsErrors() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []string
	for _, m := range b.errors {
		if m.Source == "network" && slices.ContainsFunc(b.expected, func(part string) bool { return strings.Contains(m.Text, part) }) {
			continue
		}
		errs = append(errs, m.String())
	}
	if len(errs) > 0 {
		b.t.Fatalf("the page reported errors:\n%s", strings.Join(errs, "\n"))
	}
}

// allIdle is a JavaScript condition: the live view shows n slots, all
// idle.
func allIdle(n int) string {
	return fmt.Sprintf(`document.querySelectorAll('#models .slot[data-state="idle"]').length === %d && `+
		`document.querySelectorAll('#models .slot').length === %d`, n, n)
}

// TestWebPageInChromium drives the page in a real headless Chromium: the
// live view shows the model's idle slots; a prompt streams its answer
// into the page while the live view shows a slot decoding; Stop cancels
// the answer mid-stream and the live view shows the slot idle again (the
// server freed it); a short answer shows its token counts and speed.
// Screenshots go to $CORRAL_SCREENSHOTS (see testbrowser.ScreenshotDir).
func TestWebPageInChromium(t *testing.T) {
	b := newBrowser(t)
	// Long contexts, so that an answer with ignore_eos streams long
	// enough for Stop to come in the middle of it: the test waits for
	// the stream, then stops it, whatever the speed.
	const slots = 2
	ts := startServer(t, engine.Config{Parallel: slots, CtxSize: slots * 16384})

	b.do("load the page", chromedp.Navigate(ts.URL+"/"))
	b.waitJS("the model list", `document.querySelector('#model').value === 'tiny'`)
	b.waitJS("the live view", allIdle(slots))
	b.waitJS("the first tokens/s point", `document.querySelector('#chart-tps polyline') !== null`)
	b.screenshot("1-idle.png")

	b.do("ask for a long answer",
		chromedp.SetValue(chromedp.ID("temperature"), "0"),
		chromedp.SetValue(chromedp.ID("seed"), "7"),
		chromedp.SetValue(chromedp.ID("max-tokens"), "30000"),
		chromedp.Click(chromedp.ID("ignore-eos")),
		chromedp.SetValue(chromedp.ID("system"), "You tell stories."),
		chromedp.SendKeys(chromedp.ID("prompt"), "Once upon a time"),
		chromedp.Click(chromedp.ID("send")),
	)
	b.waitJS("streamed text", `document.querySelector('.msg.assistant .text').textContent.length > 200`)
	b.waitJS("a decoding slot in the live view", `document.querySelector('#models .slot[data-state="decode"]') !== null`)
	b.screenshot("2-streaming.png")

	b.do("press Stop", chromedp.Click(chromedp.ID("stop")))
	b.waitJS("the answer's end", `document.querySelector('.msg.assistant').dataset.state !== 'streaming'`)
	if state := b.eval(`document.querySelector('.msg.assistant').dataset.state`); state != "stopped" {
		t.Fatalf("answer %s before Stop took effect; want it stopped mid-stream", state)
	}
	stopped := len(b.eval(`document.querySelector('.msg.assistant .text').textContent`))
	b.waitJS("every slot idle in the live view", allIdle(slots))
	if n := busySlots(t, ts); n != 0 {
		t.Fatalf("%d slots busy after Stop", n)
	}
	if meta := b.eval(`document.querySelector('.msg.assistant .meta').textContent`); !strings.Contains(meta, "stopped") {
		t.Fatalf("stopped answer's meta %q", meta)
	}
	b.screenshot("3-stopped.png")
	// Stop ended the stream: the text no longer grows.
	if now := len(b.eval(`document.querySelector('.msg.assistant .text').textContent`)); now != stopped {
		t.Fatalf("the answer grew from %d to %d bytes after Stop", stopped, now)
	}

	b.do("ask for a short answer in a new conversation",
		chromedp.Click(chromedp.ID("clear")),
		chromedp.SetValue(chromedp.ID("max-tokens"), "24"),
		chromedp.SendKeys(chromedp.ID("prompt"), "Tell me about the dog."),
		chromedp.Click(chromedp.ID("send")),
	)
	b.waitJS("the answer done", `document.querySelector('.msg.assistant').dataset.state === 'done'`)
	meta := b.eval(`document.querySelector('.msg.assistant .meta').textContent`)
	if !strings.Contains(meta, "24 tokens") || !strings.Contains(meta, "tokens/s") || !strings.Contains(meta, "length") {
		t.Fatalf("short answer's meta %q: want 24 tokens, a speed and finish reason length", meta)
	}
	b.waitJS("a TTFT point", `document.querySelector('#chart-ttft rect.bar') !== null`)
	b.waitJS("every slot idle in the live view", allIdle(slots))
	b.screenshot("4-answered.png")
	// A server without keys never asked for one.
	if shown := b.eval(`['key-form', 'forget-key', 'live-note'].filter((id) => !document.getElementById(id).hidden).join()`); shown != "" {
		t.Fatalf("without API keys the page shows %s", shown)
	}
	b.jsErrors()
}

// TestWebPageWithAPIKeys drives the page against a server with API keys.
// Its first calls get 401: it asks for a key in a password field of its
// own; a wrong key is refused and asked for again. With a user key the
// chat works, and the live panel shows a note instead of the server view
// (GET /v1/live is for admins). "Forget key" drops the key and the page
// asks again. With an admin key an answer streams and the live view shows
// the model. The key is in sessionStorage only (nothing in localStorage),
// so a reload asks for nothing. A dropped live stream is opened again,
// with the key; when the server drains, the page stops: "disconnected".
func TestWebPageWithAPIKeys(t *testing.T) {
	const admin, user = "sk-corral-admin-0123456789", "sk-corral-user-0123456789"
	b := newBrowser(t)
	// The browser logs the refusals the test asks for, and the live
	// stream it cuts.
	b.expectNetwork("status of 401 ", "status of 403 ", "status of 503 ",
		"net::ERR_INCOMPLETE_CHUNKED_ENCODING", "net::ERR_CONNECTION_RESET")
	conns := &connTracker{}
	ts := e2etest.Start(t, testmodel.TinyStories656K, e2etest.Options{
		Engine: engine.Config{Parallel: 1},
		Server: server.Config{Policy: e2etest.KeyPolicy(t, nil, nil, admin+" role=admin name=admin", user+" name=user")},
		Wrap:   conns.wrap,
	})
	const keyForm = `!document.querySelector('#key-form').hidden`
	const conn = `document.querySelector('#conn').textContent`
	storedKey := func() string {
		t.Helper()
		return b.eval(`String(sessionStorage.getItem('corral-api-key'))`)
	}
	answer := func(what, prompt string) {
		t.Helper()
		b.eval(`document.querySelector('#ignore-eos').checked = true, ''`) // 16 tokens, whatever the text
		b.do(what,
			chromedp.Click(chromedp.ID("clear")),
			chromedp.SetValue(chromedp.ID("temperature"), "0"),
			chromedp.SetValue(chromedp.ID("max-tokens"), "16"),
			chromedp.SendKeys(chromedp.ID("prompt"), prompt),
			chromedp.Click(chromedp.ID("send")),
		)
		b.waitJS("the answer done", `['done', 'error'].includes(document.querySelector('.msg.assistant').dataset.state)`)
		text := b.eval(`document.querySelector('.msg.assistant .text').textContent`)
		if meta := b.eval(`document.querySelector('.msg.assistant .meta').textContent`); !strings.Contains(meta, "16 tokens") || text == "" {
			t.Fatalf("%s: answer %q, meta %q", what, text, meta)
		}
	}

	b.do("load the page", chromedp.Navigate(ts.URL+"/"))
	b.waitJS("the key form", keyForm)
	if typ := b.eval(`document.querySelector('#api-key').type`); typ != "password" {
		t.Fatalf("the key's input is of type %q", typ)
	}
	if n := b.eval(`String(document.querySelector('#model').options.length)`); n != "0" {
		t.Fatalf("%s models listed before the key", n)
	}
	b.screenshot("keys-1-asked.png")

	b.do("enter a wrong key", chromedp.SendKeys(chromedp.ID("api-key"), "sk-corral-wrong-0123456789"), chromedp.Click(chromedp.ID("use-key")))
	b.waitJS("the key refused", keyForm+` && document.querySelector('#key-message').dataset.state === 'refused'`)
	if k := storedKey(); k != "null" {
		t.Fatalf("the page kept the refused key %q", k)
	}

	b.do("enter the user key", chromedp.SendKeys(chromedp.ID("api-key"), user), chromedp.Click(chromedp.ID("use-key")))
	b.waitJS("the model list", `document.querySelector('#model').value === 'tiny'`)
	b.waitJS("the note instead of the live view", `!document.querySelector('#live-note').hidden && document.querySelector('#live-view').hidden`)
	if note := b.eval(`document.querySelector('#live-note').textContent`); !strings.Contains(note, "admin API key") {
		t.Fatalf("live note %q", note)
	}
	if k := storedKey(); k != user {
		t.Fatalf("sessionStorage holds %q, want the user key", k)
	}
	if n := b.eval(`String(localStorage.length)`); n != "0" {
		t.Fatalf("localStorage holds %s items", n)
	}
	answer("ask with the user key", "Tell me about the dog.")
	b.screenshot("keys-2-user.png")

	b.do("forget the key", chromedp.Click(chromedp.ID("forget-key")))
	b.waitJS("the key form again", keyForm+` && document.querySelector('#forget-key').hidden`)
	if k := storedKey(); k != "null" {
		t.Fatalf("sessionStorage still holds %q after Forget key", k)
	}

	b.do("enter the admin key", chromedp.SendKeys(chromedp.ID("api-key"), admin), chromedp.Click(chromedp.ID("use-key")))
	b.waitJS("the live view", allIdle(1)+` && `+conn+` === 'live' && document.querySelector('#live-note').hidden`)
	answer("ask with the admin key", "Once upon a time")
	b.waitJS("the model in the live view", `document.querySelector('#models .model[data-model="tiny"] .badge').textContent === 'loaded' && `+
		`document.querySelector('#models .model[data-model="tiny"] .slot .detail').textContent.includes('tokens cached')`)
	b.waitJS("the slot idle again", allIdle(1))
	b.screenshot("keys-3-admin.png")

	b.do("reload the page", chromedp.Navigate(ts.URL+"/"))
	b.waitJS("the live view after the reload", allIdle(1)+` && document.querySelector('#model').value === 'tiny'`)
	if b.eval(`String(document.querySelector('#key-form').hidden)`) != "true" {
		t.Fatal("the page asked for the key again after a reload")
	}
	// The page's own load of the model menu and the live view's first
	// snapshot ask for the list once between them: a second fetch could
	// still be running when the connections drop below.
	if n := b.eval(`String(performance.getEntriesByType('resource').filter((e) => new URL(e.name).pathname === '/v1/models').length)`); n != "1" {
		t.Fatalf("the reloaded page fetched /v1/models %s times", n)
	}

	conns.dropAll()
	b.waitJS("the page reconnecting", conn+` === 'reconnecting…'`)
	b.waitJS("the live view back", conn+` === 'live' && `+allIdle(1))
	if b.eval(`String(document.querySelector('#key-form').hidden)`) != "true" {
		t.Fatal("the page asked for the key to reconnect")
	}

	ts.Drain()
	b.waitJS("the page giving up", conn+` === 'disconnected'`)
	b.jsErrors()
}

// connTracker is a listener wrapper that can cut the connections it
// accepted.
type connTracker struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (c *connTracker) wrap(ln net.Listener) net.Listener {
	c.Listener = ln
	return c
}

// Accept accepts a connection and keeps it for dropAll.
func (c *connTracker) Accept() (net.Conn, error) {
	conn, err := c.Listener.Accept()
	if err == nil {
		c.mu.Lock()
		c.conns = append(c.conns, conn)
		c.mu.Unlock()
	}
	return conn, err
}

// dropAll closes every connection accepted so far.
func (c *connTracker) dropAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}
