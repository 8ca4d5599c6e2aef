#!/usr/bin/env bash
# corral serve with --spec-type none, in llama-server's place for scripts/versus.sh:
# the "llama" column is then corral without speculative decoding. The flag comes last,
# so that SERVE_ARGS="--spec-type ngram" turns speculation on in the other column only;
# a draft model given to both columns (the draft row's -md FILE) is dropped here.
args=()
while [ $# -gt 0 ]; do
  case $1 in
  -md | --model-draft | --spec-draft-model) shift ;;
  *) args+=("$1") ;;
  esac
  shift
done
exec "$(dirname "$0")/../bin/corral" serve "${args[@]}" --spec-type none
