#!/usr/bin/env bash
# The real agent CLIs against a server: Claude Code (Anthropic's /v1/messages)
# and OpenAI's Codex CLI (/v1/responses, as a custom provider with
# wire_api = "responses"), each with a one-shot prompt, offline: each runs in
# its own empty HOME and working folder, with telemetry, update checks and
# other side traffic switched off where the CLI allows it.
#
# usage: scripts/agents.sh install                install the pinned CLIs into $AGENTS_NPM
#        scripts/agents.sh run URL [PROMPT]       run both against URL (the server's root,
#                                                 e.g. http://127.0.0.1:8080); exits non-zero
#                                                 unless both exit 0
#        scripts/agents.sh claude URL [PROMPT]    Claude Code only
#        scripts/agents.sh codex URL [PROMPT]     Codex only
#        scripts/agents.sh session                a 3-turn tool session of each against corral serve,
#                                                 restarted between turns 2 and 3 (see session)
#        scripts/agents.sh compact                Claude Code's session, its turn 3 too long for the
#                                                 restarted server: it must compact (see compact)
#        scripts/agents.sh capture [OUT]          record every request both send with
#                                                 internal/tools/agentcapture into OUT (default
#                                                 testdata/agents), once plainly and once
#                                                 answering a shell tool call first
# env:   AGENTS_NPM  npm prefix of the CLIs (default ${XDG_CACHE_HOME:-~/.cache}/corral/agents-npm)
#        MODEL       model name both CLIs send (corral answers 404 to a name it does not
#                    serve). Unset: Claude Code sends its own default (claude-opus-5-5),
#                    Codex sends "corral". "default": Codex too sends its own default
#                    (gpt-6.1-sol, in a different request format, "responses lite")
#        TIMEOUT     seconds each CLI may run (default 600)
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned versions: the fixtures in testdata/agents were captured from these.
CLAUDE_CODE_VERSION=2.1.332
CODEX_VERSION=0.169.0

npm_prefix=${AGENTS_NPM:-${XDG_CACHE_HOME:-$HOME/.cache}/corral/agents-npm}
claude_bin=$npm_prefix/node_modules/.bin/claude
codex_bin=$npm_prefix/node_modules/.bin/codex
timeout=${TIMEOUT:-600}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

install() {
  mkdir -p "$npm_prefix"
  npm install --prefix "$npm_prefix" --no-fund --no-audit --no-save \
    "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" "@openai/codex@$CODEX_VERSION" >&2
  "$claude_bin" --version
  "$codex_bin" --version
}

need() {
  [ -x "$claude_bin" ] && [ -x "$codex_bin" ] || install >/dev/null
}

# sandbox NAME: a fresh folder for one CLI's runs, holding its HOME and an
# empty working folder; printed.
sandbox() {
  local d
  d=$(mktemp -d "$scratch/$1.XXXXXX")
  mkdir -p "$d/home" "$d/work"
  echo "$d"
}

# claude URL PROMPT: Claude Code in print mode against URL, in a fresh sandbox.
claude() { claude_in "$(sandbox claude)" "$@"; }

# claude_in DIR URL PROMPT [continue]: Claude Code in print mode against URL
# with DIR's HOME and working folder; with "continue", continuing DIR's last
# conversation.
claude_in() {
  local dir=$1 url=$2 prompt=$3 more=()
  [ "${4:-}" = continue ] && more=(--continue)
  local model_env=() model_arg=()
  if [ -n "${MODEL:-}" ] && [ "$MODEL" != default ]; then
    model_env=(ANTHROPIC_MODEL="$MODEL" ANTHROPIC_SMALL_FAST_MODEL="$MODEL"
      ANTHROPIC_DEFAULT_HAIKU_MODEL="$MODEL" ANTHROPIC_DEFAULT_SONNET_MODEL="$MODEL"
      ANTHROPIC_DEFAULT_OPUS_MODEL="$MODEL")
    model_arg=(--model "$MODEL")
  fi
  (cd "$dir/work" && env -i PATH="$PATH" HOME="$dir/home" TERM=dumb LANG=C.UTF-8 \
    ANTHROPIC_BASE_URL="$url" ANTHROPIC_API_KEY=dummy \
    DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 DISABLE_ERROR_REPORTING=1 \
    DISABLE_BUG_COMMAND=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
    "${model_env[@]}" \
    timeout "$timeout" "$claude_bin" -p "${model_arg[@]}" "${more[@]}" "$prompt" </dev/null)
}

# codex URL PROMPT: codex exec against URL, as a custom Responses provider,
# in a fresh sandbox.
codex() { codex_in "$(sandbox codex)" "$@"; }

