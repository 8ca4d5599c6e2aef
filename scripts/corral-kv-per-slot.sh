#!/usr/bin/env bash
# corral serve with --kv-per-slot, in llama-server's place for scripts/versus.sh:
# the "llama" column is then corral with a KV buffer per slot, the other the default pool.
exec "$(dirname "$0")/../bin/corral" serve --kv-per-slot "$@"
