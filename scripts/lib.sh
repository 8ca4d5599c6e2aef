# Shared by the scripts (source it): one server at a time in the
# background, its pid in $server (the benchmark scripts), and the last step
# of building a ggml backend module (llama-cpp.sh, backend.sh).

# healthy NAME PORT LOG: wait until the server just started ($server)
# answers /health on PORT; exit when it dies or stays unhealthy for 120 s.
healthy() { up "$@" || exit 1; }

# up NAME PORT LOG: healthy, returning 1 instead of exiting.
up() {
  local name=$1 port=$2 log=$3
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0
    kill -0 "$server" 2>/dev/null || { echo "$name exited; see $log" >&2; return 1; }
    sleep 0.2
  done
  echo "$name not healthy after 120 s" >&2
  return 1
}

# ask_each NP OUT ASK CASE...: with a server up ($server), ask each case
# ("PROMPT|N") with the function ASK PROMPT N, into OUTi.alone (NP 1: one
# at a time) or OUTi.batched (all at once), i counting the cases from 1.
ask_each() {
  local np=$1 out=$2 ask=$3 i=0 c prompt n j
  shift 3
  for c in "$@"; do
    i=$((i + 1))
    IFS='|' read -r prompt n <<<"$c"
    if [ "$np" = 1 ]; then "$ask" "$prompt" "$n" >"$out$i.alone"; else "$ask" "$prompt" "$n" >"$out$i.batched" & fi
  done
  for j in $(jobs -p | grep -v "^$server$" || true); do wait "$j"; done
}

# stop: end the server, if any, and wait for it.
stop() { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }

# ggml_module SO: make the ggml backend module SO (GGML_BACKEND_DL) load
# into corral: its need of libggml-base.so and its rpath removed, so that
# its references to ggml-base resolve, when corral dlopens it, to the one
# copy linked into the binary (-Wl,--export-dynamic in llama/llama.go).
ggml_module() {
  local n
  for n in $(patchelf --print-needed "$1"); do
    case "$n" in libggml-base.so*) patchelf --remove-needed "$n" "$1" ;; esac
  done
  patchelf --remove-rpath "$1"
}
