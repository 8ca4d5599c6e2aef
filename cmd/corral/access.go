package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/corral-llm/corral/gate"
)

// listFlag is a flag that may be repeated and takes comma-separated
// values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

// repeatFlag is a flag that may be repeated, each value whole.
type repeatFlag []string

func (r *repeatFlag) String() string { return strings.Join(*r, " ") }
func (r *repeatFlag) Set(s string) error {
	*r = append(*r, s)
	return nil
}

// accessFlags are who may call a server, shared by corral serve and corral
// supervise: API keys, allowed hosts, CORS origins, TLS.
type accessFlags struct {
	keys    repeatFlag
	keyFile string
	// keyEnv, when set, names an environment variable whose key
	// specification is accepted too (corral serve's
	// supervisor.ServeKeyEnv: how a supervisor gives its worker a key
	// that ps does not show).
	keyEnv   string
	hosts    listFlag
	origins  listFlag
	certFile string
	keyPEM   string
}

func addAccessFlags(fs *flag.FlagSet) *accessFlags {
	a := &accessFlags{}
	fs.Var(&a.keys, "api-key", "accept this API `key` (Authorization: Bearer KEY or x-api-key: KEY); repeat for several; optional attributes after it: role=user|admin name=ID priority=N concurrency=N tpm=N (see docs/operations.md)")
	fs.StringVar(&a.keyFile, "api-key-file", "", "accept the API keys of this `file`, one per line with the attributes of --api-key; read again on SIGHUP")
	fs.Var(&a.hosts, "allowed-hosts", "host `names` requests may name in Host (comma-separated; *.domain, * for any); default: local names on loopback connections, any on others")
	fs.Var(&a.origins, "cors-origins", "web `origins` whose pages may call the API (comma-separated scheme://host[:port], * for any); default none")
	fs.StringVar(&a.certFile, "tls-cert", "", "serve HTTPS (and HTTP/2) with this certificate `file` (PEM), reloaded when it changes; needs --tls-key")
	fs.StringVar(&a.keyPEM, "tls-key", "", "the private key `file` (PEM) of --tls-cert")
	return a
}

// access is what accessFlags set up.
type access struct {
	policy gate.Policy
	tls    *tls.Config // nil: plain HTTP
}

// setup loads the keys and certificate and checks the hosts and origins.
func (a *accessFlags) setup(log *slog.Logger) (access, error) {
	var out access
	specs := []string(a.keys)
	if spec := os.Getenv(a.keyEnv); a.keyEnv != "" && spec != "" {
		if _, err := gate.ParseKey(spec); err != nil {
			return out, fmt.Errorf("$%s: %w", a.keyEnv, err)
		}
		specs = append(slices.Clip(specs), spec)
		os.Unsetenv(a.keyEnv) // nothing this process starts needs it
	}
	keys, err := gate.LoadKeys(specs, a.keyFile)
	if err != nil {
		return out, err
	}
	if out.policy, err = gate.NewPolicy(keys, a.hosts, a.origins); err != nil {
		return out, err
	}
	if (a.certFile == "") != (a.keyPEM == "") {
		return out, errors.New("--tls-cert and --tls-key go together")
	}
	if a.certFile != "" {
		cf, err := gate.LoadCertFiles(a.certFile, a.keyPEM, log)
		if err != nil {
			return out, err
		}
		out.tls = cf.TLSConfig()
	}
	return out, nil
}

// announce logs how the server is protected, and warns when it listens on
// an address other machines reach without keys.
func (a access) announce(ln net.Listener, log *slog.Logger) {
	n := a.policy.Keys.Len()
	if n > 0 {
		log.Info("api keys", "keys", n)
	}
	if n == 0 && !loopbackListener(ln) {
		log.Warn("listening on a non-loopback address without API keys: anyone who reaches it may use, load and unload models; give --api-key or --api-key-file", "addr", ln.Addr().String())
	}
}

func loopbackListener(ln net.Listener) bool {
	ap, err := netip.ParseAddrPort(ln.Addr().String())
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// reloadKeysOnHUP reads the key file again at each SIGHUP until ctx ends;
// the returned function waits for its goroutine to exit.
func reloadKeysOnHUP(ctx context.Context, keys *gate.Keys, log *slog.Logger) (wait func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := keys.Reload(); err != nil {
					log.Error("SIGHUP: api keys not reloaded; the old ones stay", "err", err)
					continue
				}
				log.Info("SIGHUP: api keys reloaded", "keys", keys.Len())
			}
		}
	}()
	return func() { <-done }
}
