package serving

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gate"
)

// What a caller may ask of the scheduler and the prefix cache. The
// caller is the request's API key as package gate found it; on a server
// without keys it is the zero gate.Caller, who may do everything an admin
// may. A caller that is not admin gets its key's priority class or a
// worse one, and pauses of at most Options.MaxPause; with
// CacheIsolationKey each key has a prefix cache of its own.

// MaxPriority bounds the magnitude of a priority value, whoever asks.
const MaxPriority = 1000

// PriorityHeader carries a request's priority class for clients that
// cannot add a body field; the body's "priority" wins when both are set.
const PriorityHeader = "X-Priority"

// DefaultMaxPause is Options.MaxPause's default (corral serve's
// --max-pause): twice the default pause (engine.DefaultPauseTimeout), and
// more than a client needs to speak the longest chunk (max_chars 300 is
// about 20 s of speech) before it continues.
const DefaultMaxPause = time.Minute

// MaxPauseTimeout bounds a request's pause_timeout, an admin's too.
const MaxPauseTimeout = time.Hour

// MaxCacheSalt bounds a request's cache_salt, in bytes.
const MaxCacheSalt = 1024

// CacheIsolation says which requests share cached prompt prefixes (see
// Options.CacheIsolation).
type CacheIsolation string

// Cache isolations.
const (
	// CacheIsolationNone: requests share cached prefixes unless they
	// set different cache_salt values (vLLM's field).
	CacheIsolationNone CacheIsolation = "none"
	// CacheIsolationKey: each API key is a tenant of its own, its cache
	// also split by cache_salt; without keys, as CacheIsolationNone.
	CacheIsolationKey CacheIsolation = "key"
)

// ParseCacheIsolation reads a cache isolation by name: none or key.
func ParseCacheIsolation(s string) (CacheIsolation, error) {
	switch c := CacheIsolation(s); c {
	case CacheIsolationNone, CacheIsolationKey:
		return c, nil
	}
	return "", fmt.Errorf("%q: want none or key", s)
}

// Admission applies the caller's bounds to req: its priority class (the
// body's "priority", else the X-Priority header h, else the key's class),
// its pause timeout when it is paced, and its cache salt (the body's
// cache_salt, salt, nil when absent).
func (c *Core) Admission(ctx context.Context, req *engine.Request, body *int, h http.Header, salt *string) *Error {
	caller := gate.FromContext(ctx)
	var e *Error
	if req.Priority, e = priority(caller, body, h); e != nil {
		return e
	}
	if req.Chunking != nil {
		if req.PauseTimeout, e = c.pauseTimeout(caller, req.PauseTimeout); e != nil {
			return e
		}
	}
	req.CacheSalt, e = c.cacheSalt(caller, salt)
	return e
}

// priority returns the class a request of caller c asks for: the body
// field, else the header, else the class of c's key (0 without one).
// Every value is within ±MaxPriority. A caller that is not admin may ask
// for its key's class or a worse one (a higher value), not a better one.
func priority(c gate.Caller, body *int, h http.Header) (int, *Error) {
	base, _ := c.Priority()
	p := base
	switch v := h.Get(PriorityHeader); {
	case body != nil:
		if *body < -MaxPriority || *body > MaxPriority {
			return 0, Invalid("priority", "'priority' must be within [%d, %d], got %d", -MaxPriority, MaxPriority, *body)
		}
		p = *body
	case v != "":
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < -MaxPriority || n > MaxPriority {
			return 0, Invalid("priority", "header %s must be an integer within [%d, %d], got %q", PriorityHeader, -MaxPriority, MaxPriority, v)
		}
		p = n
	}
	if p < base && !c.Admin() {
		return 0, &Error{Status: http.StatusForbidden, Param: "priority", Code: "priority_not_allowed",
			Message: fmt.Sprintf("'priority' %d is a better class than this API key's (%d): only an admin key may ask for a better one", p, base)}
	}
	return p, nil
}

// pauseTimeout is the pause timeout of a paced request of caller c that
// asked for d (0: the default): at most Options.MaxPause unless c is
// admin.
func (c *Core) pauseTimeout(caller gate.Caller, d time.Duration) (time.Duration, *Error) {
	if d == 0 {
		return min(engine.DefaultPauseTimeout, c.maxPause), nil
	}
	if d > c.maxPause && !caller.Admin() {
		return 0, Invalid("chunking", "'chunking.pause_timeout' of %g seconds is longer than this server's --max-pause of %g seconds; only an admin key may pause longer",
			d.Seconds(), c.maxPause.Seconds())
	}
	return d, nil
}

// cacheSalt is the engine's Request.CacheSalt for a request of caller c
// with cache_salt salt (nil: none): "" (the shared cache) with neither a
// salt nor a tenant key, else a SHA-256 digest of the key's id (with
// CacheIsolationKey) and the salt, so that the engine compares 32 bytes,
// and keeps no client's salt.
func (c *Core) cacheSalt(caller gate.Caller, salt *string) (string, *Error) {
	s := ""
	if salt != nil {
		if *salt == "" {
			return "", Invalid("cache_salt", "'cache_salt' must be a non-empty string")
		}
		if len(*salt) > MaxCacheSalt {
			return "", Invalid("cache_salt", "'cache_salt' is %d bytes long; at most %d are allowed", len(*salt), MaxCacheSalt)
		}
		s = *salt
	}
	id := ""
	if c.isolation == CacheIsolationKey {
		id = caller.ID()
	}
	if id == "" && s == "" {
		return "", nil
	}
	h := sha256.New()
	fmt.Fprintf(h, "corral cache salt\x00%d:%s\x00%s", len(id), id, s)
	return string(h.Sum(nil)), nil
}

// AdminOnly refuses a caller that is not admin the endpoint what (403).
func AdminOnly(r *http.Request, what string) *Error {
	if gate.FromContext(r.Context()).Admin() {
		return nil
	}
	return &Error{Status: http.StatusForbidden, Code: "admin_required",
		Message: what + " needs an admin API key"}
}

// LoadFailed is what a caller that is not admin learns of a failed load
// of model id: not its cause, which names files on the server.
func LoadFailed(id string) string {
	return fmt.Sprintf("the model %q failed to load (the server's log has the cause)", id)
}
