#!/usr/bin/env bash
# Serve a model with corral: $1 if given, else the shared test model, else a
# small instruct model downloaded into ./models (needs network access).
set -euo pipefail
model="${1:-}"
shift || true
if [[ -z "$model" ]]; then
  model="models/SmolLM2-135M-Instruct-Q8_0.gguf"
  if [[ ! -f "$model" ]]; then
    mkdir -p models
    url="https://huggingface.co/bartowski/SmolLM2-135M-Instruct-GGUF/resolve/main/SmolLM2-135M-Instruct-Q8_0.gguf"
    echo "downloading $url" >&2
    curl -fL --progress-bar -o "$model.part" "$url"
    mv "$model.part" "$model"
  fi
fi
exec ./bin/corral serve -m "$model" "$@"
