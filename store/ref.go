package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// defaultQuant is the quantization "org/repo" without ":QUANT" pulls, as
// Ollama and llama.cpp's -hf do.
const defaultQuant = "Q4_K_M"

// Bounds on the hub's file listing: pages followed and bytes per page.
const (
	maxListPages = 100
	maxListBytes = 64 << 20
)

var (
	// repoName is an organization or repository name on the hub.
	repoName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	// splitName is the suffix of one part of a model split by
	// llama-gguf-split.
	splitName = regexp.MustCompile(`(?i)-(\d{5})-of-(\d{5})\.gguf$`)
	// quantName is a quantization label in a file name, such as Q4_K_M,
	// IQ3_XXS, F16 or UD-Q4_K_XL, between delimiters.
	quantName = regexp.MustCompile(`(?i)(?:^|[-._/])((?:UD-)?(?:I?Q\d+(?:_[A-Z0-9]+)*|BF16|F16|F32|TQ\d_\d|MXFP4(?:_MOE)?))(?:[-._/]|$)`)
)

// source is where a model is downloaded from, and what is known about the
// file before downloading it.
type source struct {
	url    string // the file's URL
	file   string // the file's name, from which the model id comes
	size   int64  // expected size in bytes, -1 when unknown
	sha256 string // expected SHA-256 in lowercase hex, "" when unknown
	listed bool   // size and sha256 come from the hub's file listing
}

// hubEntry is one entry of the hub's file listing
// (GET /api/models/ORG/REPO/tree/main?recursive=true).
type hubEntry struct {
	Type string `json:"type"` // "file" or "directory"
	Path string `json:"path"`
	Size int64  `json:"size"`
	LFS  *struct {
		OID  string `json:"oid"` // SHA-256 of the content
		Size int64  `json:"size"`
	} `json:"lfs"`
}

// resolve finds the file ref names:
//
//	https://host/path/file.gguf   a URL (http:// when insecure)
//	hf://org/repo/path/file.gguf  a file of a hub repository
//	org/repo:QUANT                the repository's GGUF file of that quantization
//	org/repo                      its Q4_K_M file, or its only GGUF file
//
// "hf://", "hf.co/" and "huggingface.co/" may precede org/repo[:QUANT].
func (p *puller) resolve(ctx context.Context, ref string) (*source, error) {
	if strings.HasPrefix(ref, "http://") || strings.HasPrefix(ref, "https://") {
		u, err := url.Parse(ref)
		if err != nil {
			return nil, fmt.Errorf("bad URL: %w", err)
		}
		if u.Host == "" {
			return nil, fmt.Errorf("URL %q has no host", ref)
		}
		if err := p.checkScheme(u); err != nil {
			return nil, err // the error names ref
		}
		if u.Host == p.hubHost {
			// A file's page on the hub, copied from a browser: its content
			// is at .../resolve/... instead of .../blob/....
			if segs := strings.SplitN(u.Path, "/", 5); len(segs) == 5 && segs[0] == "" && segs[3] == "blob" {
				segs[3] = "resolve"
				u.Path, u.RawPath = strings.Join(segs, "/"), ""
			}
		}
		return &source{url: u.String(), file: path.Base(u.Path), size: -1}, nil
	}
	rest := ref
	for _, prefix := range []string{"hf://", "hf.co/", "huggingface.co/"} {
		if r, ok := strings.CutPrefix(ref, prefix); ok {
			rest = r
			break
		}
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) == 3 {
		if !strings.HasPrefix(ref, "hf://") {
			return nil, fmt.Errorf("%w; for a file of a repository write hf://%s", errBadRef, rest)
		}
		return p.hubFile(ctx, parts[0], parts[1], parts[2])
	}
	if len(parts) != 2 {
		return nil, errBadRef
	}
	repo, quant, _ := strings.Cut(parts[1], ":")
	return p.hubQuant(ctx, parts[0], repo, quant)
}

// errBadRef is the error for a reference of no known form.
var errBadRef = errors.New("not a model reference: want org/repo[:QUANT], hf://org/repo/file.gguf or an https:// URL")

