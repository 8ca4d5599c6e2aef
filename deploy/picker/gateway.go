package picker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// MaxBody bounds a request body the gateway reads (corral's own default
// is smaller; the server behind refuses what it would not take).
const MaxBody = 64 << 20

// Gateway is a small HTTP gateway in Envoy's place. With ExtProc set it
// speaks the ext_proc protocol as Envoy does with the endpoint picker
// (full-duplex streamed bodies): it sends each request's headers and body
// to the picker, proxies the body the picker gives back to the endpoint it
// names in x-gateway-destination-endpoint, and streams the response's
// headers and body through the picker to the client. Without ExtProc it
// sends requests to Endpoints in turn (round robin), the baseline.
type Gateway struct {
	ExtProc   extProcPb.ExternalProcessorClient
	Endpoints []string
	Client    *http.Client

	next  atomic.Uint64
	mu    sync.Mutex
	picks map[string]int
}

// Picks returns how many requests went to each endpoint.
func (g *Gateway) Picks() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]int, len(g.picks))
	for k, v := range g.picks {
		out[k] = v
	}
	return out
}

func (g *Gateway) count(dest string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.picks == nil {
		g.picks = map[string]int{}
	}
	g.picks[dest]++
}

// ServeHTTP routes one request.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		http.Error(w, "gateway: "+err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	if g.ExtProc == nil {
		dest := g.Endpoints[int(g.next.Add(1)-1)%len(g.Endpoints)]
		g.count(dest)
		resp, err := g.upstream(r, dest, body)
		if err != nil {
			http.Error(w, "gateway: "+err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		copyHeader(w, resp)
		w.WriteHeader(resp.StatusCode)
		flushCopy(w, resp.Body)
		return
	}
	if err := g.process(w, r, body); err != nil && !errors.Is(err, context.Canceled) {
		http.Error(w, "gateway: "+err.Error(), http.StatusBadGateway)
	}
}

// process runs one request through the picker. An error before anything
// was written to w is the caller's to report.
func (g *Gateway) process(w http.ResponseWriter, r *http.Request, body []byte) error {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stream, err := g.ExtProc.Process(ctx)
	if err != nil {
		return fmt.Errorf("ext_proc: %w", err)
	}
	hdrs := []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte(r.Method)},
		{Key: ":path", RawValue: []byte(r.URL.RequestURI())},
		{Key: ":authority", RawValue: []byte(r.Host)},
		{Key: ":scheme", RawValue: []byte("http")},
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			hdrs = append(hdrs, &corev3.HeaderValue{Key: http.CanonicalHeaderKey(k), RawValue: []byte(v)})
		}
	}
	for _, m := range []*extProcPb.ProcessingRequest{
		{Request: &extProcPb.ProcessingRequest_RequestHeaders{RequestHeaders: &extProcPb.HttpHeaders{Headers: &corev3.HeaderMap{Headers: hdrs}}}},
		{Request: &extProcPb.ProcessingRequest_RequestBody{RequestBody: &extProcPb.HttpBody{Body: body, EndOfStream: true}}},
	} {
		if err := stream.Send(m); err != nil {
			return fmt.Errorf("ext_proc send: %w", err)
		}
	}
	// The picker answers the headers (naming the endpoint) and then the
	// body, in chunks, as it wants it sent.
	var dest string
	var out bytes.Buffer
	for done := false; !done; {
		resp, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("ext_proc: %w", err)
		}
		switch v := resp.Response.(type) {
		case *extProcPb.ProcessingResponse_ImmediateResponse:
			ir := v.ImmediateResponse
			code := int(ir.GetStatus().GetCode())
			if code == 0 {
				code = http.StatusInternalServerError
			}
			w.WriteHeader(code)
			w.Write(ir.GetBody())
			return nil
		case *extProcPb.ProcessingResponse_RequestHeaders:
			for _, h := range v.RequestHeaders.GetResponse().GetHeaderMutation().GetSetHeaders() {
				if h.GetHeader().GetKey() == EndpointKey {
					dest = headerValue(h.GetHeader())
				}
			}
		case *extProcPb.ProcessingResponse_RequestBody:
			sr := v.RequestBody.GetResponse().GetBodyMutation().GetStreamedResponse()
			if sr == nil {
				out.Write(body) // no mutation: the body as sent
				done = true
				break
			}
			out.Write(sr.GetBody())
			done = sr.GetEndOfStream()
		default:
			return fmt.Errorf("ext_proc: unexpected %T before the request was sent", v)
		}
	}
	eps := splitEndpoints(dest)
	if len(eps) == 0 {
		return errors.New("the picker named no endpoint")
	}
	g.count(eps[0])
	up, err := g.upstream(r, eps[0], out.Bytes())
	if err != nil {
		return err
	}
	defer up.Body.Close()
	if err := stream.Send(&extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extProcPb.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":status", RawValue: []byte(strconv.Itoa(up.StatusCode))},
			{Key: "content-type", RawValue: []byte(up.Header.Get("Content-Type"))},
		}},
	}}}); err != nil {
		return fmt.Errorf("ext_proc send: %w", err)
	}
	// The picker's answers to the response go to the client as they come.
	recvDone := make(chan error, 1)
	go func() {
		recvDone <- func() error {
			for {
				resp, err := stream.Recv()
				if err != nil {
					return err
				}
				switch v := resp.Response.(type) {
				case *extProcPb.ProcessingResponse_ResponseHeaders:
					copyHeader(w, up)
					w.WriteHeader(up.StatusCode)
				case *extProcPb.ProcessingResponse_ResponseBody:
					sr := v.ResponseBody.GetResponse().GetBodyMutation().GetStreamedResponse()
					w.Write(sr.GetBody())
					if f, ok := w.(http.Flusher); ok {
						f.Flush()
					}
					if sr.GetEndOfStream() {
						return nil
					}
				}
			}
		}()
	}()
	buf := make([]byte, 32<<10)
	var sendErr error
	for {
		n, err := up.Body.Read(buf)
		if n > 0 {
			if sendErr = stream.Send(&extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_ResponseBody{
				ResponseBody: &extProcPb.HttpBody{Body: bytes.Clone(buf[:n])}}}); sendErr != nil {
				break
			}
		}
		if err != nil {
			sendErr = stream.Send(&extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_ResponseBody{
				ResponseBody: &extProcPb.HttpBody{EndOfStream: true}}})
			break
		}
	}
	if sendErr != nil {
		cancel()
	}
	// The response's headers are out: an error from here on shows as a
	// cut body, as behind Envoy.
	<-recvDone
	_ = stream.CloseSend()
	return nil
}

// upstream sends the request, with body, to dest (host:port).
func (g *Gateway) upstream(r *http.Request, dest string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+dest+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, vs := range r.Header {
		if k == "Content-Length" {
			continue
		}
		req.Header[k] = vs
	}
	client := g.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: %w", dest, err)
	}
	return resp, nil
}

func headerValue(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

func copyHeader(w http.ResponseWriter, resp *http.Response) {
	for k, vs := range resp.Header {
		if k == "Content-Length" {
			continue
		}
		w.Header()[k] = vs
	}
}

// flushCopy copies src to w, flushing each read so that streams stream.
func flushCopy(w http.ResponseWriter, src io.Reader) {
	buf := make([]byte, 32<<10)
	f, _ := w.(http.Flusher)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			w.Write(buf[:n])
			if f != nil {
				f.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}
