#!/usr/bin/env bash
# Routing among three corral processes (127.0.0.2, .3, .4) through the
# Inference Extension's endpoint picker (deploy/picker, the real picker at
# the version the manifests pin) against round robin: 32 conversations of
# 4 turns sharing a 1,000-token system prompt, 8 at once; prompt tokens
# served from cache and TTFT p50/p99 for round robin, the picker's queue +
# KV-cache scorers, those with its prefix scorer, and those with the
# precise prefix-cache scorer on the processes' KV events (--kv-events,
# llm-d's indexer: deploy/picker/precise.go); then round robin and the
# prefix rows with one process kept busy by a backlog of long prompts
# (requests per process). Prints a Markdown table.
#
# usage: scripts/route.sh [route flags, e.g. -conversations 8]
# env:   MODEL (default: a synthetic model with TinyStories' tokenizer and
#        a 32k context, written once to $TMPDIR)
set -euo pipefail
cd "$(dirname "$0")/.."
corral=$PWD/bin/corral
[ -x "$corral" ] || make build >/dev/null
model=${MODEL:-${TMPDIR:-/tmp}/corral-synth-route.gguf}
[ -f "$model" ] || "$corral" synth --shape "embd=256,layers=8,heads=8,kv=4,ff=768,vocab=2048,ctx=32768,type=q8_0" \
  --vocab ../shared/models/tinystories-656k-q8_0.gguf -o "$model" >/dev/null
cd deploy/picker
go run ./cmd/route -corral "$corral" -model "$model" "$@"
