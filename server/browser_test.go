package server

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/internal/testbrowser"
)

// browser is a headless Chromium tab driven by chromedp, with the page's
// console errors and uncaught exceptions collected.
type browser struct {
	t      *testing.T
	ctx    context.Context
	shots  string // folder of the screenshots
	mu     sync.Mutex
	errors []string
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
				b.errors = append(b.errors, m.String())
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

// jsErrors fails the test if the page threw or logged an error.
func (b *browser) jsErrors() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errors) > 0 {
		b.t.Fatalf("the page reported errors:\n%s", strings.Join(b.errors, "\n"))
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

	b.do("load the page", chromedp.Navigate(ts.url+"/"))
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
	b.jsErrors()
}
