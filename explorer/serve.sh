# Sourced by run-e2e.sh and bench/explorer/run.sh: starts `sightline serve` on a free port and stops it.
#   explorer_serve SIGHTLINE_BINARY PROFILE_ROOT UI_DIR LOG   sets server_pid and url, the URL the server
#                                                             printed (http://127.0.0.1:PORT/?token=...: the
#                                                             Explorer needs the token for uploads and deletes)
#   explorer_stop                                             stops it (safe to call when none runs)
# Exits with the server's log on stderr when it does not start within 10 s.

server_pid=""
url=""

explorer_serve() {
  local sightline=$1 root=$2 ui=$3 log=$4
  "$sightline" serve "$root" --port 0 --ui "$ui" > "$log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 100); do
    url=$(grep -o 'http://127\.0\.0\.1:[0-9]*/\(?token=[0-9a-zA-Z_-]*\)\?' "$log" | head -n 1 || true)
    [[ -n "$url" ]] && return 0
    kill -0 "$server_pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.1
  done
  echo "the server did not start within 10 s" >&2
  cat "$log" >&2
  exit 1
}

explorer_stop() {
  if [[ -n "$server_pid" ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
