package llamacpp

import (
	"net/http"

	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/gate"
	"github.com/corral-llm/corral/openai"
	"github.com/corral-llm/corral/serving"
)

// tokenizeRequest is the body of POST /tokenize.
type tokenizeRequest struct {
	Content      string `json:"content"`
	AddSpecial   bool   `json:"add_special"`
	ParseSpecial *bool  `json:"parse_special"`
	modelOnly
}

// modelOnly is the model field of a request that only names its model.
type modelOnly struct {
	Model string `json:"model"`
}

// Check refuses nothing: what the request asks depends on the model.
func (modelOnly) Check(*serving.Limits) *serving.Error { return nil }

// Lease names the model; no keep_alive.
func (b *modelOnly) Lease() (string, *serving.KeepAlive, bool) { return b.Model, nil, true }

// Tokenize serves POST /tokenize: {"content", "add_special"?,
// "parse_special"?} → {"tokens"}. As in llama-server, special tokens are
// not added unless asked and special-token text is parsed unless refused.
func Tokenize(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	serving.Handle(c, w, r, openai.WriteError, false, func(x *serving.Exchange, body *tokenizeRequest) *serving.Error {
		parse := body.ParseSpecial == nil || *body.ParseSpecial
		toks, err := x.Model.Engine().Tokenize(body.Content, body.AddSpecial, parse)
		if err != nil {
			return serving.SubmitError(err, "content")
		}
		if toks == nil {
			toks = []int32{}
		}
		serving.WriteJSON(w, http.StatusOK, map[string]any{"tokens": toks})
		return nil
	})
}

// detokenizeRequest is the body of POST /detokenize.
type detokenizeRequest struct {
	Tokens []int64 `json:"tokens"`
	modelOnly
}

// Detokenize serves POST /detokenize: {"tokens"} → {"content"}, the
// content at most Limits.MaxDetokenizeBytes long.
func Detokenize(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	serving.Handle(c, w, r, openai.WriteError, false, func(x *serving.Exchange, body *detokenizeRequest) *serving.Error {
		m := x.Model
		toks, e := serving.ParseTokens(body.Tokens, m.Info().VocabSize, "tokens")
		if e != nil {
			return e
		}
		// The text is at most the tokens' pieces end to end.
		n, limit := 0, x.Core.Limits().MaxDetokenizeBytes
		for _, t := range toks {
			if n += len(m.Engine().TokenPiece(t)); n > limit {
				return serving.OverLimit("tokens", "max-detokenize-bytes", limit, "bytes", "the text of 'tokens' is longer")
			}
		}
		serving.WriteJSON(w, http.StatusOK, map[string]string{"content": m.Engine().Detokenize(toks)})
		return nil
	})
}

// slot is one element of GET /slots, in llama-server's field names.
type slot struct {
	ID           int    `json:"id"`
	IDTask       int64  `json:"id_task"` // -1 when idle
	NCtx         int    `json:"n_ctx"`
	IsProcessing bool   `json:"is_processing"`
	State        string `json:"state"`
	NCached      int    `json:"n_cached"`
	NDecoded     int    `json:"n_decoded"`
}

// modelQuery is a GET request naming its model in ?model= (default: the
// first).
type modelQuery struct {
	model string
}

// ReadQuery reads ?model=.
func (q *modelQuery) ReadQuery(r *http.Request) *serving.Error {
	q.model = r.URL.Query().Get("model")
	return nil
}

// Check refuses nothing: the query is checked as it is read.
func (*modelQuery) Check(*serving.Limits) *serving.Error { return nil }

// slotsQuery is GET /slots's query.
type slotsQuery struct{ modelQuery }

// ReadQuery refuses a caller that is not admin, then reads ?model=.
func (q *slotsQuery) ReadQuery(r *http.Request) *serving.Error {
	if e := serving.AdminOnly(r, "GET /slots"); e != nil {
		return e
	}
	return q.modelQuery.ReadQuery(r)
}

// Lease leases nothing: the slots of a model not loaded are none.
func (*slotsQuery) Lease() (string, *serving.KeepAlive, bool) { return "", nil, false }

// Slots serves GET /slots[?model=ID]: the slots of the model (default:
// the first), an empty list while it is not loaded. Only for an admin:
// what the slots hold tells of other callers' prompts.
func Slots(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	serving.Handle(c, w, r, openai.WriteError, true, func(x *serving.Exchange, q *slotsQuery) *serving.Error {
		st, e := c.Status(q.model)
		if e != nil {
			return e
		}
		if st.Model == nil {
			serving.WriteJSON(w, http.StatusOK, []slot{})
			return nil
		}
		infos, err := st.Model.Engine().Slots(x.Context())
		if err != nil {
			return serving.SubmitError(err, "")
		}
		out := make([]slot, len(infos))
		for i, s := range infos {
			out[i] = slot{ID: s.ID, IDTask: -1, NCtx: s.NCtx, IsProcessing: s.IsProcessing, State: s.State, NCached: s.CachedTokens, NDecoded: s.Decoded}
			if s.RequestID != 0 {
				out[i].IDTask = int64(s.RequestID)
			}
		}
		serving.WriteJSON(w, http.StatusOK, out)
		return nil
	})
}

// propsQuery is GET /props's query.
type propsQuery struct{ modelQuery }

// ReadQuery reads ?model=, which only an admin may name: it loads the
// model.
func (q *propsQuery) ReadQuery(r *http.Request) *serving.Error {
	if r.URL.Query().Has("model") {
		if e := serving.AdminOnly(r, "GET /props?model= (which loads a model)"); e != nil {
			return e
		}
	}
	return q.modelQuery.ReadQuery(r)
}

// Lease names the model; no keep_alive.
func (q *propsQuery) Lease() (string, *serving.KeepAlive, bool) { return q.model, nil, true }

// Props serves llama-server's GET /props[?model=ID], which clients read
// for the context size and the number of slots. It loads the model.
// model_path is the GGUF file's path for an admin, the model's id for
// anyone else: a path tells of the server's files.
//
// Naming a model (?model=) loads it on purpose: only an admin may.
func Props(c *serving.Core, w http.ResponseWriter, r *http.Request) {
	serving.Handle(c, w, r, openai.WriteError, true, func(x *serving.Exchange, _ *propsQuery) *serving.Error {
		m := x.Model
		path := m.Info().Name
		if gate.FromContext(x.Context()).Admin() {
			path = m.Info().Path
		}
		info := m.Info()
		devices := []map[string]any{}
		for _, d := range engine.Devices() {
			devices = append(devices, map[string]any{
				"name": d.Name, "backend": d.Backend, "description": d.Description,
				"memory_free": d.Free, "memory_total": d.Total,
			})
		}
		used := info.Devices
		if used == nil {
			used = []string{}
		}
		props := map[string]any{
			"default_generation_settings": map[string]any{"n_ctx": info.CtxPerRequest, "model": info.Name},
			"total_slots":                 m.Engine().Stats().SlotsTotal,
			"model_path":                  path,
			// The templates that render requests, as llama-server tells
			// them: the one in use (the model's, or the one the server
			// was given), and the model's tool_use one, which renders
			// the requests that offer tools, when it has one.
			"chat_template": m.Template().Source(),
			// The GPUs the backend libraries found, and where the
			// model's layers are (its output layer counted).
			"devices": devices,
			"offload": map[string]any{"n_gpu_layers": info.GPULayers, "n_layers": info.Layers, "devices": used},
			// The media its projector (--mmproj) takes, as
			// llama-server tells them; never video (libmtmd's video
			// needs ffmpeg, which corral's build leaves out).
			"modalities": map[string]bool{"vision": info.Vision, "video": false, "audio": info.Audio},
			// What stands for a medium in /completion's prompt_string.
			"media_marker": MediaMarker,
		}
		if tt := m.ToolTemplate(); tt != nil {
			props["chat_template_tool_use"] = tt.Source()
		}
		serving.WriteJSON(w, http.StatusOK, props)
		return nil
	})
}
