# Sourced by the e2e scripts that run `kvserve serve` (after lib.bash): start/stop a server on a
# free port and talk JSON to it. Every wait is bounded; the server is killed on exit.
SRV_PID=""
server_cleanup() {
  if [ -n "$SRV_PID" ]; then kill -9 "$SRV_PID" 2>/dev/null; wait "$SRV_PID" 2>/dev/null; fi
  rm -rf "$TMP"
}
trap server_cleanup EXIT

# jget FILE EXPR: prints a value of the JSON in FILE (EXPR is Python over `j`).
jget() { python3 -c "import json,sys;j=json.load(open(sys.argv[1]));print($2)" "$1" 2>/dev/null; }

# start_server ARGS...: serves stories260K (or $SERVE_MODEL) on a port the OS picks (--port 0; read back from the
# server's "listening on" line, so no other test's server can take it between a probe and the
# bind), waits (at most 60 s) for /health 200 from that server. Sets PORT and URL.
start_server() {
  PORT=""
  URL=""
  "$KVSERVE" serve -m "${SERVE_MODEL:-$STORIES}" --port 0 "$@" >"$TMP/srv.out" 2>"$TMP/srv.err" &
  SRV_PID=$!
  for _ in $(seq 1 600); do
    if [ -z "$PORT" ]; then
      PORT=$(sed -n 's|^kvserve: listening on http://[^:]*:\([0-9][0-9]*\) .*|\1|p' "$TMP/srv.out" | head -1)
      [ -n "$PORT" ] && URL="http://127.0.0.1:$PORT"
    fi
    if [ -n "$PORT" ]; then
      [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$URL/health")" = 200 ] && return 0
    fi
    kill -0 "$SRV_PID" 2>/dev/null || { start_server_report "the server exited"; return 1; }
    sleep 0.1
  done
  start_server_report "no /health 200 within 60 s"
  return 1
}
# What a failed start looked like, for the test log (a start that failed once in a loaded run
# left nothing to go on).
start_server_report() {
  echo "start_server: $1 (port ${PORT:-not printed}, /health $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "${URL:-http://127.0.0.1:1}/health"))" >&2
  echo "--- server stdout:" >&2; tail -n 5 "$TMP/srv.out" >&2
  echo "--- server stderr:" >&2; tail -n 20 "$TMP/srv.err" >&2
}
# stop_server [SIGNAL]: SIGTERM (or SIGNAL), then waits (at most 30 s) and sets STOP_RC.
stop_server() {
  kill -"${1:-TERM}" "$SRV_PID" 2>/dev/null
  STOP_RC=124
  for _ in $(seq 1 300); do
    if ! kill -0 "$SRV_PID" 2>/dev/null; then wait "$SRV_PID"; STOP_RC=$?; break; fi
    sleep 0.1
  done
  [ "$STOP_RC" = 124 ] && kill -9 "$SRV_PID" 2>/dev/null
  SRV_PID=""
}
# post PATH JSON [METHOD]: body to $TMP/body, prints the status code.
post() {
  curl -s --max-time 60 -o "$TMP/body" -w '%{http_code}' -X "${3:-POST}" -H 'Content-Type: application/json' \
    "$URL$1" -d "$2"
}
