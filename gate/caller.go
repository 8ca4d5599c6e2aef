package gate

import (
	"context"
)

// Role is what a key may do.
type Role uint8

// Roles.
const (
	// RoleUser may run inference: generate, embed, tokenize, list models,
	// read its own jobs.
	RoleUser Role = iota + 1
	// RoleAdmin may also load and unload models (keep_alive, /props?model=),
	// read /slots and /metrics, ask for a priority better than the default,
	// pause longer than the server's cap, read any job and restart workers.
	RoleAdmin
)

// String names the role as key files spell it.
func (r Role) String() string {
	switch r {
	case RoleUser:
		return "user"
	case RoleAdmin:
		return "admin"
	}
	return "unknown"
}

// Caller is who sent a request, as the gate authenticated it.
type Caller struct {
	// Key is the key the request presented; nil when the server has no
	// keys, and then every caller may do everything (as before keys).
	Key *Key

	// anonymous: the server has keys and this request, to a public
	// route, presented none.
	anonymous bool
}

// Admin reports whether the caller may do what RoleAdmin may.
func (c Caller) Admin() bool {
	if c.Key == nil {
		return !c.anonymous
	}
	return c.Key.Role == RoleAdmin
}

// ID names the caller's key in logs, metrics and ownership checks (never
// the secret); "" without keys.
func (c Caller) ID() string {
	if c.Key == nil {
		return ""
	}
	return c.Key.ID
}

// Priority is the priority class the caller's key sets for its requests
// (vLLM's meaning: lower is served first), and whether it sets one.
func (c Caller) Priority() (int, bool) {
	if c.Key == nil || c.Key.Priority == nil {
		return 0, false
	}
	return *c.Key.Priority, true
}

type callerKey struct{}

// WithCaller returns ctx carrying c: the gate does this for every request
// it lets through; in-process callers (tests, the voice socket acting for
// its HTTP request) pass theirs on.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// FromContext returns the caller of the request ctx belongs to: the zero
// Caller (no key: everything allowed) outside a gated request.
func FromContext(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c
}
