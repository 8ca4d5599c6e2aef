#!/usr/bin/env bash
# Tokens per forced JSON output under each rule of corral serve
# --grammar-whitespace (free, the old one; compact, the default; spaced):
# completion_tokens of a tool_choice forcing get_weather(city), of
# tool_choice "required" with two tools (parallel_tool_calls false: one
# call), and of a response_format json_schema of 3 properties, for 8
# prompts, each greedy (temperature 0) and with SEEDS seeds (temperature
# 0.8, the default), on each model. Prints, per model, kind, sampling and
# rule, the median and range of completion_tokens (max_tokens MAX: an
# answer that rambles on is cut off there and counts MAX), how many
# finished (with the call, or stop), and how many finished within 64
# tokens. A model whose vocabulary cannot write the JSON (no token writes
# "{") gets the 400 instead.
#
# usage: scripts/grammar-whitespace.sh [MODEL.gguf...]
# env:   SEEDS (default 5) MAX (default 300: tinystories-656k's context is
#        512) THREADS (default 1) PORT (default 18437) CORRAL (the binary,
#        default bin/corral) MODES (the rules, default "free compact
#        spaced"); the models default to the two test models in
#        $CORRAL_TEST_MODELS or ../shared/models
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
seeds=${SEEDS:-5}
max=${MAX:-300}
threads=${THREADS:-1}
port=${PORT:-18437}
corral=${CORRAL:-./bin/corral}
[ -x "$corral" ] || make build >/dev/null
modes=${MODES:-free compact spaced}
models=("$@")
if [ ${#models[@]} = 0 ]; then
  dir=${CORRAL_TEST_MODELS:-../shared/models}
  models=("$dir/stories260K.gguf" "$dir/tinystories-656k-q8_0.gguf")
fi
out=$(mktemp -d)
server=
trap 'stop' EXIT

for m in "${models[@]}"; do
  for ws in $modes; do
    log="$out/$(basename "$m" .gguf)-$ws.log"
    "$corral" serve -m "$m" -np 1 -t "$threads" --port "$port" --grammar-whitespace "$ws" >"$log" 2>&1 &
    server=$!
    healthy corral "$port" "$log"
    python3 - "$port" "$(basename "$m" .gguf)" "$ws" "$seeds" "$max" >>"$out/results.jsonl" <<'PY'
import json, sys, urllib.error, urllib.request
port, model, ws, seeds, max_tokens = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
def tool(name, prop):
    return {"type": "function", "function": {"name": name, "description": f"the {prop} of a place",
            "parameters": {"type": "object", "properties": {prop: {"type": "string"}}, "required": [prop]}}}
weather, time = tool("get_weather", "city"), tool("get_time", "timezone")
person = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "happy": {"type": "boolean"}},
          "required": ["name", "age", "happy"], "additionalProperties": False}
kinds = {
    "forced get_weather": {"tools": [weather], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
    "required, 2 tools": {"tools": [weather, time], "tool_choice": "required", "parallel_tool_calls": False},
    "json_schema, 3 props": {"response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": person}}},
}
prompts = ["What is the weather in Paris?", "Tell me about the weather in Tokyo today.", "Is it raining in London?",
           "Lily wants to know if it is sunny where Tom lives.", "Weather in Lima?", "Hi",
           "Once upon a time, there was a little girl named Sue.", "What time is it in Rome, and is it cold?"]
def ask(kind, extra, p, sampling):
    body = {"model": model, "messages": [{"role": "user", "content": p}], "max_tokens": max_tokens, **extra}
    body.update({"temperature": 0} if sampling == "greedy" else {"seed": sampling})
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    row = {"model": model, "ws": ws, "kind": kind, "prompt": p, "sampling": "greedy" if sampling == "greedy" else "seeded", "seed": sampling}
    try:
        d = json.load(urllib.request.urlopen(req))
    except urllib.error.HTTPError as e:
        err = json.load(e)["error"]
        if err.get("code") != "grammar_unsatisfiable":
            sys.exit(f"{model} {ws} {kind}: {e.code} {err}")
        # The vocabulary cannot write the JSON at all (no token writes "{").
        return dict(row, tokens=None, finish="unsatisfiable", output=err["message"])
    c = d["choices"][0]
    return dict(row, tokens=d["usage"]["completion_tokens"], finish=c["finish_reason"],
                output=c["message"].get("tool_calls") or c["message"].get("content"))
for kind, extra in kinds.items():
    done = False
    for p in prompts:
        for sampling in ["greedy", *range(1, seeds + 1)]:
            row = ask(kind, extra, p, sampling)
            print(json.dumps(row))
            if row["finish"] == "unsatisfiable":
                done = True
                break
        if done:
            break
PY
    stop
  done
done

python3 - "$out/results.jsonl" <<'PY'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
groups = collections.defaultdict(list)
for r in rows:
    groups[(r["model"], r["kind"], r["sampling"], r["ws"])].append(r)
print(f"{'model':<22} {'kind':<21} {'sampling':<8} {'grammar':<8} {'median':>6} {'min-max':>9} {'finished':>8} {'in 64':>6}")
modes = list(dict.fromkeys(r["ws"] for r in rows))
for (model, kind, sampling, ws), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] != "greedy", modes.index(kv[0][3]))):
    if rs[0]["finish"] == "unsatisfiable":
        print(f"{model:<22} {kind:<21} {'-':<8} {ws:<8} 400: {rs[0]['output']}")
        continue
    toks = [r["tokens"] for r in rs]
    done = sum(r["finish"] in ("tool_calls", "stop") for r in rs)
    fit = sum(r["finish"] in ("tool_calls", "stop") and r["tokens"] <= 64 for r in rs)
    print(f"{model:<22} {kind:<21} {sampling:<8} {ws:<8} {statistics.median(toks):>6} {min(toks):>4}-{max(toks):<4} {done:>4}/{len(rs):<3} {fit:>3}/{len(rs):<3}")
PY
echo "(answers in $out/results.jsonl)"
