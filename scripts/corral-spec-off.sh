#!/usr/bin/env bash
# corral serve with --spec-type none, in llama-server's place for scripts/versus.sh:
# the "llama" column is then corral without speculative decoding. The flag comes last,
# so that SERVE_ARGS="--spec-type ngram" turns speculation on in the other column only.
exec "$(dirname "$0")/../bin/corral" serve "$@" --spec-type none
