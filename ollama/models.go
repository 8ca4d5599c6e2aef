package ollama

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/gguf"
	"github.com/corral-llm/corral/serving"
)

// APIVersion is the version /api/version reports: the Ollama
// release whose API documentation these endpoints follow (that of the
// ollama module whose Go client corral's tests use). Clients compare it with
// the minimum they need for a feature; a lower, made-up version would
// turn them away from endpoints corral serves.
const APIVersion = "0.17.4"

// ollamaForever is how far ahead /api/ps puts the expiry of a model that
// is not scheduled to unload (in use, or kept forever): Ollama's CLI
// shows "Forever" beyond 20 years.
const ollamaForever = 100 * 365 * 24 * time.Hour

// ollamaDetails are a model's "details" in /api/tags, /api/ps and
// /api/show.
type ollamaDetails struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

// ollamaListModel is one model of /api/tags.
type ollamaListModel struct {
	Name       string        `json:"name"`
	Model      string        `json:"model"`
	ModifiedAt time.Time     `json:"modified_at"`
	Size       int64         `json:"size"`
	Digest     string        `json:"digest"`
	Details    ollamaDetails `json:"details"`
}

// ollamaRunningModel is one model of /api/ps.
type ollamaRunningModel struct {
	Name          string        `json:"name"`
	Model         string        `json:"model"`
	Size          int64         `json:"size"`
	Digest        string        `json:"digest"`
	Details       ollamaDetails `json:"details"`
	ExpiresAt     time.Time     `json:"expires_at"`
	SizeVRAM      int64         `json:"size_vram"`
	ContextLength int           `json:"context_length"`
}

// ollamaShowResponse is the answer of /api/show.
type ollamaShowResponse struct {
	License      string         `json:"license,omitempty"`
	Modelfile    string         `json:"modelfile"`
	Parameters   string         `json:"parameters"`
	Template     string         `json:"template"`
	Details      ollamaDetails  `json:"details"`
	ModelInfo    map[string]any `json:"model_info"`
	Capabilities []string       `json:"capabilities"`
	ModifiedAt   time.Time      `json:"modified_at"`
}

// Tags serves Ollama's GET /api/tags: every model the server knows,
// loaded or not, in the registry's order (the default first). The size
// and modification time are the GGUF file's; the digest is a hash of its
// path, size and modification time rather than of its content, which
// would mean reading gigabytes: it changes when the file does.
func Tags(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	out := []ollamaListModel{}
	for _, st := range c.Registry().Status() {
		name := ollamaName(st.ID)
		lm := ollamaListModel{Name: name, Model: name}
		if ff, err := readFileFacts(st.Path); err != nil {
			c.Logger().Warn("describe model", "model", st.ID, "err", err)
		} else {
			lm.ModifiedAt, lm.Size, lm.Digest, lm.Details = ff.modTime, ff.size, ff.digest, ff.details
		}
		out = append(out, lm)
	}
	serving.WriteJSON(w, http.StatusOK, map[string]any{"models": out})
}

// PS serves Ollama's GET /api/ps: the loaded models. size is the
// memory a model reserves in the budget, all of it host memory
// (size_vram 0); context_length is a slot's context.
func PS(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	out := []ollamaRunningModel{}
	for _, st := range c.Registry().Loaded() {
		name := ollamaName(st.ID)
		rm := ollamaRunningModel{Name: name, Model: name, Size: st.Need, ExpiresAt: st.ExpiresAt}
		if rm.ExpiresAt.IsZero() {
			rm.ExpiresAt = time.Now().Add(ollamaForever)
		}
		if st.Model != nil {
			rm.ContextLength = st.Model.Info().CtxPerRequest
		}
		if ff, err := readFileFacts(st.Path); err != nil {
			c.Logger().Warn("describe model", "model", st.ID, "err", err)
		} else {
			rm.Digest, rm.Details = ff.digest, ff.details
		}
		out = append(out, rm)
	}
	serving.WriteJSON(w, http.StatusOK, map[string]any{"models": out})
}

// Show serves Ollama's POST /api/show {"model"} (or the older
// "name"), from the GGUF header, without loading the model: model_info
// holds the header's keys, arrays of more than 5 values left empty as
// Ollama does without "verbose" (which corral ignores); template is the
// GGUF's chat template (a --chat-template override is not shown);
// capabilities are "completion" (see below). Without a model: 400. The
// Modelfile's FROM is the GGUF file's path for an admin, the model's name
// for anyone else.
func Show(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	serving.Handle(c, w, r, WriteError, false, serveOllamaShow)
}

// ollamaShowRequest is the body of POST /api/show.
type ollamaShowRequest struct {
	Model string `json:"model"`
	Name  string `json:"name"`
}

// Check refuses a request without a model.
func (body *ollamaShowRequest) Check(*serving.Limits) *serving.Error {
	if body.Model == "" {
		body.Model = body.Name
	}
	if body.Model == "" {
		return serving.Invalid("model", "'model' is required")
	}
	return nil
}

// Lease leases nothing: the model is described from its file.
func (body *ollamaShowRequest) Lease() (string, *serving.KeepAlive, bool) { return "", nil, false }

