#!/usr/bin/env bash
# corral serve with --spec-type none, in llama-server's place for scripts/versus.sh:
# the "llama" column is then corral without speculative decoding, the other its default.
exec "$(dirname "$0")/../bin/corral" serve --spec-type none "$@"
