package gate

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"
)

// presentedKey is the key a request sends: "Authorization: Bearer KEY"
// (OpenAI's and Ollama's clients) or "x-api-key: KEY" (Anthropic's).
func presentedKey(r *http.Request) string {
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return k
	}
	auth := r.Header.Get("Authorization")
	if len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		return strings.TrimSpace(auth[7:])
	}
	return ""
}

// authenticate puts the request's Caller into its context. Without keys
// every request is let through as the zero Caller (everything allowed).
// With keys, a public request (Config.Public) without a valid key is an
// anonymous caller; any other needs a valid key (401), and its key's
// limits (429) unless it is unmetered (Config.Unmetered).
func (g *Gate) authenticate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.cfg.Policy.Keys.Len() == 0 {
			h.ServeHTTP(w, r)
			return
		}
		secret := presentedKey(r)
		k := g.cfg.Policy.Keys.Lookup(secret)
		if k == nil {
			if g.cfg.Public != nil && g.cfg.Public(r) {
				h.ServeHTTP(w, withCaller(r, Caller{anonymous: true}))
				return
			}
			msg := "invalid API key"
			if secret == "" {
				msg = "missing API key: send it as Authorization: Bearer KEY, or x-api-key: KEY"
			}
			g.refuse(w, r, &Error{Status: http.StatusUnauthorized, Code: "invalid_api_key", Message: msg})
			return
		}
		r = withCaller(r, Caller{Key: k})
		if g.cfg.Unmetered != nil && g.cfg.Unmetered(r) {
			h.ServeHTTP(w, r)
			return
		}
		l := g.limits.of(k)
		if err := l.admit(k, time.Now()); err != nil {
			g.refuse(w, r, err)
			return
		}
		lease := &Lease{l: l}
		defer lease.endRequest()
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), limitKey{}, lease)))
	})
}

// limits holds each key's usage, by key id (it survives a key file
// reload that keeps the key).
type limits struct {
	mu   sync.Mutex
	byID map[string]*keyLimit
}

func newLimits() *limits { return &limits{byID: map[string]*keyLimit{}} }

func (ls *limits) of(k *Key) *keyLimit {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := ls.byID[k.ID]
	if l == nil {
		l = &keyLimit{}
		ls.byID[k.ID] = l
	}
	return l
}

// keyLimit is one key's requests in flight and its token bucket: it
// holds up to TokensPerMinute tokens and earns TokensPerMinute/60 a
// second; requests spend what they used (Charge) and may drive it below
// zero; a key whose bucket is empty waits until it has earned some back.
type keyLimit struct {
	mu       sync.Mutex
	inflight int
	tokens   float64 // the bucket; starts full
	last     time.Time
	started  bool
}

// admit lets a request of k in, counting it in flight until done is
// called, or says when to retry (429).
func (l *keyLimit) admit(k *Key, now time.Time) *Error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if tpm := float64(k.TokensPerMinute); tpm > 0 {
		l.refill(tpm, now)
		if l.tokens <= 0 {
			wait := time.Duration((1 - l.tokens) / (tpm / 60) * float64(time.Second))
			return &Error{Status: http.StatusTooManyRequests, Code: "rate_limit_exceeded", RetryAfter: max(wait, time.Second),
				Message: "this API key used its tokens per minute: retry later"}
		}
	}
	if k.MaxConcurrent > 0 && l.inflight >= k.MaxConcurrent {
		return &Error{Status: http.StatusTooManyRequests, Code: "rate_limit_exceeded", RetryAfter: time.Second,
			Message: "this API key has as many requests in flight as it may: retry when one ends"}
	}
	l.inflight++
	return nil
}

// done ends one request (or kept work) that admit let in.
func (l *keyLimit) done() {
	l.mu.Lock()
	l.inflight--
	l.mu.Unlock()
}

// refill adds what the bucket earned since it was last looked at.
func (l *keyLimit) refill(tpm float64, now time.Time) {
	if !l.started {
		l.tokens, l.last, l.started = tpm, now, true
		return
	}
	l.tokens = min(tpm, l.tokens+now.Sub(l.last).Seconds()*tpm/60)
	l.last = now
}

func (l *keyLimit) spend(n int) {
	l.mu.Lock()
	l.tokens -= float64(n)
	l.mu.Unlock()
}

type limitKey struct{}

// Charge records that the request ctx belongs to used tokens (prompt and
// generated), against its key's tokens per minute. Outside a keyed,
// metered request it does nothing.
func Charge(ctx context.Context, tokens int) {
	if lease, ok := ctx.Value(limitKey{}).(*Lease); ok {
		lease.Charge(tokens)
	}
}

// Lease is a metered request's place among its key's requests in flight
// (Key.MaxConcurrent), and its account for the tokens it uses
// (Key.TokensPerMinute). The gate gives its place back when the request
// returns, unless a handler kept it (Keep) for work that goes on after
// the answer, such as a supervisor's job: that work then holds the place
// until it calls Release. The methods of a nil Lease do nothing.
type Lease struct {
	l *keyLimit

	mu       sync.Mutex
	kept     bool
	released bool
}

// Keep keeps the place of the request ctx belongs to among its key's
// requests in flight after the request returns, until the returned
// Lease's Release; the work it stands for charges its tokens with
// Lease.Charge. Keep returns nil outside a keyed, metered request (no
// limits apply) and for a request whose place was kept already.
func Keep(ctx context.Context) *Lease {
	lease, ok := ctx.Value(limitKey{}).(*Lease)
	if !ok {
		return nil
	}
	lease.mu.Lock()
	defer lease.mu.Unlock()
	if lease.kept || lease.released {
		return nil
	}
	lease.kept = true
	return lease
}

// Charge records that the lease's work used tokens (prompt and
// generated), against its key's tokens per minute; it may take the key's
// bucket below zero. It may be called after Release.
func (lease *Lease) Charge(tokens int) {
	if lease != nil && tokens > 0 {
		lease.l.spend(tokens)
	}
}

// Release gives the lease's place among its key's requests in flight
// back. Calls after the first do nothing.
func (lease *Lease) Release() {
	if lease == nil {
		return
	}
	lease.mu.Lock()
	done := !lease.released
	lease.released = true
	lease.mu.Unlock()
	if done {
		lease.l.done()
	}
}

// endRequest gives the place back when its request returns, unless it
// was kept.
func (lease *Lease) endRequest() {
	lease.mu.Lock()
	kept := lease.kept
	lease.mu.Unlock()
	if !kept {
		lease.Release()
	}
}

// contextWithState returns ctx carrying the request state the log line reads.
func contextWithState(ctx context.Context, st *requestState) context.Context {
	return context.WithValue(ctx, stateKey{}, st)
}
