package supervisor

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// proxyChat forwards one chat completion, whose body has already been read,
// to the worker's child with net/http/httputil's ReverseProxy, and copies
// the answer back. r's context must be the one of the slot the completion
// holds (acquire): a restart of the worker cancels it, which cuts the
// response off. The slot accounting stays with the caller, since the
// proxy's ServeHTTP returns only once the response has been copied.
//
// Only Content-Type and Accept go upstream (the client's credentials for
// the supervisor are not the child's business); the child's response
// headers come back as they are. Every write is flushed at once
// (FlushInterval -1), so streams are not buffered. An upstream that cannot
// be reached, or that breaks before sending headers, gives a 502 OpenAI
// error upstream_unreachable; one that breaks mid-body aborts the response
// (the client sees the stream end early, not a clean end). Response bytes
// count as stream activity of the worker for the per-request stall rule
// (TimeoutProfile.IdleStream).
func (w *Worker) proxyChat(rw http.ResponseWriter, r *http.Request, body []byte) {
	target, err := url.Parse(w.baseURL + "/v1/chat/completions")
	if err != nil {
		openAIError(rw, http.StatusInternalServerError, "server_error", "internal_error", "worker "+w.Name()+": "+err.Error())
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL, pr.Out.Host = target, ""
			pr.Out.Header = http.Header{"Content-Type": {"application/json"}}
			if a := pr.In.Header.Get("Accept"); a != "" {
				pr.Out.Header.Set("Accept", a)
			}
			pr.Out.Body = io.NopCloser(bytes.NewReader(body))
			pr.Out.ContentLength = int64(len(body))
			pr.Out.GetBody = nil
		},
		Transport:     w.client.Transport,
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			resp.Body = struct {
				io.Reader
				io.Closer
			}{stampReader{resp.Body, w.streamActivity}, resp.Body}
			return nil
		},
		ErrorHandler: func(rw http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				err = context.Cause(r.Context()) // a restart says why
			}
			openAIError(rw, http.StatusBadGateway, "server_error", "upstream_unreachable", "worker "+w.Name()+": "+err.Error())
		},
		ErrorLog: slog.NewLogLogger(w.log.Handler(), slog.LevelWarn),
	}
	rp.ServeHTTP(rw, r)
}

// streamActivity records that some stream of the worker received bytes.
func (w *Worker) streamActivity() {
	now := time.Now()
	w.mu.Lock()
	w.streamByte = now
	w.mu.Unlock()
}