# codex_in DIR URL PROMPT [continue]: codex exec against URL with DIR's HOME
# and working folder; with "continue", resuming DIR's last session.
codex_in() {
  local dir=$1 url=$2 prompt=$3 more=()
  [ "${4:-}" = continue ] && more=(resume --last)
  mkdir -p "$dir/home/.codex"
  local model_arg=(-c "model=\"${MODEL:-corral}\"")
  [ "${MODEL:-}" = default ] && model_arg=()
  (cd "$dir/work" && env -i PATH="$PATH" HOME="$dir/home" CODEX_HOME="$dir/home/.codex" TERM=dumb \
    LANG=C.UTF-8 CORRAL_API_KEY=dummy \
    timeout "$timeout" "$codex_bin" exec --skip-git-repo-check \
    -c model_provider=corral \
    -c 'model_providers.corral.name="corral"' \
    -c "model_providers.corral.base_url=\"$url/v1\"" \
    -c 'model_providers.corral.env_key="CORRAL_API_KEY"' \
    -c 'model_providers.corral.wire_api="responses"' \
    "${model_arg[@]}" \
    "${more[@]}" "$prompt" </dev/null)
}

# both URL PROMPT: each CLI in turn; fails if either fails.
both() {
  local rc=0
  echo "== claude-code $CLAUDE_CODE_VERSION" >&2
  claude "$1" "$2" || { rc=$?; echo "claude-code exited $rc" >&2; }
  echo "== codex $CODEX_VERSION" >&2
  codex "$1" "$2" || { rc=$?; echo "codex exited $rc" >&2; }
  return $rc
}

# capture OUT: every request of both CLIs, as JSON files in OUT named
# RUN-NN-PATH.json: claude-code (Claude Code's default model), claude-code-corral
# (model "corral"), codex (model "corral"), codex-default (Codex's default
# model); then, with the recorder answering a shell tool call first,
# claude-code-tool and codex-tool (model "corral").
capture() {
  local out=$1 bin log pid url runs run name cli model
  mkdir -p "$out"
  bin=$scratch/agentcapture
  log=$scratch/agentcapture.log
  go build -o "$bin" ./internal/tools/agentcapture
  for mode in plain tool; do
    local flags=()
    [ "$mode" = tool ] && flags=(-tool)
    "$bin" -out "$out" -prefix unnamed "${flags[@]}" >"$log" 2>&1 &
    pid=$!
    url=
    for _ in $(seq 100); do
      url=$(sed -n 's/^listening on //p' "$log")
      [ -n "$url" ] && break
      sleep 0.1
    done
    [ -n "$url" ] || { cat "$log" >&2; kill "$pid"; exit 1; }
    if [ "$mode" = plain ]; then
      runs="claude-code:claude: claude-code-corral:claude:corral codex:codex:corral codex-default:codex:default"
    else
      runs="claude-code-tool:claude:corral codex-tool:codex:corral"
    fi
    for run in $runs; do
      IFS=: read -r name cli model <<<"$run"
      curl -sf -X POST --data "$name" "$url/_capture/prefix"
      echo "== $name" >&2
      MODEL=$model "$cli" "$url" "Say hello"
    done
    kill "$pid"
    wait "$pid" || true
    cat "$log" >&2
  done
}

# serve_corral LOG [PORT [FLAGS...]]: corral serve in the background on PORT
# (default: a free one), on the session model with the session's disk tier
# and FLAGS, logging JSON to LOG; sets corral_pid and corral_url once it
# listens.
serve_corral() {
  local log=$1 addr=
  CORRAL_CPU_VARIANT=${CORRAL_CPU_VARIANT:-haswell} "$corral" serve -m "$scratch/session.gguf" \
    --alias corral -c 65536 -np 2 --port "${2:-0}" --cache-disk "$scratch/disk" --log-format json \
    "${@:3}" >"$log" 2>&1 &
  corral_pid=$!
  for _ in $(seq 300); do
    addr=$(sed -n 's/.*"msg":"listening","addr":"\([^"]*\)".*/\1/p' "$log")
    [ -n "$addr" ] && break
    kill -0 "$corral_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$addr" ] || { cat "$log" >&2; echo "corral serve did not start" >&2; exit 1; }
  corral_url=http://$addr
}

# stop_corral: SIGTERM, as an operator restarts it; corral writes what it
# has cached to the disk tier before it exits.
stop_corral() {
  kill -TERM "$corral_pid"
  wait "$corral_pid" || true
}

# requests LOG: the generating requests of a corral log, one per line:
# path, status, prompt tokens, cached tokens.
requests() {
  grep '"msg":"request".*"path":"/v1/\(messages\|responses\)"' "$1" |
    sed -e 's/.*"path":"\([^"]*\)","status":\([0-9]*\).*"prompt_tokens":\([0-9]*\),"cached_tokens":\([0-9]*\).*/\1 \2 \3 \4/' \
      -e 's/.*"path":"\([^"]*\)","status":\([0-9]*\).*/\1 \2 - -/'
}