// hubFile is the file at path in repository org/repo.
func (p *puller) hubFile(ctx context.Context, org, repo, file string) (*source, error) {
	files, err := p.listGGUF(ctx, org, repo)
	if err != nil {
		return nil, err
	}
	for _, e := range files {
		if e.Path == file {
			return p.hubSource(org, repo, e), nil
		}
	}
	names := make([]string, len(files))
	for i, e := range files {
		names[i] = e.Path
	}
	return nil, fmt.Errorf("%s/%s has no GGUF file %s; it has: %s", org, repo, file, list(names))
}

// hubQuant picks the GGUF file of quantization quant in org/repo; with
// quant empty, the Q4_K_M one, else the only one.
func (p *puller) hubQuant(ctx context.Context, org, repo, quant string) (*source, error) {
	files, err := p.listGGUF(ctx, org, repo)
	if err != nil {
		return nil, err
	}
	var models []hubEntry // mmproj files are vision projectors, not models
	for _, e := range files {
		if !strings.HasPrefix(strings.ToLower(path.Base(e.Path)), "mmproj") {
			models = append(models, e)
		}
	}
	if len(models) == 0 {
		return nil, fmt.Errorf("%s/%s has no GGUF model files", org, repo)
	}
	e, err := pickQuant(models, org+"/"+repo, quant)
	if err != nil {
		return nil, err
	}
	return p.hubSource(org, repo, e), nil
}

// pickQuant picks the file of quantization quant among the files of repo,
// or with quant empty the Q4_K_M one, else the only one.
func pickQuant(files []hubEntry, repo, quant string) (hubEntry, error) {
	want := quant
	if want == "" {
		want = defaultQuant
	}
	var found []hubEntry
	for _, e := range files {
		if hasQuant(e.Path, want) {
			found = append(found, e)
		}
	}
	if len(found) == 0 && quant == "" && len(files) == 1 {
		found = files
	}
	if len(found) > 1 {
		// Q4_K_XL is in both m-Q4_K_XL.gguf and m-UD-Q4_K_XL.gguf: a file
		// whose label is exactly the quant wins.
		var exact []hubEntry
		for _, e := range found {
			if strings.EqualFold(quantLabel(e.Path), want) {
				exact = append(exact, e)
			}
		}
		if len(exact) > 0 {
			found = exact
		}
	}
	if len(found) > 0 && !slices.ContainsFunc(found, func(e hubEntry) bool { return splitCount(e.Path) <= 1 }) {
		return hubEntry{}, fmt.Errorf("the %s model of %s is split into %d files (%s, …), which corral does not support: merge them with llama-gguf-split --merge, or pick another quant",
			want, repo, splitCount(found[0].Path), found[0].Path)
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) == 0 && quant == "":
		return hubEntry{}, fmt.Errorf("%s has no %s file and more than one GGUF file; name one: %s:QUANT with QUANT one of %s", repo, defaultQuant, repo, list(quants(files)))
	case len(found) == 0:
		return hubEntry{}, fmt.Errorf("%s has no GGUF file for quant %s; available: %s", repo, quant, list(quants(files)))
	default:
		names := make([]string, len(found))
		for i, e := range found {
			names[i] = e.Path
		}
		return hubEntry{}, fmt.Errorf("quant %s matches several files of %s (%s); pull one as hf://%s/PATH", want, repo, list(names), repo)
	}
}

// splitCount returns how many parts the split model whose part is the file
// at p has, or 0 when p is not a part of a split model.
func splitCount(p string) int {
	m := splitName.FindStringSubmatch(p)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[2])
	return n
}

// hasQuant reports whether the file path p names quantization q,
// case-insensitively: q appears after a '.', '-', '_' or '/' (or at the
// start) and before a '.', '-' or '/' (or at the end). So Q8_0 is in
// m-Q8_0.gguf, m.q8_0.gguf and Q8_0/m-00001-of-00002.gguf, but Q6_K is not
// in m-Q6_K_L.gguf, nor Q4_0 in m-Q4_0_4_4.gguf.
func hasQuant(p, q string) bool {
	p, q = strings.ToLower(p), strings.ToLower(q)
	if q == "" {
		return false
	}
	for i := 0; ; {
		j := strings.Index(p[i:], q)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(q)
		if (start == 0 || strings.IndexByte(".-_/", p[start-1]) >= 0) && (end == len(p) || strings.IndexByte(".-/", p[end]) >= 0) {
			return true
		}
		i = start + 1
	}
}

