#!/usr/bin/env bash
# Voice load, three ways, one server at a time, interleaved over ROUNDS
# rounds, with corral bench's voice mode as the client:
#   corral paced     /v1/voice: pauses in the engine, continue / interrupt
#   corral paced1    the same with first_min_tokens 1, cutting the first chunk at
#                    the first sentence end as the reference's test does
#   corral resend    the reference agent's close-and-resend on /completion
#   llama resend     the same against llama-server (with --metrics)
# Prints each way's medians and keeps every run's JSON summary in OUT.
#
# usage: scripts/voice.sh LLAMA_SERVER [ROUNDS]     (LLAMA_SERVER "-": corral only)
# env:   MODEL     GGUF file (default: ../shared/models/tinystories-656k-q8_0.gguf)
#        THREADS   compute threads (default 2)
#        NP        slots (default 16: two per session, as the reference alternates)
#        SESSIONS  conversations at once (default 8)
#        TURNS     answers per conversation (default 3)
#        CPS       speaking pace, characters per second (default 15)
#        BARGE     fraction of answers interrupted (default 0.3)
#        OUT       folder for the JSON summaries (default: a new temporary folder)
set -euo pipefail
peer=${1:?usage: scripts/voice.sh LLAMA_SERVER [ROUNDS]}
rounds=${2:-3}
cd "$(dirname "$0")/.."
. scripts/lib.sh
threads=${THREADS:-2}
np=${NP:-16}
sessions=${SESSIONS:-8}
turns=${TURNS:-3}
cps=${CPS:-15}
barge=${BARGE:-0.3}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
port=18432
corral=./bin/corral
[ -x "$corral" ] || make build >/dev/null
model=${MODEL:-../shared/models/tinystories-656k-q8_0.gguf}

serve() {
  local name=$1
  case $name in
  corral) "$corral" serve -m "$model" -np "$np" -t "$threads" --port "$port" >"$out/$name.log" 2>&1 & ;;
  llama) "$peer" -m "$model" -np "$np" -t "$threads" -c $((np * 2048)) --metrics --slots --port "$port" >"$out/$name.log" 2>&1 & ;;
  esac
  server=$!
  healthy "$name" "$port" "$out/$name.log"
}
trap stop EXIT

# run NAME WAY ROUND: one voice run into $out/NAME-WAY-ROUND.json.
run() {
  local name=$1 way=$2 round=$3 mode=$2 extra=()
  if [ "$way" = paced1 ]; then mode=paced extra=(--voice-first-min-tokens 1); fi
  serve "$name"
  "$corral" bench --url "http://127.0.0.1:$port" --voice "$mode" --voice-sessions "$sessions" \
    --voice-turns "$turns" --voice-cps "$cps" --voice-barge-in "$barge" --output-len 128 \
    --seed "$round" "${extra[@]}" --json "$out/$name-$way-$round.json" >/dev/null || true
  # A server that died under the load is a result, not an error of the script.
  kill -0 "$server" 2>/dev/null || echo "$name died during round $round ($mode); see $out/$name.log" | tee -a "$out/deaths.txt" >&2
  stop
}

for round in $(seq "$rounds"); do
  run corral paced "$round"
  run corral paced1 "$round"
  run corral resend "$round"
  [ "$peer" = - ] || run llama resend "$round"
done

python3 - "$out" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
def med(runs, key):
    xs = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(xs) if xs else float("nan")
print(f"{'way':16} {'answers':>8} {'failed':>7} {'TTFT p50':>9} {'p99':>8} {'1st chunk p50':>14} {'p99':>8} {'re-eval/ans':>12} {'prompt eval/ans':>16} {'leaked':>7}")
for way in ("corral-paced", "corral-paced1", "corral-resend", "llama-resend"):
    runs = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, way + "-*.json")))]
    if not runs:
        continue
    print(f"{way:16} {med(runs,'answers'):8.0f} {med(runs,'failed'):7.0f} {med(runs,'ttft_p50_ms'):9.1f} {med(runs,'ttft_p99_ms'):8.1f} "
          f"{med(runs,'first_chunk_p50_ms'):14.1f} {med(runs,'first_chunk_p99_ms'):8.1f} {med(runs,'reevaluated_per_answer'):12.1f} "
          f"{med(runs,'prompt_evaluated_per_answer'):16.1f} {med(runs,'slots_leaked'):7.0f}")
deaths = os.path.join(out, "deaths.txt")
if os.path.exists(deaths):
    print(open(deaths).read().strip())
print(f"(medians over the rounds, times in ms; summaries in {out})")
PY
