#!/usr/bin/env bash
# Head to head: corral serve against a llama-server binary on the same model,
# one server at a time (never together), interleaved over ROUNDS rounds, with
# corral bench as the client. Prints each row's medians and two ratios, both
# above 1 where corral is ahead: output throughput corral/llama-server and
# median time to first token llama-server/corral; where the peer's
# llama-batched-bench is at hand, the short and arrive rows also have the
# kernels' own loop (LOOP) and corral's share of it. Keeps every run's JSON
# report in OUT.
#
# usage: scripts/versus.sh LLAMA_SERVER [ROUNDS]
# env:   MODEL    GGUF file (default: the synthetic 135M, written once by corral synth)
#        THREADS  compute threads for both servers (default 2)
#        NP       slots for both servers (default 16)
#        N        requests per concurrency level (default 48)
#        OUT      folder for the JSON reports (default: a new temporary folder)
#        ONLY     workloads to run, of "short arrive shared long repeat draft"
#                 (default: all but draft)
#        CONC     concurrency levels of the short row (default 1,4,8,16)
#        LONG_LENS  prompt lengths of the long row (default "2041 7578")
#        SERVE_ARGS  extra flags for both servers (e.g. "-ngl 99" on a GPU)
#        CORRAL_ARGS  extra flags for corral serve alone (e.g. "--kv-per-slot")
#        DRAFT_TARGET, DRAFT, DRAFT_CONC  the draft row's model, draft model
#                 and concurrency levels (defaults below)
#        REPEAT_MODEL, REPEAT_CONC, REPEAT_LEN  the repeat row's model,
#                 concurrency levels and answer length (defaults below)
#        REPEAT_PEER_ARGS  flags for llama-server alone in the repeat row
#                 (default "--spec-type ngram-map-k", its best there; not
#                 given to a peer whose name does not start with llama)
#        LOOP     llama-batched-bench from the peer's build (default: the one
#                 beside LLAMA_SERVER, if there): the "loop" column of the
#                 short and arrive rows, the kernels' own batched loop of one
#                 wave of the row (every stream's prompt in one batch, then
#                 its 64 tokens a step each, a buffer per sequence as
#                 llama-server's slots), run each round before the servers.
#                 No server schedules better than that without speculation:
#                 output tokens / (prompt time + decode time).
#
# Workloads (the rows of issue 8's table):
#   short   ~10-token prompts through /v1/completions, concurrency 1, 4, 8, 16
#   shared  one ~1,030-token system prompt on every request, chat API, -c 32768,
#           concurrency 4 and 16
#   arrive  128-token prompts arriving while 16 streams decode
#   long    one prompt at a time of 2,041 and 7,578 tokens (LONG_LENS), -np 1 -c 32768,
#           on LONG_MODEL (default: the synthetic 135M with a 32,768-token
#           training context: llama-server caps a slot at the model's):
#           time to the first token (the first turn of an agent session)
#   repeat  a quote: each prompt is a document of 300 random three-letter
#           words (REPEAT_LEN+100 if more), then "Quote: " and 6 of its words, and
#           the answer REPEAT_LEN tokens (default 64, as every row), on REPEAT_MODEL (default:
#           the 135M's shape with weights set to copy, corral synth --shape
#           135m,copy=true), whose greedy answer goes on with the words that
#           followed in the document; concurrency 1, 4 and 16, each level its
#           own prompts (what speculation from a request's own text is for)
#   draft   ~10-token prompts at concurrency 1 and 16 on DRAFT_TARGET (default:
#           the synthetic 135M at F32) with the draft model DRAFT (default: the
#           same weights at Q8_0, written by corral synth with the same seed),
#           both servers given -md DRAFT --spec-type draft-simple (not in the
#           default set: add it to ONLY)
set -euo pipefail
peer=${1:?usage: scripts/versus.sh LLAMA_SERVER [ROUNDS]}
rounds=${2:-3}
cd "$(dirname "$0")/.."
. scripts/lib.sh
threads=${THREADS:-2}
np=${NP:-16}
n=${N:-48}
out=${OUT:-$(mktemp -d)}
only=${ONLY:-short arrive shared long repeat}
conc=${CONC:-1,4,8,16}
read -r -a extra <<<"${SERVE_ARGS:-}"
read -r -a own <<<"${CORRAL_ARGS:-}"
want() { [[ " $only " == *" $1 "* ]]; }
mkdir -p "$out"
port=18431
corral=./bin/corral
[ -x "$corral" ] || make build >/dev/null
model=${MODEL:-${TMPDIR:-/tmp}/corral-synth-135m.gguf}
[ -f "$model" ] || "$corral" synth --shape 135m -o "$model"
long_model=${LONG_MODEL:-${TMPDIR:-/tmp}/corral-synth-135m-32k.gguf}
if want long && [ ! -f "$long_model" ]; then "$corral" synth --shape 135m,ctx=32768 -o "$long_model"; fi
draft_target=${DRAFT_TARGET:-${TMPDIR:-/tmp}/corral-synth-135m-f32.gguf}
draft=${DRAFT:-$model}
if want draft && [ ! -f "$draft_target" ]; then "$corral" synth --shape 135m,type=f32 -o "$draft_target"; fi
repeat_model=${REPEAT_MODEL:-${TMPDIR:-/tmp}/corral-synth-135m-copy.gguf}
if want repeat && [ ! -f "$repeat_model" ]; then "$corral" synth --shape 135m,copy=true -o "$repeat_model"; fi
read -r -a repeat_peer <<<"${REPEAT_PEER_ARGS-"--spec-type ngram-map-k"}"
case $(basename "$peer") in llama*) ;; *) repeat_peer=() ;; esac
more=() # the current row's own flags for both servers
loop=${LOOP:-$(dirname "$peer")/llama-batched-bench}

