#!/usr/bin/env bash
# Serve a model with corral: $1 if given (make run passes $(MODEL): the shared
# test model when ../shared/models has it), else a small instruct model that
# corral pull fetches from Hugging Face into the model directory the first
# time (later runs use that copy and need no network).
set -euo pipefail
model="${1:-}"
shift || true
if [[ -z "$model" ]]; then
  id=SmolLM2-135M-Instruct-Q8_0
  if ! ./bin/corral show "$id" >/dev/null 2>&1; then
    ./bin/corral pull bartowski/SmolLM2-135M-Instruct-GGUF:Q8_0 >/dev/null
  fi
  model="$id"
fi
exec ./bin/corral serve -m "$model" "$@"