// quantLabel returns the quantization named in a file's path, upper-cased,
// or "" when it names none.
func quantLabel(p string) string {
	base := splitName.ReplaceAllString(path.Base(p), "")
	if strings.HasSuffix(strings.ToLower(base), ext) {
		base = base[:len(base)-len(ext)]
	}
	m := quantName.FindAllStringSubmatch(base, -1)
	if m == nil {
		return ""
	}
	return strings.ToUpper(m[len(m)-1][1])
}

// quants returns the distinct quantization labels of files, sorted; a
// file without one is named by its path.
func quants(files []hubEntry) []string {
	var labels []string
	for _, e := range files {
		l := quantLabel(e.Path)
		if l == "" {
			l = e.Path
		}
		if splitCount(e.Path) > 1 {
			l += " (split, not supported)"
		}
		if !slices.Contains(labels, l) {
			labels = append(labels, l)
		}
	}
	slices.Sort(labels)
	return labels
}

// list joins names with commas.
func list(names []string) string {
	if len(names) == 0 {
		return "(none)"
	}
	return strings.Join(names, ", ")
}

// hubSource is the download of entry e of org/repo.
func (p *puller) hubSource(org, repo string, e hubEntry) *source {
	segs := strings.Split(e.Path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	s := &source{
		url:    p.hub + "/" + org + "/" + repo + "/resolve/main/" + strings.Join(segs, "/"),
		file:   path.Base(e.Path),
		size:   e.Size,
		listed: true,
	}
	if e.LFS != nil {
		s.size = e.LFS.Size
		s.sha256 = parseSHA256(e.LFS.OID)
	}
	return s
}

// listGGUF lists the .gguf files of org/repo on the hub's main branch.
func (p *puller) listGGUF(ctx context.Context, org, repo string) ([]hubEntry, error) {
	if !repoName.MatchString(org) || !repoName.MatchString(repo) {
		return nil, fmt.Errorf("%q is not a hub repository (org/repo)", org+"/"+repo)
	}
	next := p.hub + "/api/models/" + org + "/" + repo + "/tree/main?recursive=true"
	var files []hubEntry
	for page := 0; next != ""; page++ {
		if page == maxListPages {
			return nil, fmt.Errorf("list %s/%s: more than %d pages of files", org, repo, maxListPages)
		}
		entries, link, err := p.listPage(ctx, next)
		if err != nil {
			return nil, fmt.Errorf("list %s/%s: %w", org, repo, err)
		}
		for _, e := range entries {
			if e.Type == "file" && strings.HasSuffix(strings.ToLower(e.Path), ext) {
				files = append(files, e)
			}
		}
		next = link
	}
	return files, nil
}

// listPage fetches one page of a file listing; next is the URL of the
// following page, "" after the last.
func (p *puller) listPage(ctx context.Context, u string) (entries []hubEntry, next string, err error) {
	req, err := p.newRequest(ctx, http.MethodGet, u)
	if err != nil {
		return nil, "", err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, "", cleanURLError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, "", statusError(resp)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxListBytes)).Decode(&entries); err != nil {
		return nil, "", fmt.Errorf("decode file listing: %w", err)
	}
	return entries, nextLink(resp), nil
}

// nextLink returns the rel="next" target of resp's Link header, resolved
// against the request's URL, or "".
func nextLink(resp *http.Response) string {
	for _, v := range resp.Header.Values("Link") {
		for link := range strings.SplitSeq(v, ",") {
			target, params, ok := strings.Cut(link, ";")
			target = strings.TrimSpace(target)
			if !ok || !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
				continue
			}
			if !strings.Contains(strings.ReplaceAll(params, " ", ""), `rel="next"`) {
				continue
			}
			u, err := resp.Request.URL.Parse(target[1 : len(target)-1])
			if err != nil {
				return ""
			}
			return u.String()
		}
	}
	return ""
}
