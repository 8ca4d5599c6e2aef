#!/usr/bin/env bash
# The gate's cost under load: request throughput and TTFT at concurrency 16
# of corral serve without API keys, then with 100 keys, a Host allowlist and
# CORS origins (the key presented is the last compared), alternating over
# ROUNDS rounds; prints each round and the medians with their ratio.
#
# usage: scripts/gate.sh [ROUNDS]
# env:   MODEL (default the shared tinystories-656k), THREADS (1), NP (16), N requests a run (400)
set -euo pipefail
rounds=${1:-5}
cd "$(dirname "$0")/.."
source scripts/lib.sh
threads=${THREADS:-1}
np=${NP:-16}
n=${N:-400}
out=${OUT:-$(mktemp -d)}
port=18433
corral=./bin/corral
[ -x "$corral" ] || make build >/dev/null
model=${MODEL:-../shared/models/tinystories-656k-q8_0.gguf}
keys="$out/keys"
for i in $(seq 100); do printf 'sk-gate-bench-%04d name=k%d\n' "$i" "$i"; done >"$keys"
key=sk-gate-bench-0100
server=
trap 'stop' EXIT

run() { # run NAME [serve flags...]: one bench run at c=16, 16-token prompts, 16 tokens out
  local name=$1
  shift
  "$corral" serve -m "$model" -np "$np" -t "$threads" --port "$port" "$@" >"$out/$name.log" 2>&1 &
  server=$!
  healthy "$name" "$port" "$out/$name.log"
  CORRAL_API_KEY=$key "$corral" bench --url "http://127.0.0.1:$port" --progress=false --api completions \
    --num-requests "$n" --concurrency 16 --input-len 16 --output-len 16 --ignore-eos --seed 7 --json "$out/$name.json" >/dev/null
  stop
  jq -r '[.runs[0].request_throughput, .runs[0].ttft_ms.median, .runs[0].ttft_ms.p99] | @tsv' "$out/$name.json"
}

printf 'round\tconfig\treq/s\tttft_p50_ms\tttft_p99_ms\n'
for r in $(seq "$rounds"); do
  printf '%s\tno keys\t%s\n' "$r" "$(run open-$r)"
  printf '%s\tgate\t%s\n' "$r" "$(run keyed-$r --api-key-file "$keys" --allowed-hosts 127.0.0.1 --cors-origins https://app.example)"
done | tee "$out/rounds.tsv"
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
open=$(awk -F'\t' '$2 == "no keys" { print $3 }' "$out/rounds.tsv" | median)
gated=$(awk -F'\t' '$2 == "gate" { print $3 }' "$out/rounds.tsv" | median)
echo "median req/s: no keys $open, gate $gated, ratio $(awk -v a="$gated" -v b="$open" 'BEGIN { printf "%.3f", a / b }')"
