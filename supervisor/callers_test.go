package supervisor

import (
	"context"
	"net/http"

	"github.com/corral-llm/corral/gate"
)

// testKeyHeader names, in the tests' requests, the key of testKeys the
// request is authenticated with.
const testKeyHeader = "X-Test-Key"

// testKeys are the API keys of the tests' callers, by name.
var testKeys = map[string]*gate.Key{
	"alice": mustKey("secret-alice-0001 role=user name=alice"),
	"bob":   mustKey("secret-bob-00002 role=user name=bob"),
	"root":  mustKey("secret-root-0003 role=admin name=root"),
}

func mustKey(spec string) *gate.Key {
	k, err := gate.ParseKey(spec)
	if err != nil {
		panic(err)
	}
	return k
}

// asCaller stands in for the gate (gate.Wrap) in front of h: a request
// whose X-Test-Key header names a key of testKeys runs as that key's
// Caller; one without the header runs as the zero Caller, as every request
// does on a server without keys. An unknown name gets 401.
func asCaller(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.Header.Get(testKeyHeader)
		if name == "" {
			h.ServeHTTP(w, r)
			return
		}
		k := testKeys[name]
		if k == nil {
			http.Error(w, "unknown test key", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r.WithContext(gate.WithCaller(r.Context(), gate.Caller{Key: k})))
	})
}

// as returns a context whose caller is testKeys[name].
func as(name string) context.Context {
	return gate.WithCaller(context.Background(), gate.Caller{Key: testKeys[name]})
}