# serve NAME CTX [SLOTS [MODEL]]: start one server in the background and
# wait until healthy.
serve() {
  local name=$1 ctx=$2 slots=${3:-$np} model=${4:-$model}
  case $name in
  corral) "$corral" serve -m "$model" -np "$slots" -t "$threads" -c "$ctx" --port "$port" "${extra[@]+"${extra[@]}"}" "${own[@]+"${own[@]}"}" "${more[@]+"${more[@]}"}" >"$out/$name.log" 2>&1 & ;;
  llama) "$peer" -m "$model" -np "$slots" -t "$threads" -c "$ctx" --port "$port" "${extra[@]+"${extra[@]}"}" "${more[@]+"${more[@]}"}" >"$out/$name.log" 2>&1 & ;;
  esac
  server=$!
  healthy "$name" "$port" "$out/$name.log"
}

trap stop EXIT

# quotes FILE SEED: N prompts of the repeat row, a line of JSONL each.
repeat_len=${REPEAT_LEN:-64}
quotes() {
  python3 - "$n" "$2" "$repeat_len" >"$1" <<'PY'
import itertools, json, random, string, sys
rng = random.Random(int(sys.argv[2]))
answer = int(sys.argv[3])
words = ["".join(p) for p in itertools.product(string.ascii_lowercase, repeat=3)]
size = max(300, answer + 100)
for _ in range(int(sys.argv[1])):
    doc = rng.sample(words, size)
    at = rng.randrange(0, size - 6 - answer - 16)  # the answer's words, and 16 more, follow the quote
    print(json.dumps({"prompt": " ".join(doc) + "\n\nQuote: " + " ".join(doc[at:at + 6])}))
PY
}

# bench WORKLOAD NAME ROUND ARGS...: one corral bench run into a JSON report.
bench() {
  local workload=$1 name=$2 round=$3
  shift 3
  "$corral" bench --url "http://127.0.0.1:$port" --progress=false --num-requests "$n" --output-len 64 --ignore-eos \
    --json "$out/$workload-$name-$round.json" "$@" >/dev/null
}

# kernel_loop WORKLOAD ROUND PROMPT STREAMS: the loop column's run (see LOOP)
# for STREAMS (a comma-separated list) waves of PROMPT-token prompts, as a
# report of corral bench's shape with the server "loop".
kernel_loop() {
  local workload=$1 round=$2 prompt=$3 streams=$4
  [ -x "$loop" ] || return 0
  local report="$out/$workload-loop-$round.json"
  if ! "$loop" -m "$model" -t "$threads" -fa on -c $((np * 1024)) -b 2048 -ub 512 \
    -npp "$prompt" -ntg 64 -npl "$streams" --output-format jsonl 2>"$out/loop.log" |
    python3 -c '
import json, sys
runs = [{"load": {"concurrency": r["pl"]}, "output_throughput": r["pl"] * r["tg"] / r["t"]}
        for r in (json.loads(line) for line in sys.stdin if line.strip())]
json.dump({"runs": runs}, sys.stdout)' >"$report"; then
    echo "the kernels' loop failed (see $out/loop.log): no loop column for $workload" >&2
    rm -f "$report"
  fi
}

