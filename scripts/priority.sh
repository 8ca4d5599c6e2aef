#!/usr/bin/env bash
# Priority under load: the TTFT of priority-0 requests on an idle corral,
# then while a batch load of priority-1 requests keeps every slot busy and
# more waiting (issue 8's goal: within 2x of idle). corral bench is the
# client; the batch load is a second bench run in the background.
#
# usage: scripts/priority.sh [ROUNDS]
# env:   MODEL THREADS NP as in scripts/versus.sh; N foreground requests (default 12)
set -euo pipefail
rounds=${1:-3}
cd "$(dirname "$0")/.."
threads=${THREADS:-2}
np=${NP:-16}
n=${N:-12}
out=${OUT:-$(mktemp -d)}
port=18432
corral=./bin/corral
[ -x "$corral" ] || make build >/dev/null
model=${MODEL:-${TMPDIR:-/tmp}/corral-synth-135m.gguf}
[ -f "$model" ] || "$corral" synth --shape 135m -o "$model"

"$corral" serve -m "$model" -np "$np" -t "$threads" -c $((np * 1024)) --port "$port" >"$out/corral.log" 2>&1 &
server=$!
trap 'kill $server $load 2>/dev/null || true' EXIT
load=
for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done

fg() { # fg NAME SEED: priority-0 requests (fresh prompts: none cached) one at a time, 128-token prompts, 32 tokens out
  "$corral" bench --url "http://127.0.0.1:$port" --progress=false --api completions --num-requests "$n" \
    --concurrency 1 --input-len 128 --output-len 32 --ignore-eos --seed "$2" --json "$out/$1.json" >/dev/null
}
for round in $(seq "$rounds"); do
  echo "round $round" >&2
  fg "idle-$round" $((2 * round))
  "$corral" bench --url "http://127.0.0.1:$port" --progress=false --api completions --num-requests 0 \
    --duration 10m --concurrency $((2 * np)) --input-len 128 --output-len 256 --ignore-eos --priority 1 \
    --json "$out/batch-$round.json" >/dev/null 2>&1 &
  load=$!
  # Wait until every slot is busy and requests queue.
  for _ in $(seq 600); do
    q=$(curl -sf "http://127.0.0.1:$port/metrics" | awk '/^vllm:num_requests_waiting[{ ]/{n += $NF} END {print n + 0}')
    [ "${q:-0}" -gt 0 ] && break
    sleep 0.5
  done
  fg "loaded-$round" $((2 * round + 1))
  kill "$load" 2>/dev/null || true
  wait "$load" 2>/dev/null || true
  load=
  # Let the batch requests drain before the next idle measurement.
  for _ in $(seq 1200); do
    b=$(curl -sf "http://127.0.0.1:$port/metrics" | awk '/^vllm:num_requests_running[{ ]/{n += $NF} END {print n + 0}')
    [ "${b:-1}" -eq 0 ] && break
    sleep 0.5
  done
done
curl -sf "http://127.0.0.1:$port/metrics" | grep -E '^(corral_(preemptions|requests)_total|vllm:num_preemptions_total)' || true

python3 - "$out" "$rounds" <<'PY'
import json, os, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def ttft(name):
    r = json.load(open(os.path.join(out, name + ".json")))["runs"][0]["ttft_ms"]
    return r["median"], r["p99"]
idle = [ttft(f"idle-{i}") for i in range(1, rounds + 1)]
loaded = [ttft(f"loaded-{i}") for i in range(1, rounds + 1)]
for q, k in (("p50", 0), ("p99", 1)):
    a = statistics.median(x[k] for x in idle)
    b = statistics.median(x[k] for x in loaded)
    print(f"priority-0 TTFT {q}: idle {a:.0f} ms, under a priority-1 batch load {b:.0f} ms ({b / a:.2f}x)")
print(f"(medians over {rounds} rounds; reports in {out})")
PY