func serveOllamaShow(x *serving.Exchange, body *ollamaShowRequest) *serving.Error {
	a, name, w := x.Core, body.Model, x.W
	spec, err := a.Registry().Spec(name)
	if err != nil {
		return ollamaModelError(serving.ModelError(err), name)
	}
	admin := gate.FromContext(x.Context()).Admin()
	ff, err := readFileFacts(spec.Engine.ModelPath)
	if err != nil {
		msg := fmt.Sprintf("describe model %s: %v", spec.ID, err)
		if !admin { // the error names the file
			msg = fmt.Sprintf("describe model %s: its file cannot be read (the server's log has the cause)", spec.ID)
			a.Logger().Warn("describe model", "model", spec.ID, "err", err)
		}
		return &serving.Error{Status: http.StatusInternalServerError, Message: msg}
	}
	from := spec.Engine.ModelPath
	if !admin {
		from = ollamaName(spec.ID)
	}
	// Not "tools" yet: /api/chat renders tools but does not parse the
	// model's calls into tool_calls.
	caps := []string{"completion"}
	// "vision" for a projector that takes images, read from its header
	// (Ollama has no capability for audio, nor a field to send it in).
	if vision, err := projectorVision(spec.Engine.MMProj); err != nil {
		a.Logger().Warn("describe model's projector", "model", spec.ID, "err", err)
	} else if vision {
		caps = append(caps, "vision")
	}
	serving.WriteJSON(w, http.StatusOK, &ollamaShowResponse{
		License:      ff.license,
		Modelfile:    fmt.Sprintf("# Modelfile generated by corral for %s\nFROM %s\n", ollamaName(spec.ID), from),
		Template:     ff.template,
		Details:      ff.details,
		ModelInfo:    ff.info,
		Capabilities: caps,
		ModifiedAt:   ff.modTime,
	})
	return nil
}

// projectorVision reports whether the multimodal projector at path
// ("" for none) takes images, from its header.
func projectorVision(path string) (bool, error) {
	if path == "" {
		return false, nil
	}
	md, err := gguf.ReadMetadata(path)
	if err != nil {
		return false, err
	}
	vision, _ := md.ProjectorInputs()
	return vision && md.IsProjector(), nil
}

// Version serves Ollama's GET /api/version: APIVersion.
func Version(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	serving.WriteJSON(w, http.StatusOK, map[string]string{"version": APIVersion})
}

// fileFacts are what the Ollama endpoints tell about a model file. They
// are read from its GGUF header once per version of the file (its size
// and modification time) and kept for the life of the process: one small
// entry per model file the server knows.
type fileFacts struct {
	size     int64
	modTime  time.Time
	digest   string
	details  ollamaDetails
	info     map[string]any // model_info; read only once made
	template string
	license  string
}

var fileFactsCache = struct {
	sync.Mutex
	byPath map[string]*fileFacts
}{byPath: make(map[string]*fileFacts)}

// readFileFacts describes the GGUF file at path, from the cache when the
// file has not changed since it was read.
func readFileFacts(path string) (*fileFacts, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("stat model file: %w", err)
	}
	c := &fileFactsCache
	c.Lock()
	ff := c.byPath[path]
	c.Unlock()
	if ff != nil && ff.size == fi.Size() && ff.modTime.Equal(fi.ModTime()) {
		return ff, nil
	}
	md, err := gguf.ReadMetadata(path)
	if err != nil {
		return nil, err // it names the file
	}
	ff = newFileFacts(path, fi, md)
	c.Lock()
	c.byPath[path] = ff
	c.Unlock()
	return ff, nil
}

// newFileFacts describes the file at path, of info fi and metadata md.
func newFileFacts(path string, fi os.FileInfo, md *gguf.Metadata) *fileFacts {
	sum := sha256.Sum256([]byte(path + "\x00" + strconv.FormatInt(fi.Size(), 10) + "\x00" + strconv.FormatInt(fi.ModTime().UnixNano(), 10)))
	params := md.Parameters()
	ff := &fileFacts{
		size:    fi.Size(),
		modTime: fi.ModTime(),
		digest:  hex.EncodeToString(sum[:]),
		details: ollamaDetails{
			Format:            "gguf",
			Family:            md.Architecture,
			Families:          []string{},
			ParameterSize:     gguf.ParameterLabel(params),
			QuantizationLevel: md.Quantization(),
		},
		info:     make(map[string]any, len(md.KV)),
		template: md.ChatTemplate,
	}
	if md.Architecture != "" {
		ff.details.Families = []string{md.Architecture}
	}
	ff.license, _ = md.String("general.license")
	for k, v := range md.KV {
		switch k {
		case "general.name", "tokenizer.chat_template":
			continue // Ollama leaves them out; the template has its own field
		}
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice && rv.Len() > 5 {
			v = []any{}
		}
		if _, err := json.Marshal(v); err != nil {
			continue // NaN or infinite floats have no JSON
		}
		ff.info[k] = v
	}
	if _, ok := ff.info["general.parameter_count"]; !ok {
		ff.info["general.parameter_count"] = params
	}
	return ff
}

// parameterCount is general.parameter_count, or else the elements of the
// tensors added up.
