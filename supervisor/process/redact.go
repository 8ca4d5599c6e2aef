package process

import (
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Redacted replaces a secret in redacted text.
const Redacted = "[redacted]"

// minEnvSecret is the shortest value of a secret-named environment
// variable that is redacted wherever it appears: shorter ones ("1",
// "true") would blank out ordinary text. Such values are still redacted
// where they are assigned (NAME=value).
const minEnvSecret = 8

// Redactor hides secrets in text bound for logs, the line ring and status
// output: the exact values it was given (API keys, the values of
// environment variables named like *KEY*, *TOKEN*, *SECRET*, *PASSWORD*),
// and, whatever their value, the values of Authorization, Proxy-
// Authorization and X-Api-Key headers, of Bearer credentials, of NAME=value
// assignments, "name": "value" pairs and --flag values whose name is
// secret-like (a word key, apikey, token, secret, password, passwd or
// credential(s): api_key, HF_TOKEN, --api-key, but not max_tokens). It is
// safe for concurrent use; a nil Redactor redacts the patterns only.
type Redactor struct {
	mu      sync.RWMutex
	secrets []string // exact values, longest first
	repl    *strings.Replacer
}

// NewRedactor returns a Redactor for the given secret values ("" is
// ignored).
func NewRedactor(secrets ...string) *Redactor {
	r := &Redactor{}
	r.Add(secrets...)
	return r
}

// Add adds secret values ("" is ignored).
func (r *Redactor) Add(secrets ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range secrets {
		if s != "" && !slices.Contains(r.secrets, s) {
			r.secrets = append(r.secrets, s)
		}
	}
	// Longest first, so that a secret containing another is replaced whole.
	slices.SortStableFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(r.secrets))
	for _, s := range r.secrets {
		pairs = append(pairs, s, Redacted)
	}
	r.repl = strings.NewReplacer(pairs...)
}

// AddEnv adds the values of the secret-named variables among env (NAME=value
// entries) that are at least minEnvSecret bytes long.
func (r *Redactor) AddEnv(env []string) {
	var vals []string
	for _, kv := range env {
		name, val, ok := strings.Cut(kv, "=")
		if ok && len(val) >= minEnvSecret && SecretEnvName(name) {
			vals = append(vals, val)
		}
	}
	r.Add(vals...)
}

// SecretEnvName reports whether an environment variable's name marks its
// value as secret: it contains KEY, TOKEN, SECRET, PASSWORD, PASSWD or
// CREDENTIAL, in any case.
func SecretEnvName(name string) bool {
	u := strings.ToUpper(name)
	for _, w := range []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"} {
		if strings.Contains(u, w) {
			return true
		}
	}
	return false
}

// secretWord reports whether a name (a flag, an assignment's left side, a
// JSON key) names a secret: one of its words, split at non-alphanumerics
// and lower-to-upper case changes, is a secret word.
func secretWord(name string) bool {
	var words []string
	start := -1
	for i := 0; i <= len(name); i++ {
		var c byte
		if i < len(name) {
			c = name[i]
		}
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		boundary := !alnum || (i > 0 && 'A' <= c && c <= 'Z' && 'a' <= name[i-1] && name[i-1] <= 'z')
		if boundary && start >= 0 {
			words = append(words, strings.ToLower(name[start:i]))
			start = -1
		}
		if alnum && start < 0 {
			start = i
		}
	}
	for _, w := range words {
		switch w {
		case "key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials":
			return true
		}
	}
	return false
}

var (
	// headerRE matches an authentication header and its value, with an
	// optional scheme: "Authorization: Bearer x", "x-api-key=x",
	// "\"Authorization\":\"x\"".
	headerRE = regexp.MustCompile(`(?i)\b((?:proxy-)?authorization|x-api-key|api-key)(["']?\s*[:=]\s*["']?)((?:bearer|basic|token)\s+)?([^\s"',;}\]]+)`)
	// bearerRE matches a Bearer credential anywhere.
	bearerRE = regexp.MustCompile(`(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+`)
	// assignRE matches NAME=value (environment assignments, key=value log
	// attributes, --flag=value).
	assignRE = regexp.MustCompile(`()([A-Za-z_][A-Za-z0-9_.-]*)(=)("[^"]*"|'[^']*'|[^\s"',;]+)`)
	// flagRE matches "--flag value" (also as quoted argv: "--flag" "value")
	// at the start of a word.
	flagRE = regexp.MustCompile(`(^|[\s"'\[(])(--?[A-Za-z][A-Za-z0-9_.-]*)(["']?\s+["']?)([^\s"'-][^\s"']*)`)
	// jsonRE matches "name": "value".
	jsonRE = regexp.MustCompile(`(")([A-Za-z0-9_.-]+)("\s*:\s*")((?:[^"\\]|\\.)*)`)
)

// String returns s with every secret replaced by Redacted.
func (r *Redactor) String(s string) string {
	if r != nil {
		r.mu.RLock()
		repl := r.repl
		r.mu.RUnlock()
		if repl != nil {
			s = repl.Replace(s)
		}
	}
	s = headerRE.ReplaceAllString(s, "${1}${2}${3}"+Redacted)
	s = bearerRE.ReplaceAllString(s, "${1}"+Redacted)
	for _, re := range []*regexp.Regexp{assignRE, flagRE, jsonRE} {
		s = replaceNamed(re, s)
	}
	return s
}

// replaceNamed replaces the value of each match of re whose name is secret.
// The patterns have four groups: what precedes the name, the name, what
// separates it from the value, and the value.
func replaceNamed(re *regexp.Regexp, s string) string {
	return re.ReplaceAllStringFunc(s, func(m string) string {
		sub := re.FindStringSubmatch(m)
		if sub[4] == Redacted || !secretWord(sub[2]) {
			return m
		}
		return sub[1] + sub[2] + sub[3] + Redacted
	})
}

// Args returns a redacted copy of a command line: the argument after a
// secret-named flag (--api-key KEY), the value of --flag=value and
// NAME=value arguments with a secret name, and every secret value.
func (r *Redactor) Args(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if i > 0 && strings.HasPrefix(argv[i-1], "-") && !strings.Contains(argv[i-1], "=") &&
			secretWord(strings.TrimLeft(argv[i-1], "-")) {
			out[i] = Redacted
			continue
		}
		out[i] = r.String(a)
	}
	return out
}
