#!/usr/bin/env bash
# Several models behind one corral serve: swap latency per model, and a
# many-client run spread over three models with a memory budget that holds
# all three ("all") or two ("two": models swap under load). Prints medians
# over ROUNDS rounds and keeps every JSON report and server log in OUT.
#
# usage: scripts/models.sh [ROUNDS]
# env:   THREADS  compute threads per engine (default 2)
#        NP       slots per model (default 4)
#        C        concurrent clients (default 128)
#        N        requests per run (default 384)
#        OUT      folder for reports and logs (default: a new temporary folder)
#
# Models: stories260K and tinystories-656k from ../shared/models, and the
# synthetic 135M (written once by corral synth). --cache-ram 64 per model.
set -euo pipefail
rounds=${1:-3}
cd "$(dirname "$0")/.."
. scripts/lib.sh
threads=${THREADS:-2}
np=${NP:-4}
clients=${C:-128}
n=${N:-384}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
port=18432
corral=./bin/corral
[ -x "$corral" ] || make build >/dev/null
shared=${SHARED:-../shared}/models
synth=${TMPDIR:-/tmp}/corral-synth-135m.gguf
[ -f "$synth" ] || "$corral" synth --shape 135m -o "$synth"
models=(-m "stories=$shared/stories260K.gguf" -m "tiny=$shared/tinystories-656k-q8_0.gguf" -m "synth=$synth")

# serve LOG BUDGET: start the server in the background, wait until healthy.
serve() {
  "$corral" serve "${models[@]}" -np "$np" -t "$threads" --cache-ram 64 --memory-budget "$2" \
    --keep-alive -1 --model-wait 10m --model-queue 1024 --port "$port" >"$out/$1" 2>&1 &
  server=$!
  healthy "corral" "$port" "$out/$1"
}
trap stop EXIT

# The estimated needs, from /v1/models, decide the budgets.
serve needs.log 0
needs=$(curl -s "http://127.0.0.1:$port/v1/models" | python3 -c '
import json, sys
print(" ".join(str(m["memory_bytes"]) for m in json.load(sys.stdin)["data"]))')
stop
read -r s t y <<<"$needs"
all=$((s + t + y))
two=$((all - (s < t ? (s < y ? s : y) : (t < y ? t : y)) / 2)) # the two largest fit, not all three
one=$(( (s > t ? (s > y ? s : y) : (t > y ? t : y)) + 1 ))    # one at a time
echo "needs: stories $s, tiny $t, synth $y bytes; budgets: all $all, two $two, one $one" >&2

for round in $(seq "$rounds"); do
  echo "round $round: swaps" >&2
  serve "swaps-$round.log" "$one"
  for _ in 1 2 3 4 5; do
    for id in stories tiny synth; do
      curl -sf "http://127.0.0.1:$port/v1/completions" -d "{\"model\":\"$id\",\"prompt\":\"Once\",\"max_tokens\":1}" >/dev/null
    done
  done
  stop
  for budget in all two; do
    echo "round $round: $clients clients, budget $budget" >&2
    serve "$budget-$round.log" "${!budget}"
    "$corral" bench --url "http://127.0.0.1:$port" --progress=false --api completions --model stories,tiny,synth \
      --concurrency "$clients" --num-requests "$n" --input-len 32 --output-len 32 \
      --cancel-fraction 0.1 --cancel-after-tokens 4 --seed "$round" --json "$out/$budget-$round.json" >/dev/null
    stop
  done
done

python3 - "$out" <<'PY'
import glob, json, os, re, statistics, sys
out = sys.argv[1]
med = statistics.median
loads, unloads = {}, {}
for path in glob.glob(os.path.join(out, "swaps-*.log")):
    for line in open(path):
        m = re.search(r'msg="model (loaded|unloaded)" model=(\S+).* took=(\S+)', line)
        if not m:
            continue
        v = m.group(3)
        ms = float(v[:-2]) if v.endswith("ms") else float(v[:-2]) / 1000 if v.endswith("µs") else float(v[:-1]) * 1000
        (loads if m.group(1) == "loaded" else unloads).setdefault(m.group(2), []).append(ms)
print("swap latency (ms, medians): model  load  unload  swap")
for k in sorted(loads):
    l, u = med(loads[k]), med(unloads.get(k, [0]))
    print(f"  {k:8} {l:7.1f} {u:7.1f} {l + u:7.1f}   ({len(loads[k])} loads)")
print("128-client run (medians over rounds): budget  req/s  out tok/s  TTFT p50  TTFT p99  completed  cancelled  failed")
rows = {}
for path in glob.glob(os.path.join(out, "*-*.json")):
    budget = os.path.basename(path).split("-")[0]
    for run in json.load(open(path))["runs"]:
        rows.setdefault(budget, []).append(run)
for b in ("all", "two"):
    runs = rows.get(b, [])
    if not runs:
        continue
    f = lambda g: med(g(r) for r in runs)
    print(f"  {b:4} {f(lambda r: r['request_throughput']):7.1f} {f(lambda r: r['output_throughput']):9.1f} "
          f"{f(lambda r: r['ttft_ms']['median']):9.0f} {f(lambda r: r['ttft_ms']['p99']):9.0f} "
          f"{f(lambda r: r['completed']):9.0f} {f(lambda r: r['cancelled']):9.0f} {f(lambda r: r['failed']):6.0f}")
if rows.get("all") and rows.get("two"):
    r = med(x["request_throughput"] for x in rows["two"]) / med(x["request_throughput"] for x in rows["all"])
    print(f"  req/s two/all: {r:.2f}")
print(f"(reports and logs in {out})")
PY
