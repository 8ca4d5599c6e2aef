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

# sandbox NAME: a fresh HOME and an empty working folder for one CLI run,
# printed as "HOME WORK".
sandbox() {
  local d
  d=$(mktemp -d "$scratch/$1.XXXXXX")
  mkdir -p "$d/home" "$d/work"
  echo "$d/home $d/work"
}

# claude URL PROMPT: Claude Code in print mode against URL.
claude() {
  local url=$1 prompt=$2 home work
  read -r home work < <(sandbox claude)
  local model_env=() model_arg=()
  if [ -n "${MODEL:-}" ] && [ "$MODEL" != default ]; then
    model_env=(ANTHROPIC_MODEL="$MODEL" ANTHROPIC_SMALL_FAST_MODEL="$MODEL"
      ANTHROPIC_DEFAULT_HAIKU_MODEL="$MODEL" ANTHROPIC_DEFAULT_SONNET_MODEL="$MODEL"
      ANTHROPIC_DEFAULT_OPUS_MODEL="$MODEL")
    model_arg=(--model "$MODEL")
  fi
  (cd "$work" && env -i PATH="$PATH" HOME="$home" TERM=dumb LANG=C.UTF-8 \
    ANTHROPIC_BASE_URL="$url" ANTHROPIC_API_KEY=dummy \
    DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 DISABLE_ERROR_REPORTING=1 \
    DISABLE_BUG_COMMAND=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
    "${model_env[@]}" \
    timeout "$timeout" "$claude_bin" -p "${model_arg[@]}" "$prompt" </dev/null)
}

# codex URL PROMPT: codex exec against URL, as a custom Responses provider.
codex() {
  local url=$1 prompt=$2 home work
  read -r home work < <(sandbox codex)
  mkdir -p "$home/.codex"
  local model_arg=(-c "model=\"${MODEL:-corral}\"")
  [ "${MODEL:-}" = default ] && model_arg=()
  (cd "$work" && env -i PATH="$PATH" HOME="$home" CODEX_HOME="$home/.codex" TERM=dumb \
    LANG=C.UTF-8 CORRAL_API_KEY=dummy \
    timeout "$timeout" "$codex_bin" exec --skip-git-repo-check \
    -c model_provider=corral \
    -c 'model_providers.corral.name="corral"' \
    -c "model_providers.corral.base_url=\"$url/v1\"" \
    -c 'model_providers.corral.env_key="CORRAL_API_KEY"' \
    -c 'model_providers.corral.wire_api="responses"' \
    "${model_arg[@]}" \
    "$prompt" </dev/null)
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

case ${1:-} in
install) install ;;
run) need; both "${2:?usage: scripts/agents.sh run URL [PROMPT]}" "${3:-Say hello}" ;;
claude) need; claude "${2:?usage: scripts/agents.sh claude URL [PROMPT]}" "${3:-Say hello}" ;;
codex) need; codex "${2:?usage: scripts/agents.sh codex URL [PROMPT]}" "${3:-Say hello}" ;;
capture) need; capture "${2:-testdata/agents}" ;;
*) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
