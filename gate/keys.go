package gate

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Key is an API key as the server knows it: never its secret, only a hash.
type Key struct {
	// ID names the key in logs, metrics and job ownership: its name= or
	// "key-" and the first 8 hex digits of the secret's SHA-256.
	ID   string
	Role Role
	// Priority, when set, is the class of the key's requests; a request
	// may ask for a worse one, not a better one (unless admin).
	Priority *int
	// MaxConcurrent bounds the key's requests in flight (0: no bound);
	// more get 429 with Retry-After.
	MaxConcurrent int
	// TokensPerMinute bounds the prompt and generated tokens the key's
	// requests may use in a minute (0: no bound); a key over it gets 429
	// with Retry-After until it has earned enough back.
	TokensPerMinute int

	hash [sha256.Size]byte
}

// MaxKeyLine bounds one line of a key file or one --api-key value.
const MaxKeyLine = 4096

// ParseKey parses one key specification: the secret, then optional
// space-separated attributes role=user|admin, name=ID, priority=N,
// concurrency=N and tpm=N. A key without role= is a user key.
func ParseKey(spec string) (*Key, error) {
	if len(spec) > MaxKeyLine {
		return nil, fmt.Errorf("key specification longer than %d bytes", MaxKeyLine)
	}
	f := strings.Fields(spec)
	if len(f) == 0 {
		return nil, errors.New("empty key")
	}
	secret := f[0]
	if len(secret) < 8 {
		return nil, errors.New("key shorter than 8 characters")
	}
	if isAttr(secret) {
		// A line like "role=admin sk-..." has its fields in the wrong order.
		return nil, fmt.Errorf("the key must come first, before %q", secret)
	}
	k := &Key{Role: RoleUser, hash: sha256.Sum256([]byte(secret))}
	for _, a := range f[1:] {
		name, val, ok := strings.Cut(a, "=")
		if !ok {
			return nil, fmt.Errorf("attribute %q: want name=value", a)
		}
		switch name {
		case "role":
			switch val {
			case "user":
				k.Role = RoleUser
			case "admin":
				k.Role = RoleAdmin
			default:
				return nil, fmt.Errorf("role=%q: want user or admin", val)
			}
		case "name":
			if val == "" || !validName(val) {
				return nil, fmt.Errorf("name=%q: want 1 to 64 of a-z A-Z 0-9 - _ . (letters, digits, dash, underscore, dot)", val)
			}
			k.ID = val
		case "priority":
			p, err := strconv.Atoi(val)
			if err != nil || p < -1000 || p > 1000 {
				return nil, fmt.Errorf("priority=%q: want an integer from -1000 to 1000", val)
			}
			k.Priority = &p
		case "concurrency", "tpm":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("%s=%q: want a non-negative integer", name, val)
			}
			if name == "concurrency" {
				k.MaxConcurrent = n
			} else {
				k.TokensPerMinute = n
			}
		default:
			return nil, fmt.Errorf("unknown attribute %q (known: role, name, priority, concurrency, tpm)", name)
		}
	}
	if k.ID == "" {
		k.ID = "key-" + hex.EncodeToString(k.hash[:4])
	}
	return k, nil
}

// isAttr reports whether s looks like an attribute rather than a secret.
func isAttr(s string) bool {
	name, _, ok := strings.Cut(s, "=")
	if !ok {
		return false
	}
	switch name {
	case "role", "name", "priority", "concurrency", "tpm":
		return true
	}
	return false
}

func validName(s string) bool {
	if len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// Keys is the set of keys a server accepts: those given on the command
// line and those of a key file, which Reload reads again (on SIGHUP). The
// zero value and nil accept no key; a server with no keys checks none.
type Keys struct {
	file  string
	fixed []*Key

	mu   sync.RWMutex
	keys []*Key
}

// MaxKeyFile bounds a key file.
const MaxKeyFile = 16 << 20

// LoadKeys returns the keys of specs (--api-key values) and of file
// (--api-key-file: one specification per line, # comments and blank lines
// ignored; "" for none). Two keys with the same secret or ID are an error.
func LoadKeys(specs []string, file string) (*Keys, error) {
	ks := &Keys{file: file}
	for i, s := range specs {
		k, err := ParseKey(s)
		if err != nil {
			return nil, fmt.Errorf("--api-key #%d: %w", i+1, err)
		}
		ks.fixed = append(ks.fixed, k)
	}
	if err := ks.Reload(); err != nil {
		return nil, err
	}
	return ks, nil
}

// Reload reads the key file again. On an error the keys stay as they were.
func (ks *Keys) Reload() error {
	keys := append([]*Key(nil), ks.fixed...)
	if ks.file != "" {
		fk, err := readKeyFile(ks.file)
		if err != nil {
			return err
		}
		keys = append(keys, fk...)
	}
	seenHash := map[[sha256.Size]byte]bool{}
	seenID := map[string]bool{}
	for _, k := range keys {
		if seenHash[k.hash] {
			return fmt.Errorf("api keys: key %s is given twice", k.ID)
		}
		if seenID[k.ID] {
			return fmt.Errorf("api keys: two keys named %s", k.ID)
		}
		seenHash[k.hash], seenID[k.ID] = true, true
	}
	ks.mu.Lock()
	ks.keys = keys
	ks.mu.Unlock()
	return nil
}

func readKeyFile(name string) ([]*Key, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("api key file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("api key file: %w", err)
	}
	if st.Size() > MaxKeyFile {
		return nil, fmt.Errorf("api key file %s: larger than %d bytes", name, MaxKeyFile)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), MaxKeyLine+1)
	var keys []*Key
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		k, err := ParseKey(string(line))
		if err != nil {
			return nil, fmt.Errorf("api key file %s:%d: %w", name, n, err)
		}
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("api key file %s: %w", name, err)
	}
	return keys, nil
}

// Len is the number of keys; 0 means the server checks none.
func (ks *Keys) Len() int {
	if ks == nil {
		return 0
	}
	ks.mu.RLock()
	defer ks.mu.RUnlock()
	return len(ks.keys)
}

// Lookup returns the key whose secret is secret, or nil. It compares the
// secret's hash with every key's in constant time, whichever matches.
func (ks *Keys) Lookup(secret string) *Key {
	if ks == nil || secret == "" {
		return nil
	}
	h := sha256.Sum256([]byte(secret))
	ks.mu.RLock()
	defer ks.mu.RUnlock()
	var found *Key
	for _, k := range ks.keys {
		if subtle.ConstantTimeCompare(h[:], k.hash[:]) == 1 {
			found = k
		}
	}
	return found
}