# Odd rounds run corral first, even rounds llama-server first: a load on
# the machine that rises or falls over the run then weighs on both alike.
for round in $(seq "$rounds"); do
  order="corral llama"
  if [ $((round % 2)) = 0 ]; then order="llama corral"; fi
  for name in $order; do
    echo "round $round: $name" >&2
    if [ "$name" = llama ]; then
      if want short; then kernel_loop short "$round" 10 "$conc"; fi
      if want arrive; then kernel_loop arrive "$round" 128 16; fi
    fi
    if want short || want arrive; then
      serve "$name" $((np * 1024))
      if want short; then bench short "$name" "$round" --api completions --input-len 10 --sweep-concurrency "$conc"; fi
      if want arrive; then bench arrive "$name" "$round" --api completions --input-len 128 --concurrency 16; fi
      stop
    fi
    if want shared; then
      serve "$name" 32768
      bench shared "$name" "$round" --api chat --shared-prefix-len 1030 --input-len 30 --sweep-concurrency 4,16
      stop
    fi
    if want long; then
      serve "$name" 32768 1 "$long_model"
      for len in ${LONG_LENS:-2041 7578}; do
        # A seed per length: the 7,578-token prompts must not begin with
        # the 2,041-token ones (both servers would reuse that prefix).
        bench "long$len" "$name" "$round" --api completions --input-len "$len" --output-len 1 --num-requests 2 --concurrency 1 --seed "$len"
      done
      stop
    fi
    if want repeat; then
      if [ "$name" = llama ]; then more=("${repeat_peer[@]+"${repeat_peer[@]}"}"); fi
      serve "$name" $((np * 1024)) "$np" "$repeat_model"
      for c in ${REPEAT_CONC:-1 4 16}; do
        # Each level its own documents: a server keeps the last level's
        # prompts in its cache.
        quotes "$out/repeat$c.jsonl" "$c"
        bench "repeat$c" "$name" "$round" --api completions --dataset "$out/repeat$c.jsonl" --concurrency "$c" --output-len "$repeat_len"
      done
      stop
      more=()
    fi
    if want draft; then
      more=(-md "$draft" --spec-type draft-simple)
      serve "$name" $((np * 1024)) "$np" "$draft_target"
      bench draft "$name" "$round" --api completions --input-len 10 --sweep-concurrency "${DRAFT_CONC:-1,16}"
      # What the drafts took: corral's metrics, llama-server's log.
      if [ "$name" = corral ]; then curl -s "http://127.0.0.1:$port/metrics" >"$out/draft-$name-$round.prom"; fi
      stop
      cp "$out/$name.log" "$out/draft-$name-$round.log"
      more=()
    fi
  done
done

python3 - "$out" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
rows = {}  # (workload, concurrency) -> server -> list of runs
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    workload, server, _ = os.path.basename(path)[:-5].rsplit("-", 2)
    for run in json.load(open(path))["runs"]:
        key = (workload, run["load"].get("concurrency", 0))
        rows.setdefault(key, {}).setdefault(server, []).append(run)
def med(runs, f):
    return statistics.median(f(r) for r in runs) if runs else float("nan")
print(f"{'workload':8} {'c':>3} | {'out tok/s corral':>16} {'llama':>8} {'ratio':>6} {'loop':>7} {'c/loop':>6} | "
      f"{'TTFT med ms':>12} {'llama':>8} {'ratio':>6} | {'TTFT p99 ms':>12} {'llama':>8} | {'ITL p99 ms':>11} {'llama':>8} | {'cached %':>8}")
for (workload, c), by in sorted(rows.items()):
    a, b = by.get("corral", []), by.get("llama", [])
    tput = lambda r: r["output_throughput"]
    ta, tb = med(a, tput), med(b, tput)
    cached = med(a, lambda r: 100 * r["total_cached_tokens"] / max(1, r["total_input_tokens"]))
    tl = med(by.get("loop", []), tput)  # nan where no loop ran
    print(f"{workload:8} {c:>3} | {ta:16.1f} {tb:8.1f} {ta / tb if tb else float('nan'):6.2f} {tl:7.1f} {ta / tl:6.2f} | "
          f"{med(a, lambda r: r['ttft_ms']['median']):12.0f} {med(b, lambda r: r['ttft_ms']['median']):8.0f} "
          f"{med(b, lambda r: r['ttft_ms']['median']) / med(a, lambda r: r['ttft_ms']['median']):6.2f} | "
          f"{med(a, lambda r: r['ttft_ms']['p99']):12.0f} {med(b, lambda r: r['ttft_ms']['p99']):8.0f} | "
          f"{med(a, lambda r: r['itl_ms']['p99']):11.0f} {med(b, lambda r: r['itl_ms']['p99']):8.0f} | {cached:8.0f}")
import re
def taken(server):  # drafted tokens taken over the rounds of the draft row, both sizes of the sweep
    acc = gen = 0
    for path in glob.glob(os.path.join(out, f"draft-{server}-*")):
        text = open(path).read()
        if path.endswith(".prom"):
            for name, v in re.findall(r'^vllm:spec_decode_num_(accepted_tokens|draft_tokens)_total\{[^}]*\} (\S+)', text, re.M):
                if name == "accepted_tokens":
                    acc += float(v)
                else:
                    gen += float(v)
        elif server == "llama":
            for a, g in re.findall(r'draft acceptance = \S+ \(\s*(\d+) accepted /\s*(\d+) generated\)', text):
                acc, gen = acc + int(a), gen + int(g)
    return f"{acc / gen:.2f} ({acc:.0f} of {gen:.0f})" if gen else "n/a"
if any(w == "draft" for w, _ in rows):
    print(f"draft row, drafted tokens taken: corral {taken('corral')}, llama-server {taken('llama')}")
print(f"(medians over the rounds; reports in {out})")
PY
