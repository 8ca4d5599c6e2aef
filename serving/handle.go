package serving

import (
	"context"
	"net/http"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/model"
)

// Body is a decoded request body, as Handle reads it before the model.
type Body interface {
	// Check refuses what no model would serve, and what is over lim,
	// before the model loads (and evicts others).
	Check(lim *Limits) *Error
	// Lease names the model the request is for ("": the default) and the
	// keep_alive it asks (nil: none); ok false when it needs no model
	// leased (it lists models, or leases one itself).
	Lease() (name string, keep *KeepAlive, ok bool)
}

// MediaBody is a Body with images or sounds, which CheckMedia decodes
// within lim (after Check, before the model is leased), into the
// translated request's Media, which Media returns.
type MediaBody interface {
	CheckMedia(ctx context.Context, lim *Limits) *Error
	Media() []engine.Media
}

// QueryBody is a Body read from the URL's query (a GET's) rather
// than from a body: Handle calls ReadQuery in place of decoding one.
type QueryBody interface {
	ReadQuery(r *http.Request) *Error
}

// ModelErrorer is a Body that words the errors of leasing its model
// in its own way (Ollama's "model 'x' not found").
type ModelErrorer interface {
	ModelError(e *Error) *Error
}

// Exchange is one request being served: the HTTP exchange, the Core,
// and the model leased for it.
type Exchange struct {
	Core *Core
	W    http.ResponseWriter
	R    *http.Request
	// Start is when Handle began to serve the request.
	Start time.Time
	// Lease is the hold on the request's model, Model the model; both
	// nil when the request leased none (Body.Lease's ok false).
	Lease *Lease
	Model *model.Model
	// LoadTime is how long leasing the model took, loading it if need
	// be.
	LoadTime time.Duration
}

// Context is the request's context.
func (x *Exchange) Context() context.Context { return x.R.Context() }

// ErrorWriter writes an error response in a dialect's shape.
type ErrorWriter func(w http.ResponseWriter, e *Error)

// Handle is every dialect's handler prologue: it decodes the body into a
// fresh T (an empty body too when optional; a QueryBody reads the
// query instead), checks it, leases the model
// it names, calls serve, releases the model, and writes the error any of
// them returned with writeErr. serve writes the response (or returns an
// error before writing anything).
func Handle[T any, P interface {
	*T
	Body
}](c *Core, w http.ResponseWriter, r *http.Request, writeErr ErrorWriter, optional bool, serve func(x *Exchange, body P) *Error) {
	x := &Exchange{Core: c, W: w, R: r, Start: time.Now()}
	if e := handle(x, optional, serve); e != nil {
		writeErr(w, e)
	}
}

func handle[T any, P interface {
	*T
	Body
}](x *Exchange, optional bool, serve func(x *Exchange, body P) *Error) *Error {
	body := P(new(T))
	decode := DecodeBody
	if optional {
		decode = DecodeOptionalBody
	}
	if q, ok := any(body).(QueryBody); ok {
		decode = func(r *http.Request, _ any) *Error { return q.ReadQuery(r) }
	}
	if e := decode(x.R, body); e != nil {
		return e
	}
	if e := body.Check(x.Core.Limits()); e != nil {
		return e
	}
	if mb, ok := any(body).(MediaBody); ok {
		release, e := x.Core.media.decode(x.R.Context(), mb, x.Core.Limits())
		if e != nil {
			return e
		}
		defer release()
	}
	if name, keep, ok := body.Lease(); ok {
		start := time.Now()
		l, e := x.Core.Acquire(x.R.Context(), name, keep)
		if e != nil {
			if me, ok := any(body).(ModelErrorer); ok {
				e = me.ModelError(e)
			}
			return e
		}
		defer l.Release()
		x.Lease, x.Model, x.LoadTime = l, l.Model(), time.Since(start)
	}
	return serve(x, body)
}

// DecodeMediaBody decodes body's media within the Core's limits and takes
// their bytes from its media budget, as Handle does for a MediaBody,
// for a request that comes another way (a voice turn's sound); release
// gives the bytes back once the request is answered.
func (c *Core) DecodeMediaBody(ctx context.Context, body MediaBody) (release func(), e *Error) {
	return c.media.decode(ctx, body, &c.limits)
}

// Route is one endpoint of a dialect: its method, its paths, its handler.
type Route struct {
	Method  string
	Paths   []string
	Handler func(c *Core, w http.ResponseWriter, r *http.Request)
}
