package engine_test

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/internal/testmodel"
	"github.com/corral-llm/corral/internal/testsynth"
)

// benchProjector is a vision encoder of ViT-B's size (768 wide, 3,072
// feed-forward, 12 heads, 12 layers) taking 448 × 448 images in 14 × 14
// patches, 256 tokens an image: the synthetic gemma3 text model and its
// projector, written into dir.
func benchProjector(b *testing.B, dir string) (model, proj string) {
	model, _ = testsynth.Projector(b, dir, "gemma3")
	proj = filepath.Join(dir, "vitb.mmproj.gguf")
	shape := gguf.ProjectorShape{Embd: 768, FF: 3072, Heads: 12, Layers: 12, ImageSize: 448, PatchSize: 14}
	if err := gguf.WriteSyntheticProjectorShape(proj, "gemma3", 256, 1, shape); err != nil {
		b.Fatal(err)
	}
	return model, proj
}

// BenchmarkStreamsWhileImagesArrive: 15 text streams decode 4,000 tokens
// each (some seconds on the tiny synthetic model) while requests with an
// image (a ViT-B-sized encoder, 256 tokens) arrive one after the other on
// a 16th slot; it reports the streams' inter-token latency (p50, p99,
// p99.9 and the longest gap), the time an image takes to encode, and
// an image request's time (its median: submit to its 4th token).
// "none" sends no image; "beside" is the engine as it is, its encoder
// beside the steps; "inline" waits for each encode in the scheduler, as
// llama-server's loop does.
func BenchmarkStreamsWhileImagesArrive(b *testing.B) {
	model, proj := benchProjector(b, b.TempDir())
	rgb, w, h := testsynth.RGB(b, "gradient-64.png")
	for _, mode := range []string{"none", "beside", "inline"} {
		b.Run(mode, func(b *testing.B) {
			cfg := engine.Config{ModelPath: model, MMProj: proj, Parallel: 16, BatchSize: 512, Threads: benchThreads(), CtxSize: 16 * 4096}
			if mode == "inline" {
				cfg = engine.InlineEncoder(cfg)
			}
			e, err := engine.New(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			var itl, imgTime []time.Duration
			images := 0
			b.ResetTimer()
			for range b.N {
				var mu sync.Mutex
				var wg sync.WaitGroup
				var done atomic.Bool
				for i := range 15 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						p := testmodel.ArchPrompts[i%len(testmodel.ArchPrompts)]
						s, err := e.Submit(context.Background(), engine.Request{Prompt: p.Prompt, AddSpecial: true, MaxTokens: 4000, IgnoreEOS: true, NoCachePrompt: true})
						if err != nil {
							b.Error(err)
							return
						}
						var gaps []time.Duration
						var last time.Time
						for {
							_, err := s.Recv(context.Background())
							if errors.Is(err, io.EOF) {
								break
							}
							if err != nil {
								b.Error(err)
								return
							}
							if now := time.Now(); !last.IsZero() {
								gaps = append(gaps, now.Sub(last))
								last = now
							} else {
								last = now
							}
						}
						mu.Lock()
						itl = append(itl, gaps...)
						mu.Unlock()
					}()
				}
				imgDone := make(chan struct{})
				if mode != "none" {
					go func() {
						defer close(imgDone)
						for k := 0; !done.Load(); k++ {
							// Another ID each time: no cache hit.
							req := engine.Request{Prompt: "Describe the image.", AddSpecial: true, MaxTokens: 4, NoCachePrompt: true,
								Media: []engine.Media{{At: 8, RGB: rgb, W: w, H: h, ID: time.Now().String()}}}
							start := time.Now()
							s, err := e.Submit(context.Background(), req)
							if err != nil {
								b.Error(err)
								return
							}
							collect(b, s)
							imgTime = append(imgTime, time.Since(start))
							images++
						}
					}()
				} else {
					close(imgDone)
				}
				wg.Wait()
				done.Store(true)
				<-imgDone
			}
			b.StopTimer()
			slices.Sort(itl)
			if len(itl) > 0 {
				b.ReportMetric(float64(itl[len(itl)/2].Microseconds())/1000, "itl-p50-ms")
				b.ReportMetric(float64(itl[len(itl)*99/100].Microseconds())/1000, "itl-p99-ms")
				b.ReportMetric(float64(itl[len(itl)*999/1000].Microseconds())/1000, "itl-p99.9-ms")
				b.ReportMetric(float64(itl[len(itl)-1].Microseconds())/1000, "itl-max-ms")
			}
			st := e.Stats()
			b.ReportMetric(float64(images)/float64(b.N), "images/op")
			if len(imgTime) > 0 {
				slices.Sort(imgTime)
				b.ReportMetric(float64(imgTime[len(imgTime)/2].Milliseconds()), "image-request-ms")
			}
			if st.MediaEncoded > 0 {
				b.ReportMetric(float64(st.MediaEncodeTime.Milliseconds())/float64(st.MediaEncoded), "encode-ms")
			}
		})
	}
}

// BenchmarkImageEncode: one request with an image at a time, nothing
// else running, the encoder with all the engine's threads (as
// llama-mtmd-cli's, to compare with its "mtmd batch encoding done in"):
// the encode's time, and the request's end to end.
func BenchmarkImageEncode(b *testing.B) {
	model, proj := benchProjector(b, b.TempDir())
	rgb, w, h := testsynth.RGB(b, "gradient-64.png")
	cfg := engine.InlineEncoder(engine.Config{ModelPath: model, MMProj: proj, Parallel: 1, BatchSize: 512, Threads: benchThreads()})
	e, err := engine.New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	b.ResetTimer()
	for i := range b.N {
		req := engine.Request{Prompt: "Describe the image.", AddSpecial: true, MaxTokens: 1, NoCachePrompt: true,
			Media: []engine.Media{{At: 8, RGB: rgb, W: w, H: h, ID: strconv.Itoa(i)}}}
		collect(b, submit(b, e, req))
	}
	b.StopTimer()
	st := e.Stats()
	b.ReportMetric(float64(st.MediaEncodeTime.Microseconds())/1000/float64(st.MediaEncoded), "encode-ms")
}
