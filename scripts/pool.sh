#!/usr/bin/env bash
# The KV cache as one pool, under mixed load: -np 16 -c 32768, 15 chat
# streams decoding while one 12,000-token document arrives. With a fixed
# share per slot (2,048 cells) the document was refused; with the pool it
# runs in the cells the streams leave free. Prints, per round and as
# medians: the document's HTTP status, finish reason and latency, the chat
# streams' ITL p50/p99 and TTFT p99, and the requests preempted for cells.
#
# usage: scripts/pool.sh [ROUNDS]
# env:   SHAPE     corral synth shape of the model (default 135m; its context is
#                  set to 32768)
#        THREADS   compute threads (default 2)
#        DOC       document tokens (default 12000)
#        BASELINE  another corral binary to run the same rounds with (e.g. one
#                  built before the pool), reported beside this one
#        OUT       folder for reports and logs (default: a new temporary folder)
set -euo pipefail
rounds=${1:-3}
cd "$(dirname "$0")/.."
. scripts/lib.sh
threads=${THREADS:-2}
doc=${DOC:-12000}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
port=${PORT:-$((20000 + RANDOM % 20000))}
corral=./bin/corral
[ -x "$corral" ] || make build >/dev/null
shape=${SHAPE:-135m}
model=${TMPDIR:-/tmp}/corral-synth-$shape-32k.gguf
[ -f "$model" ] || "$corral" synth --shape "$shape,ctx=32768" -o "$model"
python3 -c "
import json, random
random.seed(7)
print(json.dumps({'prompt': [random.randrange(10, 500) for _ in range($doc)], 'max_tokens': 16, 'temperature': 0}))
" >"$out/doc.json"
trap stop EXIT

# round NAME BIN N: one round with the binary BIN.
round() {
  local name=$1 bin=$2 i=$3
  "$bin" serve -m "$model" -np 16 -c 32768 -t "$threads" --port "$port" >"$out/$name-$i.log" 2>&1 &
  server=$!
  healthy "$name" "$port" "$out/$name-$i.log"
  "$corral" bench --url "http://127.0.0.1:$port" --progress=false --api chat --concurrency 15 \
    --num-requests 45 --input-len 64 --output-len 128 --ignore-eos --json "$out/chat-$name-$i.json" >/dev/null &
  local bench=$!
  # The document arrives once the streams decode.
  for _ in $(seq 300); do
    curl -s "http://127.0.0.1:$port/metrics" | grep -q '^corral_slots_busy{[^}]*} 1[0-9]' && break
    sleep 0.1
  done
  local t0 t1 code
  t0=$(date +%s.%N)
  code=$(curl -s -o "$out/doc-$name-$i.out" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary @"$out/doc.json" "http://127.0.0.1:$port/v1/completions")
  t1=$(date +%s.%N)
  wait "$bench"
  local pre
  pre=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^corral_pool_preemptions_total/ {print $2}')
  python3 - "$out" "$name" "$i" "$code" "$t0" "$t1" "${pre:-0}" <<'PY' >>"$out/rows.tsv"
import json, sys
out, name, i, code, t0, t1, pre = sys.argv[1:]
try:
    doc = json.load(open(f"{out}/doc-{name}-{i}.out"))
except Exception:
    doc = {}
finish = (doc.get("choices") or [{}])[0].get("finish_reason") or (doc.get("error") or {}).get("code", "?")
run = json.load(open(f"{out}/chat-{name}-{i}.json"))["runs"][0]
print("\t".join(map(str, [name, i, code, finish, round(float(t1) - float(t0), 1),
    round(run["itl_ms"]["median"], 1), round(run["itl_ms"]["p99"], 1), round(run["ttft_ms"]["p99"]), pre])))
PY
  stop
}

: >"$out/rows.tsv"
for i in $(seq "$rounds"); do
  round corral "$corral" "$i"
  [ -z "${BASELINE:-}" ] || round baseline "$BASELINE" "$i"
done
python3 - "$out" <<'PY'
import collections, statistics, sys
out = sys.argv[1]
rows = collections.defaultdict(list)
print(f"{'server':9} {'round':>5} {'doc HTTP':>8} {'finish':>26} {'doc s':>6} | {'ITL p50':>7} {'p99':>7} {'p99/p50':>7} | {'TTFT p99':>8} | {'preempt':>7}")
for line in open(f"{out}/rows.tsv"):
    name, i, code, finish, secs, p50, p99, ttft, pre = line.rstrip("\n").split("\t")
    rows[name].append((float(secs), float(p50), float(p99), float(ttft)))
    print(f"{name:9} {i:>5} {code:>8} {finish:>26} {secs:>6} | {p50:>7} {p99:>7} {float(p99)/float(p50):7.2f} | {ttft:>8} | {pre:>7}")
for name, rs in rows.items():
    med = lambda k: statistics.median(r[k] for r in rs)
    print(f"{name}: median doc {med(0):.1f} s, ITL p50 {med(1):.1f} ms, p99 {med(2):.1f} ms ({med(2)/med(1):.2f}x), TTFT p99 {med(3):.0f} ms")
print(f"(reports and logs in {out})")
PY
