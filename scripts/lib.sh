# Shared by the benchmark scripts (source it): one server at a time in the
# background, its pid in $server.

# healthy NAME PORT LOG: wait until the server just started ($server)
# answers /health on PORT; exit when it dies or stays unhealthy for 120 s.
healthy() {
  local name=$1 port=$2 log=$3
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0
    kill -0 "$server" 2>/dev/null || { echo "$name exited; see $log" >&2; exit 1; }
    sleep 0.2
  done
  echo "$name not healthy after 120 s" >&2
  exit 1
}

# stop: end the server, if any, and wait for it.
stop() { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }
