package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/corral-llm/corral/chat"
	"github.com/corral-llm/corral/engine"
	"github.com/corral-llm/corral/grammar"
	"github.com/corral-llm/corral/kvevents"
	"github.com/corral-llm/corral/llama"
	"github.com/corral-llm/corral/media"
	"github.com/corral-llm/corral/model"
	"github.com/corral-llm/corral/reasoning"
	"github.com/corral-llm/corral/registry"
	"github.com/corral-llm/corral/responses"
	"github.com/corral-llm/corral/server"
	"github.com/corral-llm/corral/serving"
	"github.com/corral-llm/corral/supervisor"
	"github.com/corral-llm/corral/toolcall"
)

// defaultSpecMaxDecoding is --spec-max-decoding's default. On a CPU a
// step of many decoding slots is bound by the arithmetic, so a drafted
// token costs what a decoded one does and no acceptance pays for it; the
// measured cost (engine.Speculation) finds that, but steps with 9 to 15
// slots come in few of each count, and drafts there, measured on too few
// steps, cost versus.sh's 128-token prompts arriving under 16 streams
// 8-17% of their throughput (2026-12-05). With 8 every row of versus.sh
// is at least as fast with speculation as without (docs/benchmarks.md).
// Above it a step drafts only in bulk (16 tokens or more a slot), which
// costs less than a decoded token's share where taken.
const defaultSpecMaxDecoding = 8

// runServe serves GGUF models over the OpenAI-compatible HTTP API: one
// given by -m, as llama-server does, or several (-m repeated, a models
// directory, a config file) loaded on demand under a memory budget. It
// listens at once. With one model it loads it before answering /health
// with 200 (503 {"status":"loading"} until then); with several it is
// ready at once and loads each model at its first request. It shuts down
// gracefully when ctx ends (the first SIGTERM or SIGINT): /health answers
// 503 {"status":"draining"}, queued requests fail with 503, running ones
// have -shutdown-timeout to finish; then each model writes what it has
// cached to its --cache-disk, for at most -shutdown-timeout again.
func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var cfg engine.Config
	var models modelFlags
	fs.Var(&models, "m", "GGUF model `file` (or the id of a pulled model), ID=FILE to name it; repeat for several models")
	fs.Var(&models, "model", "same as -m")
	modelsDir := fs.String("models-dir", "", "serve every .gguf file in `dir` (id: the file name without .gguf)")
	configPath := fs.String("config", "", "YAML `file` listing models with their own settings (see docs/models.md)")
	budgetFlag := fs.String("memory-budget", "75%", "memory the loaded models may take together: bytes with a unit (8GiB, 512MB) or a percentage of physical memory; 0: unlimited")
	keepAlive := fs.String("keep-alive", "", "how long an idle model stays loaded (a duration; -1: forever; 0: unload after each request); default 5m, forever when one model is served")
	strict := fs.Bool("strict-model-names", false, "refuse a request naming an unknown model even when one model is served (default: it is served by that model, as llama-server does)")
	loadWait := fs.Duration("model-wait", registry.DefaultMaxWait, "how long a request waits for memory when every loaded model is busy; then 503")
	loadQueue := fs.Int("model-queue", registry.DefaultMaxWaiting, "requests that may wait for memory at once; more get 503")
	fs.IntVar(&cfg.CtxSize, "c", 0, "KV cache size in `tokens`, one pool the slots share (0: the model's training context, at most 4096, per slot)")
	fs.IntVar(&cfg.CtxSize, "ctx-size", 0, "same as -c")
	fs.IntVar(&cfg.CtxPerRequest, "ctx-per-request", 0, "most context in `tokens` one request may use, prompt and output, while the pool has free cells (0: the model's training context, or -c/-np when more; at most -c, with --kv-per-slot at most -c/-np)")
	fs.BoolVar(&cfg.KVPerSlot, "kv-per-slot", false, "give each slot its own KV buffer, an equal share of -c (llama-server's with -np), in place of one pool: a prompt at temperature 0 then gets the same answer, to the bit, whatever the server ran before; but slots share no cells, a request gets at most -c/-np, and steps mixing prompts with decoding take more passes")
	fs.IntVar(&cfg.Parallel, "np", 4, "number of slots decoded together")
	fs.IntVar(&cfg.Parallel, "parallel", 4, "same as -np")
	fs.IntVar(&cfg.Threads, "t", 0, "CPU threads for compute (0: all cores)")
	fs.IntVar(&cfg.Threads, "threads", 0, "same as -t")
	fs.IntVar(&cfg.BatchSize, "b", 512, "per-step token budget")
	fs.IntVar(&cfg.BatchSize, "batch-size", 512, "same as -b")
	fs.IntVar(&cfg.PrefillBudget, "prefill-budget", engine.DefaultPrefillBudget, "most prompt tokens per step while other slots decode, and as many more for each further prompt waiting; within it a step is kept at about twice a decode-only step (-1: the whole -b)")
	jumpForward := fs.String("jump-forward", "force", "how text a grammar forces is evaluated: force (ahead, in the step of the token before it, written in the longest tokens), confirm (ahead, kept while the model samples the same tokens: the output of plain decoding), off (one token per step)")
	specType := fs.String("spec-type", "ngram", "speculative decoding: ngram (drafts from each request's own prompt and output: what followed the latest earlier occurrence of its last tokens, kept where the model samples the same tokens, where its measured cost pays; the output is that of plain decoding), draft-simple (a draft model's drafts: --spec-draft-model), draft-mtp (the model's own multi-token prediction head, where its file has one: Qwen3.5/3.6, DeepSeek, GLM), ngram with either (ngram,draft-simple: the model drafts where ngram finds none), or none")
	fs.IntVar(&cfg.Speculate.DraftMax, "spec-draft-n-max", 8, "most tokens a draft model's or MTP head's draft has, and a request's first --spec-type ngram draft (at most 32)")
	fs.IntVar(&cfg.Speculate.NgramDraftMax, "spec-ngram-draft-max", 64, "most tokens a --spec-type ngram draft has: a request's drafts grow from --spec-draft-n-max to it, doubling, while it takes them whole (at most 64)")
	fs.IntVar(&cfg.Speculate.DraftMin, "spec-draft-n-min", 1, "fewest tokens a speculative draft has: a shorter one is not evaluated")
	fs.IntVar(&cfg.Speculate.NgramMax, "spec-ngram-n", 4, "longest run of a request's last tokens --spec-type ngram looks up (runs down to 2 are tried)")
	fs.StringVar(&cfg.Speculate.Model, "spec-draft-model", "", "draft model `file`: a smaller GGUF of the same vocabulary that guesses the tokens a decoding request writes next, for every request the step drafts for at once, where --spec-type ngram finds no draft (alone with --spec-type draft-simple); kept where the model samples the same tokens, as n-gram drafts are")
	fs.StringVar(&cfg.Speculate.Model, "md", "", "same as --spec-draft-model")
	fs.StringVar(&cfg.Speculate.Model, "model-draft", "", "same as --spec-draft-model")
	fs.Float64Var(&cfg.Speculate.PMin, "spec-draft-p-min", 0, "a draft model's draft ends before a token it gives less than this probability (0: never)")
	fs.Float64Var(&cfg.Speculate.PMin, "draft-p-min", 0, "same as --spec-draft-p-min")
	fs.BoolVar(&cfg.Speculate.Recurrent, "spec-recurrent", false, "speculate on a model with a recurrent state (Qwen3.5, LFM2, Nemotron-H; not Mamba, RWKV, Jamba) too: llama.cpp then keeps --spec-draft-n-max more copies of each slot's state to go back over a refused draft, which costs every step, drafted or not")
	fs.IntVar(&cfg.Speculate.MaxDecoding, "spec-max-decoding", defaultSpecMaxDecoding, "drafts are made where their measured cost pays; where more requests than this decode (0: no bound), only drafts of 16 tokens or more from a request's own text: a quote of its prompt, or where its drafts were taken whole")
	fa := fs.String("flash-attn", "auto", "flash attention: on, off or auto (on for CPU: faster decoding, slower prompts over a long cached prefix)")
	fs.StringVar(fa, "fa", "auto", "same as -flash-attn")
	ctk := cacheTypeFlag{&cfg.CacheTypeK}
	ctv := cacheTypeFlag{&cfg.CacheTypeV}
	fs.Var(ctk, "ctk", "KV cache `type` of the keys: "+strings.Join(llama.CacheTypeNames(), ", ")+" (default f16; q8_0 takes about half the memory of f16, q4_0 about a quarter)")
	fs.Var(ctk, "cache-type-k", "same as -ctk")
	fs.Var(ctv, "ctv", "KV cache `type` of the values, as -ctk; a quantized one needs flash attention")
	fs.Var(ctv, "cache-type-v", "same as -ctv")
	fs.StringVar(&cfg.Pooling, "pooling", "", "how /v1/embeddings pools a sequence: none, mean, cls or last (default: what the model declares; a plain language model declares none and cannot embed)")
	cacheRAM := fs.Int64("cache-ram", 2048, "host memory in `MiB` per model for the KV of prefixes pushed out of the slots (0: none); counts in the memory budget")
	fs.StringVar(&cfg.DiskCacheDir, "cache-disk", "", "`dir` where the KV of prefixes pushed out of --cache-ram, and at a model's unload or the server's stop all it has cached, is kept, to be found again after an unload or a restart (\"\": none)")
	cacheDiskSize := fs.String("cache-disk-size", "16GiB", "most bytes of --cache-disk files per model (512MiB, 20GB); the least recently used go first")
	fs.IntVar(&cfg.MaxQueue, "max-queue", 256, "requests that may wait for a slot; more get 503")
	fs.DurationVar(&cfg.MaxQueueWait, "max-queue-wait", engine.DefaultMaxQueueWait, "fail requests that waited this long for a slot with 503 queue_timeout (0: no limit)")
	fs.DurationVar(&cfg.PauseGrace, "pause-grace", engine.DefaultPauseGrace, "how long a paused paced answer keeps its slot from waiting requests of a worse class (0: none)")
	var aopt serving.Options
	fs.DurationVar(&aopt.MaxPause, "max-pause", serving.DefaultMaxPause, "longest chunking.pause_timeout a request without an admin key may ask for")
	isolation := fs.String("cache-isolation", string(serving.CacheIsolationNone), "which requests share cached prompt prefixes: none (all, unless their cache_salt differs) or key (each API key has its own)")
	fs.BoolVar(&aopt.MetricsPublic, "metrics-public", false, "serve /metrics to callers without an admin key (with keys, it needs one by default)")
	host := fs.String("host", "127.0.0.1", "listen `address`")
	port := fs.Int("port", 8080, "listen port")
	kvEvents := fs.String("kv-events", "", "publish what the prefix caches hold as llm-d's KV events (ZeroMQ PUB, msgpack; what vLLM's --kv-events-config publishes) at `endpoint`: bind:tcp://HOST:PORT listens on HOST (* for every interface) for subscribers, connect:tcp://HOST:PORT or tcp://HOST:PORT connects to an indexer that listens (llm-d's), tcp://*:PORT listens where the HTTP listener does (loopback with the default --host); plaintext: keep it on a trusted network; \"\": none")
	kvTokens := fs.String("kv-events-tokens", "auto", "whether the KV events' BlockStored carry the blocks' token ids, the text of every cached prompt and output: on, off (hashes only, all llm-d's indexer v0.4 reads), or auto (off with --api-key, --api-key-file or --cache-isolation key, else on)")
	kvPod := fs.String("kv-events-pod", "", "the pod in the KV events' topics, kv@POD@MODEL: the address a router sends this server's requests to (default: the listen address, HOST:PORT)")
	tmpl := fs.String("chat-template", "", "built-in chat template `name` to use instead of the model's ("+strings.Join(chat.Names(), ", ")+")")
	tmplFile := fs.String("chat-template-file", "", "Jinja chat template `file` to use instead of the model's")
	var proj projectorFlags
	fs.StringVar(&proj.file, "mmproj", "", "multimodal projector `file` (an mmproj GGUF, general.architecture clip) of the model given with -m: the model then takes images or audio (default: one found beside the model: MODEL.mmproj.gguf, mmproj-MODEL.gguf, or the one mmproj*.gguf beside a model alone in its folder)")
	fs.BoolVar(&proj.off, "no-mmproj", false, "look for no multimodal projector beside the models (a model's mmproj in --config still loads)")
	kwargsFlag := fs.String("chat-template-kwargs", "", "chat template variables every request gets, a JSON `object` such as '{\"enable_thinking\":false}'; a request's chat_template_kwargs override them")
	mutable := fs.Bool("chat-template-mutable", false, "let chat templates change lists and dicts in place (list.append, pop, dict.update...: Kimi K2's templates append), which transformers' sandbox refuses; without it such a template is refused at load")
	toolFormat := fs.String("tool-format", "", "tool-call `format` to read from answers instead of the one the chat template implies ("+strings.Join(toolcall.Names(), ", ")+")")
	toolRepair := fs.Int("tool-repair", serving.DefaultToolRepair, "times a tool call that does not parse, calls a function not offered or breaks its schema, in an answer (whole or streamed) with tool_choice auto, is written again under the tool-call grammar (0: never; streams then send calls in fragments, unchecked)")
	reasoningFormat := fs.String("reasoning-format", "auto", "how answers' reasoning is returned: auto or deepseek (apart, in reasoning_content, in the format the chat template implies), none (inline in the content), or a format's `name` ("+strings.Join(reasoning.Names(), ", ")+")")
	reasoningBudget := fs.Int("reasoning-budget", -1, "most `tokens` a model may reason before its reasoning is closed for it, for requests that set no thinking_budget (-1: no limit)")
	alias := fs.String("alias", "", "model id in the API when one model is given with -m (default: the file name without .gguf)")
	logRequests := fs.Bool("log-requests", false, "log every request body as sent, prompts included (never a header); see docs/operations.md")
	logs := addLogFlags(fs)
	acc := addAccessFlags(fs)
	acc.keyEnv = supervisor.ServeKeyEnv
	maxBody := fs.Int64("max-body", server.DefaultMaxBody, "largest request body in `bytes`")
	var scfg server.Config
	fs.DurationVar(&scfg.ShutdownTimeout, "shutdown-timeout", server.DefaultShutdownTimeout, "on SIGTERM/SIGINT, how long running requests may finish, and then writing the caches to --cache-disk may take")
	fs.DurationVar(&scfg.KeepAlive, "sse-keepalive", serving.DefaultKeepAlive, "longest silence of an event stream; a waiting one gets its headers, then \": ping\" comments")
	fs.DurationVar(&scfg.WriteTimeout, "write-timeout", serving.DefaultWriteTimeout, "longest wait for a client to accept a write; then its request is cancelled")
	fs.DurationVar(&scfg.BodyTimeout, "body-timeout", server.DefaultBodyTimeout, "longest time to receive a request body; then 408")
	fs.Int64Var(&scfg.ResponsesStore.MaxBytes, "responses-store-bytes", responses.DefaultStoreBytes, "most `bytes` of responses the Responses API keeps (store: true) for previous_response_id and GET /v1/responses/{id}; past it the least recently used are forgotten")
	fs.Int64Var(&scfg.ResponsesStore.MaxOwnerBytes, "responses-store-key-bytes", 0, "most `bytes` of stored responses one API key keeps (0: --responses-store-bytes)")
	fs.DurationVar(&scfg.ResponsesStore.TTL, "responses-ttl", responses.DefaultStoreTTL, "how long a stored response is kept")
	responsesDir := fs.String("responses-dir", "", "`dir` where the stored responses are kept too, one file each, so that they survive a restart (default: responses/ under --cache-disk when it is set; --responses-dir= (empty): memory only)")
	lim := addLimitFlags(fs)
	var mediaHosts listFlag
	fs.Var(&mediaHosts, "allowed-media-domains", "`hosts` (comma-separated, or repeat the flag) whose http(s) image URLs requests may give, for the server to fetch: matched whole, without the port; a listed name must resolve to public addresses only, a listed IP address is fetched from as it is (default none: every http(s) URL → 400)")
	mediaTimeout := fs.Duration("media-fetch-timeout", media.DefaultFetchTimeout, "longest time fetching one image URL may take, body included; longer → 400")
	offFlags := addOffloadFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if *mediaTimeout <= 0 {
		return fmt.Errorf("--media-fetch-timeout %s: want a positive duration", *mediaTimeout)
	}
	if len(mediaHosts) > 0 {
		if lim.MediaFetcher, err = media.NewFetcher(mediaHosts, *mediaTimeout); err != nil {
			return fmt.Errorf("--allowed-media-domains: %w", err)
		}
	}
	if cfg.Offload, err = offFlags.offload(); err != nil {
		return err
	}
	if err := offFlags.setup(); err != nil {
		return fmt.Errorf("--backends: %w", err)
	}
	cfg.HostCacheBytes = *cacheRAM << 20
	if scfg.ShutdownTimeout > 0 { // else the server's default, which is the engine's
		cfg.DiskCloseTimeout = scfg.ShutdownTimeout
	}
	if cfg.DiskCacheBytes, err = diskCacheSize(*cacheDiskSize); err != nil {
		return fmt.Errorf("--cache-disk-size %w", err)
	}
	if err := checkCacheDisk(cfg.DiskCacheDir); err != nil {
		return fmt.Errorf("--cache-disk: %w", err)
	}
	// The engine reads 0 as its default; here 0 turns them off.
	if cfg.MaxQueueWait == 0 {
		cfg.MaxQueueWait = -1
	}
	if cfg.PauseGrace == 0 {
		cfg.PauseGrace = -1
	}
	switch {
	case *toolRepair < 0:
		return fmt.Errorf("--tool-repair %d: want 0 or more", *toolRepair)
	case *toolRepair == 0:
		aopt.ToolRepair = -1 // the API reads 0 as its default
	default:
		aopt.ToolRepair = *toolRepair
	}
	switch {
	case scfg.ResponsesStore.MaxBytes <= 0:
		return fmt.Errorf("--responses-store-bytes %d: want a positive size", scfg.ResponsesStore.MaxBytes)
	case scfg.ResponsesStore.MaxOwnerBytes < 0:
		return fmt.Errorf("--responses-store-key-bytes %d: want 0 or more", scfg.ResponsesStore.MaxOwnerBytes)
	case scfg.ResponsesStore.TTL <= 0:
		return fmt.Errorf("--responses-ttl %v: want a positive duration", scfg.ResponsesStore.TTL)
	}
	scfg.ResponsesStore.Dir = responsesStoreDir(fs, *responsesDir, cfg.DiskCacheDir)
	if err := checkResponsesDir(scfg.ResponsesStore.Dir); err != nil {
		return fmt.Errorf("--responses-dir: %w", err)
	}
	if aopt.MaxPause <= 0 {
		return fmt.Errorf("--max-pause %v: want a positive duration", aopt.MaxPause)
	}
	var kvEndpoint kvevents.Endpoint
	if *kvEvents != "" {
		if kvEndpoint, err = kvevents.ParseEndpoint(*kvEvents); err != nil {
			return fmt.Errorf("--kv-events: %w", err)
		}
	}
	if aopt.CacheIsolation, err = serving.ParseCacheIsolation(*isolation); err != nil {
		return fmt.Errorf("--cache-isolation %w", err)
	}
	kvOmitTokens, err := kvEventsOmitTokens(*kvTokens, len(acc.keys) > 0 || acc.keyFile != "", aopt.CacheIsolation)
	if err != nil {
		return fmt.Errorf("--kv-events-tokens %w", err)
	}
	switch *fa {
	case "on", "auto":
	case "off":
		cfg.NoFlashAttn = true
	default:
		return fmt.Errorf("-flash-attn %q: want on, off or auto", *fa)
	}
	if cfg.JumpForward, err = engine.ParseJumpMode(*jumpForward); err != nil {
		return fmt.Errorf("--jump-forward: %w", err)
	}
	if err := parseSpecType(*specType, &cfg.Speculate); err != nil {
		return fmt.Errorf("--spec-type %w", err)
	}
	if err := checkSpeculation(cfg.Speculate); err != nil {
		return err
	}
	if err := checkPooling(cfg.Pooling); err != nil {
		return fmt.Errorf("--pooling: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	log, err := logs.logger(os.Stderr)
	if err != nil {
		return err
	}
	// Fail before the slow model load, not after.
	if *tmpl != "" && *tmplFile != "" {
		return errors.New("--chat-template and --chat-template-file: give one")
	}
	if *tmpl != "" {
		if _, err := chat.Lookup(*tmpl); err != nil {
			return err
		}
	}
	var kwargs json.RawMessage
	if *kwargsFlag != "" {
		if _, err := model.ParseKwargs(json.RawMessage(*kwargsFlag)); err != nil {
			return fmt.Errorf("--chat-template-kwargs: %w", err)
		}
		kwargs = json.RawMessage(*kwargsFlag)
	}
	if proj.file != "" && proj.off {
		return errors.New("--mmproj and --no-mmproj: give one")
	}
	if *tmplFile != "" {
		if err := checkTemplateFile(*tmplFile, kwargs, *mutable); err != nil {
			return fmt.Errorf("--chat-template-file %w", err)
		}
	}
	if *toolFormat != "" {
		if _, err := toolcall.Lookup(*toolFormat); err != nil {
			return fmt.Errorf("--tool-format: %w", err)
		}
	}
	if err := checkReasoningFormat(*reasoningFormat); err != nil {
		return fmt.Errorf("--reasoning-format: %w", err)
	}
	if *reasoningBudget < -1 {
		return fmt.Errorf("--reasoning-budget %d: want -1 (no limit) or >= 0", *reasoningBudget)
	}
	if *alias != "" {
		if len(models) != 1 || models[0].id != "" {
			return errors.New("--alias names the one model given with -m FILE; use -m ID=FILE for several")
		}
		models[0].id = *alias
	}
	base := registry.Spec{Engine: cfg, ChatTemplate: *tmpl, ChatTemplateFile: *tmplFile, ChatTemplateKwargs: kwargs, ChatTemplateMutable: *mutable,
		ToolFormat: *toolFormat, ReasoningFormat: *reasoningFormat}
	if *reasoningBudget >= 0 {
		base.ReasoningBudget = reasoningBudget
	}
	proj.log = log
	specs, err := modelSpecs(base, models, *modelsDir, *configPath, proj)
	if err != nil {
		return err
	}
	rcfg := registry.Config{StrictNames: *strict, MaxWait: *loadWait, MaxWaiting: *loadQueue, KeepAlive: registry.DefaultKeepAlive}
	if len(specs) == 1 {
		rcfg.KeepAlive = -1
	}
	if *keepAlive != "" {
		if rcfg.KeepAlive, err = serving.ParseKeepAlive(*keepAlive); err != nil {
			return fmt.Errorf("--keep-alive: %w", err)
		}
	}
	if rcfg.Budget, err = memoryBudget(*budgetFlag, log); err != nil {
		return fmt.Errorf("--memory-budget: %w", err)
	}
	if rcfg.Devices, err = deviceBudgets(offFlags.memory, engine.Devices()); err != nil {
		return err
	}
	access, err := acc.setup(log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	access.announce(ln, log)
	if *kvEvents != "" {
		ep := kvEventsEndpoint(kvEndpoint, ln.Addr())
		pub, err := kvevents.NewPublisher(ep, kvevents.Options{Log: log, OmitTokens: kvOmitTokens})
		if err != nil {
			ln.Close()
			return fmt.Errorf("--kv-events: %w", err)
		}
		defer pub.Close() // after serveModels has closed the engines: their last events go out
		pod := *kvPod
		if pod == "" {
			pod = ln.Addr().String()
		}
		for i := range specs {
			specs[i].Engine.KVEvents = pub.Topic("kv@" + pod + "@" + specs[i].ID)
		}
		aopt.KVEvents = pub
		if a, ok := pub.Addr().(*net.TCPAddr); ok { // what it bound
			ep.Host, ep.Port = a.IP.String(), a.Port
		}
		log.Info("kv events", "endpoint", ep.String(), "topic", "kv@"+pod+"@<model>", "token_ids", !kvOmitTokens)
	}
	hup, stopHUP := context.WithCancel(ctx)
	waitHUP := reloadKeysOnHUP(hup, access.policy.Keys, log)
	defer func() { stopHUP(); waitHUP() }()
	scfg.MaxBody, scfg.LogRequests, scfg.Logger = *maxBody, *logRequests, log
	scfg.ResponsesStore.Logger = log
	scfg.Policy, scfg.TLS, scfg.PublicMetrics = access.policy, access.tls, aopt.MetricsPublic
	aopt.Limits = *lim
	return serveModels(ctx, ln, specs, rcfg, scfg, aopt, nil)
}

// kvEventsEndpoint is where --kv-events publishes: its endpoint, but
// tcp://*:PORT listens where the HTTP listener at httpAddr does (a
// loopback address by default, every interface when it listens on all),
// so that the stream is never reachable from more hosts than the API.
func kvEventsEndpoint(ep kvevents.Endpoint, httpAddr net.Addr) kvevents.Endpoint {
	if tcp, ok := httpAddr.(*net.TCPAddr); ok && ep.Wildcard && !tcp.IP.IsUnspecified() {
		ep.Host = tcp.IP.String()
	}
	return ep
}

// kvEventsOmitTokens reads --kv-events-tokens: whether BlockStored events
// go without token ids. auto omits them when the server has tenants (API
// keys, or a prefix cache per key): a subscriber would otherwise read
// every tenant's prompts and outputs (issue 31).
func kvEventsOmitTokens(flag string, keys bool, isolation serving.CacheIsolation) (bool, error) {
	switch flag {
	case "on":
		return false, nil
	case "off":
		return true, nil
	case "auto":
		return keys || isolation == serving.CacheIsolationKey, nil
	}
	return false, fmt.Errorf("%q: want auto, on or off", flag)
}

// addLimitFlags adds the flags of serving.Limits to fs, each defaulting to
// serving.DefaultLimits.
func addLimitFlags(fs *flag.FlagSet) *serving.Limits {
	lim := serving.DefaultLimits
	for _, f := range []struct {
		v          *int
		name, help string
	}{
		{&lim.MaxTools, "max-tools", "most tools a chat request may give; more → 400"},
		{&lim.MaxAllowedTools, "max-allowed-tools", "most entries of a chat request's tool_choice allowed_tools; more → 400"},
		{&lim.MaxMessages, "max-messages", "most messages a chat request may have (more → 400), or a voice conversation keeps"},
		{&lim.MaxPromptBytes, "max-prompt-bytes", "longest prompt text in `bytes`, as the chat template renders it (rendering stops past it) or as given; longer → 400"},
		{&lim.MaxSchemaNodes, "max-schema-nodes", "most JSON values in a request's JSON schema (response_format, json_schema, format, forced tools); more → 400"},
		{&lim.MaxSchemaProperties, "max-schema-properties", "most properties in a request's JSON schema; more → 400"},
		{&lim.MaxLogprobs, "max-logprobs", "most log-probabilities a request may get back: (alternatives + 1) × its max tokens (or the slot's context); more → 400"},
		{&lim.MaxEmbedInputs, "max-embed-inputs", fmt.Sprintf("most inputs of an embeddings request (at most %d); more → 400", engine.MaxEmbedInputs)},
		{&lim.MaxEmbedBytes, "max-embed-bytes", "largest inputs of an embeddings request together, in `bytes` of text (a token id counts 4); larger → 400"},
		{&lim.MaxDetokenizeBytes, "max-detokenize-bytes", "longest text /detokenize answers, in `bytes`; longer → 400"},
		{&lim.MaxVoiceHistory, "max-voice-history", "most `bytes` of conversation a voice socket keeps: a turn forgets the oldest messages to stay within it"},
		{&lim.MaxMedia, "max-media", "most images and sounds one request may send; more → 400"},
	} {
		fs.IntVar(f.v, f.name, *f.v, f.help+" (0: the default)")
	}
	fs.Int64Var(&lim.Media.MaxImageBytes, "max-image-bytes", lim.Media.MaxImageBytes, "largest image a request may send, in encoded `bytes` (checked on the base64 before decoding); larger → 400 (0: the default)")
	fs.Int64Var(&lim.Media.MaxImagePixels, "max-image-pixels", lim.Media.MaxImagePixels, "most `pixels` (width × height, read from the header before decoding; a side is at most 16384) of an image a request may send; more → 400 (0: the default)")
	fs.Int64Var(&lim.Media.MaxAudioBytes, "max-audio-bytes", lim.Media.MaxAudioBytes, "largest sound a request may send, in encoded `bytes`; larger → 400 (0: the default)")
	fs.Int64Var(&lim.MaxMediaMemory, "max-media-memory", lim.MaxMediaMemory, "most `bytes` of decoded images and sounds (3 a pixel, 4 a sample) the requests being served hold together: a request waits for its share, or is refused (400) when it alone needs more (0: the default)")
	fs.Float64Var(&lim.Media.MaxAudioSeconds, "max-audio-seconds", lim.Media.MaxAudioSeconds, "longest sound a request may send, in `seconds` (a WAV's from its header; MP3 and FLAC refused as soon as their frames pass it); longer → 400 (0: the default)")
	fs.Var(whitespaceFlag{&lim.GrammarWhitespace}, "grammar-whitespace", "whitespace the grammars of JSON (forced tool calls' arguments, response_format, json_schema, format) allow between its tokens, `compact|free|spaced`; compact allows none (a value in the fewest tokens), free a space, or a line break and up to 20 spaces or tabs, after each token (llama.cpp's rule), spaced has one space after each ':' and ',' (as chat templates' tojson writes JSON)")
	return &lim
}

// whitespaceFlag is --grammar-whitespace: compact, free or spaced.
type whitespaceFlag struct{ dst *grammar.Whitespace }

// String is the setting's name (flag.Value); the zero flag's is "", so
// that -h shows the default.
func (f whitespaceFlag) String() string {
	if f.dst == nil {
		return ""
	}
	return f.dst.String()
}

// Set reads a setting's name (flag.Value).
func (f whitespaceFlag) Set(s string) error {
	w, err := grammar.ParseWhitespace(s)
	if err != nil {
		return err
	}
	*f.dst = w
	return nil
}

// serveModel serves the one model cfg describes on ln until ctx ends (see
// serveModels); tmpl names a built-in chat template to use instead of the
// model's ("": the model's).
func serveModel(ctx context.Context, ln net.Listener, cfg engine.Config, tmpl string, scfg server.Config, ready func()) error {
	spec := registry.Spec{ID: fileID(cfg.ModelPath), Engine: cfg, ChatTemplate: tmpl}
	return serveModels(ctx, ln, []registry.Spec{spec}, registry.Config{KeepAlive: -1}, scfg, serving.Options{}, ready)
}

// serveModels serves specs on ln until ctx ends, its API configured by
// aopt (zero fields: the defaults); corral serve and corral run's
// in-process server are this function. With one model it loads it
// before the server is ready (/health answers 503 {"status":"loading"}
// until then); with several, each loads at its first request. ready, when
// not nil, is called once the server is ready. When ctx ends it shuts
// down gracefully (see server.Server.Serve) and frees every model.
func serveModels(ctx context.Context, ln net.Listener, specs []registry.Spec, rcfg registry.Config, scfg server.Config, aopt serving.Options, ready func()) error {
	if scfg.Logger == nil {
		scfg.Logger = slog.Default()
	}
	log := scfg.Logger
	if len(specs) > 1 {
		// Models computing at once share the cores (see engine.CPU).
		cpu := engine.NewCPU(runtime.NumCPU())
		for i := range specs {
			specs[i].Engine.CPU = cpu
		}
	}
	rcfg.Logger, rcfg.Estimate, rcfg.Place = log, registry.EstimateFromFile, registry.PlaceFromFile
	if rcfg.Devices == nil {
		devs, err := deviceBudgets("", engine.Devices())
		if err != nil {
			ln.Close()
			return err
		}
		rcfg.Devices = devs
	}
	reg, err := registry.New(rcfg, specs, model.Loader(log))
	if err != nil {
		ln.Close()
		return err
	}
	defer reg.Close()
	srv := server.New(scfg)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, ln) }()
	log.Info("listening", "addr", ln.Addr().String(), "models", len(specs), "memory_budget", registry.FormatBytes(reg.Budget().Limit()))
	logCPU(log)
	logDevices(log)
	for _, s := range reg.Status() {
		args := []any{"id", s.ID, "path", s.Path, "need", registry.FormatBytes(s.Need), "device_need", deviceNeedText(s.Devices)}
		if spec, err := reg.Spec(s.ID); err == nil && spec.Engine.MMProj != "" {
			args = append(args, "mmproj", spec.Engine.MMProj)
		}
		log.Info("model", args...)
	}
	if len(specs) == 1 {
		l, err := reg.Acquire(sctx, "")
		if err != nil {
			stop()
			<-served
			return err
		}
		info := l.Model().Info()
		l.Release()
		log.Info("model loaded; ready", "model", info.Name, "arch", info.Architecture, "slots", specs[0].Engine.Parallel, "slot_ctx", info.CtxPerRequest,
			"gpu_layers", fmt.Sprintf("%d/%d", info.GPULayers, info.Layers), "devices", strings.Join(info.Devices, ","))
	}
	aopt.Logger = log
	srv.SetCore(serving.New(reg, aopt))
	if ready != nil {
		ready()
	}
	err = <-served // after ctx ends and in-flight requests drained, or a serve error
	if cerr := reg.Close(); err == nil {
		err = cerr
	}
	return err
}

// logCPU says which llama.cpp and kernels ggml runs and what the binary
// was built for.
func logCPU(log *slog.Logger) {
	c := llama.CPU()
	if c.Err != nil {
		log.Error("cpu", "llama", llama.Version(), "err", c.Err)
		return
	}
	args := []any{"llama", llama.Version(), "arch", c.Arch, "variant", c.Variant, "kernels", c.Kernels, "built_for", strings.Join(c.Built, " "), "machine", strings.Join(c.Machine, " ")}
	if c.AMXUnused() {
		args = append(args, "amx", "present, not used ("+llama.CPUVariantEnv+"=sapphirerapids to try it)")
	}
	log.Info("cpu", args...)
}

// memoryBudget parses --memory-budget: bytes or a percentage of physical
// memory (the smaller of the machine's and the cgroup's limit).
func memoryBudget(s string, log *slog.Logger) (int64, error) {
	total, err := physicalMemory()
	if err != nil && strings.HasSuffix(strings.TrimSpace(s), "%") {
		log.Warn("physical memory unknown: no memory budget (give --memory-budget in bytes)", "err", err)
		return 0, nil
	}
	return registry.ParseBytes(s, total)
}

// physicalMemory is the memory this process may use: MemTotal, or the
// cgroup v2 limit when lower.
func physicalMemory() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	var total int64
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo: %q: %w", line, err)
			}
			total = kb << 10
		}
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if limit, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && limit < total {
			total = limit
		}
	}
	if total == 0 {
		return 0, errors.New("/proc/meminfo: no MemTotal")
	}
	return total, nil
}

// diskCacheSize parses --cache-disk-size (or a model's cache_disk_size):
// a positive size.
func diskCacheSize(s string) (int64, error) {
	n, err := registry.ParseBytes(s, 0)
	if err == nil && n <= 0 {
		err = fmt.Errorf("%q: want a positive size", s)
	}
	return n, err
}

// checkCacheDisk creates the --cache-disk directory (or a model's
// cache_disk) if it does not exist, so that a path that cannot be a
// directory fails at start, not at a model's first load.
func checkCacheDisk(dir string) error {
	if dir == "" {
		return nil
	}
	return os.MkdirAll(dir, 0o700)
}

// responsesStoreDir is where the Responses API's store keeps its
// entries: --responses-dir when given (empty: nowhere), else responses/
// under --cache-disk when that is set (the engine's directories there
// are named MODEL-DIGEST: none is responses).
func responsesStoreDir(fs *flag.FlagSet, dir, cacheDisk string) string {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "responses-dir" })
	if given || cacheDisk == "" {
		return dir
	}
	return filepath.Join(cacheDisk, "responses")
}

// checkResponsesDir creates the store's directory (if any) and checks
// that it can be used (writable, not held by another server), so that it
// fails at start, not at the first stored response.
func checkResponsesDir(dir string) error {
	if dir == "" {
		return nil
	}
	return responses.CheckDir(dir)
}

// checkReasoningFormat checks a --reasoning-format value (see
// model.Options.ReasoningFormat).
func checkReasoningFormat(name string) error {
	if slices.Contains(model.ReasoningFormats, name) {
		return nil
	}
	if _, err := reasoning.Lookup(name); err != nil {
		return fmt.Errorf("%w; or one of %s", err, strings.Join(model.ReasoningFormats, ", "))
	}
	return nil
}

// deviceNeedText lists a model's device reservations for the log:
// name=size, comma-separated, or none.
func deviceNeedText(devs map[string]int64) string {
	if len(devs) == 0 {
		return "none"
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(devs)) {
		parts = append(parts, name+"="+registry.FormatBytes(devs[name]))
	}
	return strings.Join(parts, ",")
}
