#!/usr/bin/env bash
# Returning after a restart (issue 24): the next turn of a conversation
# with a long history (PREFIX tokens) once the server was restarted, and
# once the model was unloaded by its keep-alive and loaded again, against
# the cold prefill of that history. With --cache-disk the history comes
# back from disk; the goal is a TTFT of at most 0.2x the cold one.
#
# Each round takes a new conversation (random token ids on the synthetic
# 135M shape with an 8,192-token context), so its first request is cold.
# A request is /completion with n_predict 1: its time is the TTFT.
#
#   cold     the history, evaluated
#   restart  the server is stopped (SIGTERM: it writes its caches to
#            disk) and started again: the history + a turn of TURN tokens
#   unload   with --keep-alive 0 (the model unloads after each request,
#            writing its caches): one more turn (a restart again), then,
#            after the unload, the next turn: the model's load included
#
# usage: scripts/diskcache.sh [ROUNDS]
# env:   MODEL THREADS; PREFIX history tokens (4000), TURN tokens a turn (64)
set -euo pipefail
rounds=${1:-3}
cd "$(dirname "$0")/.."
source scripts/lib.sh
threads=${THREADS:-2}
prefix=${PREFIX:-4000}
turn=${TURN:-64}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
port=18433
corral=./bin/corral
[ -x "$corral" ] || make build >/dev/null
model=${MODEL:-${TMPDIR:-/tmp}/corral-synth-135m-8k.gguf}
[ -f "$model" ] || "$corral" synth --shape 135m,ctx=8192 -o "$model"
disk=$out/kv
server=
trap stop EXIT

# start LOG [ARGS...]: corral serve with the disk tier, one slot.
start() {
  "$corral" serve -m "$model" -np 1 -t "$threads" -c 8192 --port "$port" --cache-disk "$disk" "${@:2}" >>"$out/$1" 2>&1 &
  server=$!
  healthy corral "$port" "$out/$1"
}

# ask NAME CONV EXTRA: the history of conversation CONV plus EXTRA new
# tokens, n_predict 1; appends "NAME seconds cached evaluated" to results.
ask() {
  python3 - "$prefix" "$2" "$3" >"$out/req.json" <<'PY'
import json, random, sys
prefix, conv, extra = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
r = random.Random(conv)
toks = [r.randrange(300, 40000) for _ in range(prefix)]
r = random.Random(-1 - conv)
toks += [r.randrange(300, 40000) for _ in range(extra)]
print(json.dumps({"prompt": toks, "n_predict": 1, "temperature": 0}))
PY
  local t
  t=$(curl -sf -o "$out/resp.json" -w '%{time_total}' -H 'content-type: application/json' \
    --data @"$out/req.json" "http://127.0.0.1:$port/completion")
  python3 - "$1" "$t" "$out/resp.json" >>"$out/results" <<'PY'
import json, sys
r = json.load(open(sys.argv[3]))
print(sys.argv[1], sys.argv[2], r["tokens_cached"], r["timings"]["prompt_n"])
PY
  tail -1 "$out/results" >&2
}

# unloaded: wait until GET /v1/models says the model unloaded (after the
# request just answered: it was loaded to serve it).
unloaded() {
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/v1/models" | grep -q '"state":"unloaded"' && return 0
    sleep 0.2
  done
  echo "the model did not unload; see $out/keepalive.log" >&2
  exit 1
}

: >"$out/results"
for round in $(seq "$rounds"); do
  echo "round $round" >&2
  a=$((100 * round))
  start serve.log
  ask cold "$a" 0
  stop
  start serve.log
  ask restart "$a" "$turn"
  stop
  start keepalive.log --keep-alive 0
  ask restart-2 "$a" $((2 * turn))
  unloaded
  ask unload "$a" $((3 * turn))
  unloaded
  stop
done
du -sh "$disk" >&2

python3 - "$out/results" "$rounds" "$prefix" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, t, cached, evaluated = line.split()
    rows[name].append((float(t), int(cached), int(evaluated)))
med = lambda name: statistics.median(t for t, _, _ in rows[name])
cached = lambda name: statistics.median(c for _, c, _ in rows[name])
print(f"history {sys.argv[3]} tokens, medians over {sys.argv[2]} rounds (TTFT, wall clock of a 1-token request):")
print(f"  cold prefill                   {med('cold') * 1000:8.0f} ms")
print(f"  next turn after a restart      {med('restart') * 1000:8.0f} ms  ({med('restart') / med('cold'):.3f}x cold; {cached('restart'):.0f} tokens cached)")
print(f"  next turn after an unload      {med('unload') * 1000:8.0f} ms  ({med('unload') / med('cold'):.3f}x cold, the model's load included; {cached('unload'):.0f} tokens cached)")
PY
echo "(reports in $out)" >&2
