#!/usr/bin/env bash
# A client that goes away before its answer: the server notices (non-streamed requests too),
# cancels the request and frees its KV blocks at once, long before the request would have
# finished. Recompute mode (--no-cache) makes a 2,000-token request take many seconds.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/serve_common.bash"

if ! start_server --no-cache --threads 1 --log-format json; then
  fail "server did not become healthy"; cat "$TMP/srv.err"; finish; exit 1
fi
LONG='"prompt":"Once upon a time","max_tokens":2000,"ignore_eos":true'

# kill_after SECONDS CURL_ARGS...: runs curl in the background and kills it after SECONDS.
kill_after() {
  local s="$1"; shift
  curl -s -o /dev/null "$@" &
  local pid=$!
  sleep "$s"
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}

# --- non-streamed ------------------------------------------------------------------------
kill_after 1.5 --max-time 120 "$URL/generate" -d "{$LONG}" &
bg=$!
check "the request runs (num_requests_running 1)" wait_metric kvserve:num_requests_running 1 30
wait "$bg"
check "non-streamed: running back to 0 after the client is killed" wait_metric kvserve:num_requests_running 0 50
check "non-streamed: KV usage back to 0" wait_metric kvserve:kv_cache_usage_perc 0 50
check "non-streamed: counted as 499 (client closed request)" wait_metric 'kvserve:requests_total{status="499"}' 1 50
line=$(grep '"status":499' "$TMP/srv.err" | head -1)
echo "$line" >"$TMP/line.json"
check "access log: finish_reason cancelled" test "$(jget "$TMP/line.json" 'j["finish_reason"]')" = cancelled
gen=$(jget "$TMP/line.json" 'j["generated_tokens"]')
check "cancelled long before max_tokens ($gen of 2000 tokens)" test "${gen:-2000}" -lt 2000
check "healthy after the disconnect" test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$URL/health")" = 200

# expect_cancelled WHAT RUNNING BODY: posts BODY to /v1/completions, waits until RUNNING engine
# requests run, kills the client and expects every one cancelled and its KV blocks freed.
expect_cancelled() {
  kill_after 1.5 -N --max-time 120 "$URL/v1/completions" -d "$3" &
  local bg=$!
  check "$1: runs ($2 engine requests)" wait_metric kvserve:num_requests_running "$2" 30
  wait "$bg"
  check "$1: running back to 0 after the client is killed" wait_metric kvserve:num_requests_running 0 50
  check "$1: KV usage back to 0" wait_metric kvserve:kv_cache_usage_perc 0 50
}

# --- streamed ----------------------------------------------------------------------------
expect_cancelled streamed 1 "{$LONG,\"stream\":true}"
n=$(grep -c '"finish_reason":"cancelled"' "$TMP/srv.err")
check "streamed: access log shows a second cancelled request ($n)" test "$n" -ge 2

# --- n choices: every one is cancelled with its client, streamed or not --------------------
expect_cancelled "n = 3, whole" 3 "{$LONG,\"n\":3}"
expect_cancelled "n = 3, streamed" 3 "{$LONG,\"n\":3,\"stream\":true}"

# --- the server still answers, and a client that stays gets its full answer ---------------
code=$(post /generate '{"prompt":"Once upon a time","max_tokens":8,"temperature":0}')
check "a following request completes (200)" test "$code" = 200
check "it generated 8 tokens" test "$(jget "$TMP/body" 'j["tokens"]')" = 8
stop_server
check "SIGTERM exits 0" test "$STOP_RC" = 0
finish
