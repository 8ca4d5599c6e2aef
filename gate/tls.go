package gate

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// CertFiles serves a TLS certificate and key from files and loads them
// again when either changes (a renewal by certbot or cert-manager), looked
// at no more than once a second. A pair that fails to load (half written)
// leaves the last good one in use.
type CertFiles struct {
	certFile, keyFile string
	log               *slog.Logger
	every             time.Duration // between looks at the files

	mu              sync.Mutex
	cert            *tls.Certificate
	certMod, keyMod time.Time
	checked         time.Time
}

// LoadCertFiles loads the certificate and key; they must load now.
func LoadCertFiles(certFile, keyFile string, log *slog.Logger) (*CertFiles, error) {
	if log == nil {
		log = slog.Default()
	}
	c := &CertFiles{certFile: certFile, keyFile: keyFile, log: log, every: time.Second}
	if err := c.load(time.Now()); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *CertFiles) load(now time.Time) error {
	cs, err := os.Stat(c.certFile)
	if err != nil {
		return fmt.Errorf("tls certificate: %w", err)
	}
	ks, err := os.Stat(c.keyFile)
	if err != nil {
		return fmt.Errorf("tls key: %w", err)
	}
	c.checked = now
	if c.cert != nil && cs.ModTime().Equal(c.certMod) && ks.ModTime().Equal(c.keyMod) {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("tls certificate %s, key %s: %w", c.certFile, c.keyFile, err)
	}
	c.cert, c.certMod, c.keyMod = &cert, cs.ModTime(), ks.ModTime()
	return nil
}

// GetCertificate is tls.Config's: the current certificate.
func (c *CertFiles) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); now.Sub(c.checked) >= c.every {
		had := c.cert
		if err := c.load(now); err != nil {
			c.log.Warn("tls: could not reload the certificate; serving the last one", "err", err)
		} else if c.cert != had {
			c.log.Info("tls: certificate reloaded", "cert", c.certFile)
		}
	}
	return c.cert, nil
}

// TLSConfig is a server configuration serving c, with HTTP/2 offered.
func (c *CertFiles) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.GetCertificate, NextProtos: []string{"h2", "http/1.1"}}
}