# start_session [COMMAND]: the session model, corral serve on it, and
# agentcapture -upstream -tool in front, steering to COMMAND (default: echo
# hello), its URL in url; the requests are kept in $OUT.
start_session() {
  local out=${OUT:-$scratch/requests} proxy_log=$scratch/proxy.log
  corral=${CORRAL:-bin/corral}
  [ -x "$corral" ] || make build >&2
  "$corral" synth -shape tiny,ctx=65536 -vocab ../shared/vocab/ggml-vocab-gpt-2.gguf \
    -chat-template ../shared/templates/Qwen-Qwen2.5-7B-Instruct.jinja -o "$scratch/session.gguf" >&2
  go build -o "$scratch/agentcapture" ./internal/tools/agentcapture
  serve_corral "$scratch/corral-1.log"
  "$scratch/agentcapture" -out "$out" -prefix session -tool -command "${1:-echo hello}" \
    -upstream "$corral_url" >"$proxy_log" 2>&1 &
  proxy_pid=$!
  trap 'kill "${proxy_pid:-}" "${corral_pid:-}" 2>/dev/null; rm -rf "$scratch"' EXIT
  url=
  for _ in $(seq 100); do
    url=$(sed -n 's/^listening on //p' "$proxy_log")
    [ -n "$url" ] && break
    sleep 0.1
  done
  [ -n "$url" ] || { cat "$proxy_log" >&2; exit 1; }
}

# session: each CLI takes a 3-turn tool session against corral serve on a
# synthetic 64k-context model (random weights, GPT-2's vocabulary, Qwen2.5's
# chat template), across a restart of the server between turns 2 and 3.
# agentcapture -upstream -tool sits between and steers each request (the
# model's weights could not): turn 1 is answered with a shell call running
# "echo hello", which the CLI runs; turn 2, with its output, and turn 3 (the
# session continued with a new prompt after the restart) with a short fixed
# answer. Fails unless every CLI run exits 0 and turn 3 of each CLI finds at
# least 90% of its prompt cached, with a disk-tier hit each. The requests are
# kept in $OUT (default: a temporary folder).
session() {
  start_session
  local c x hits
  c=$(sandbox claude)
  x=$(sandbox codex)
  echo "== turns 1 and 2: Run echo hello" >&2
  MODEL=corral claude_in "$c" "$url" "Run echo hello"
  MODEL=corral codex_in "$x" "$url" "Run echo hello"
  echo "== restart" >&2
  stop_corral
  serve_corral "$scratch/corral-2.log" "${corral_url##*:}"
  echo "== turn 3: Now say goodbye" >&2
  MODEL=corral claude_in "$c" "$url" "Now say goodbye" continue
  MODEL=corral codex_in "$x" "$url" "Now say goodbye" continue
  hits=$(curl -sf "$corral_url/metrics" | sed -n 's/^corral_disk_cache_hits_total{.*} //p')
  echo "== after the restart: disk-tier hits $hits; path, status, prompt tokens, cached" >&2
  requests "$scratch/corral-2.log" | sed 's/^/  /' >&2
  [ "${hits:-0}" -ge 2 ] || { echo "want a disk-tier hit for each CLI's turn 3" >&2; exit 1; }
  requests "$scratch/corral-2.log" | awk '$2 != 200 || $4 * 10 < $3 * 9 { bad = 1 } END { exit bad }' ||
    { echo "want every turn 3 answered, with at least 90% of its prompt cached" >&2; exit 1; }
}

# compact: Claude Code's session as in session, its command printing 3,000
# lines (about 4,000 tokens), but the server comes back from its restart
# with a per-request context a few tokens longer than turn 2's prompt, so
# that turn 3 does not fit: corral answers Anthropic's "prompt is too long"
# and Claude Code must compact its conversation and go on. Fails unless it
# exits 0 and a request after the refusal is answered.
compact() {
  start_session "seq 1 3000"
  local c limit
  c=$(sandbox claude)
  echo "== turns 1 and 2: Run seq 1 3000" >&2
  MODEL=corral claude_in "$c" "$url" "Run seq 1 3000"
  limit=$(($(requests "$scratch/corral-1.log" | tail -1 | cut -d' ' -f3) + 24))
  echo "== restart with --ctx-per-request $limit" >&2
  stop_corral
  serve_corral "$scratch/corral-2.log" "${corral_url##*:}" --ctx-per-request "$limit"
  echo "== turn 3: Now say goodbye" >&2
  local rc=0
  MODEL=corral claude_in "$c" "$url" "Now say goodbye" continue || rc=$?
  echo "== after the restart: path, status, prompt tokens, cached" >&2
  requests "$scratch/corral-2.log" | sed 's/^/  /' >&2
  grep '"level":"\(WARN\|ERROR\)"' "$scratch/corral-2.log" | sed 's/^/  /' >&2 || true
  [ "$rc" = 0 ] || { echo "claude exited $rc" >&2; exit 1; }
  requests "$scratch/corral-2.log" | awk '$2 == 400 { refused = 1 } refused && $2 == 200 { ok = 1 } END { exit !ok }' ||
    { echo "want a prompt refused as too long, then a request answered" >&2; exit 1; }
}

case ${1:-} in
install) install ;;
run) need; both "${2:?usage: scripts/agents.sh run URL [PROMPT]}" "${3:-Say hello}" ;;
claude) need; claude "${2:?usage: scripts/agents.sh claude URL [PROMPT]}" "${3:-Say hello}" ;;
codex) need; codex "${2:?usage: scripts/agents.sh codex URL [PROMPT]}" "${3:-Say hello}" ;;
capture) need; capture "${2:-testdata/agents}" ;;
session) need; session ;;
compact) need; compact ;;
*) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
