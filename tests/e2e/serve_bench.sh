#!/usr/bin/env bash
# kvserve bench --server: the load generator against a stories260K server, tiny numbers; checks
# the report's shape (every level, percentiles, no errors, tokens counted), the shared-prefix
# workload's cached share, the multi-turn report and the exit code against a dead server.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/serve_common.bash"

if ! start_server; then
  fail "server did not become healthy"; cat "$TMP/srv.err"; finish; exit 1
fi
"$KVSERVE" bench --server "$URL" --concurrency 1,3 --requests 6 --prompt-words 20 --gen 8 --json >"$TMP/sweep.json" 2>"$TMP/err"
check "sweep exits 0" test $? -eq 0
check "sweep: two levels, concurrency 1 and 3" test "$(jget "$TMP/sweep.json" '[l["concurrency"] for l in j["levels"]]')" = "[1, 3]"
check "sweep: 6 requests per level, no errors" \
  test "$(jget "$TMP/sweep.json" '[(l["requests"], l["errors"]) for l in j["levels"]]')" = "[(6, 0), (6, 0)]"
check "sweep: 6 x 8 generated tokens per level (from usage)" \
  test "$(jget "$TMP/sweep.json" '[l["completion_tokens"] for l in j["levels"]]')" = "[48, 48]"
check "sweep: throughput and TTFT percentiles reported" \
  test "$(jget "$TMP/sweep.json" 'all(l["gen_tok_per_s"] > 0 and l["req_per_s"] > 0 and l["ttft"]["count"] == 6 and 0 < l["ttft"]["p50_ms"] <= l["ttft"]["p99_ms"] for l in j["levels"])')" = True
# A gap per chunk with text after a request's first: at most 7 per 8-token request, fewer when the
# server merged tokens into one chunk (a loaded machine can deliver all 8 in one, so no minimum).
check "sweep: ITL from at most 7 gaps per request, percentiles ordered" \
  test "$(jget "$TMP/sweep.json" 'all(0 <= l["itl"]["count"] <= 6 * 7 and (l["itl"]["count"] == 0 or 0 <= l["itl"]["p50_ms"] <= l["itl"]["p99_ms"]) for l in j["levels"])')" = True
check "sweep: the server counted the same requests" test "$(metric kvserve:generation_tokens_total)" = 96

"$KVSERVE" bench --server "$URL" --concurrency 2 --requests 4 --prompt-words 20 --gen 8 >"$TMP/table" 2>/dev/null
check "table has the header" grep -q "TTFT p50" "$TMP/table"

"$KVSERVE" bench --server "$URL" --concurrency 2 --requests 6 --shared-prefix-words 120 --suffix-words 5 --gen 4 --json >"$TMP/prefix.json" 2>/dev/null
check "shared prefix: mode and no errors" test "$(jget "$TMP/prefix.json" 'j["mode"], j["levels"][0]["errors"]')" = "shared_prefix 0"
share=$(jget "$TMP/prefix.json" 'j["levels"][0]["cached_share"]')
check "shared prefix: the server reports cached tokens (share $share)" python3 -c "import sys; sys.exit(not float('$share') > 0.3)"

"$KVSERVE" bench --server "$URL" --concurrency 2 --turns 3 --prompt-words 8 --gen 6 --seed 7 --json >"$TMP/turns.json" 2>/dev/null
check "turns: 3 turns reported, 2 requests each, no errors" \
  test "$(jget "$TMP/turns.json" '[(t["turn"], t["requests"], t["errors"]) for t in j["levels"][0]["turns"]]')" = "[(1, 2, 0), (2, 2, 0), (3, 2, 0)]"
check "turns: later turns reuse the conversation's cached prefix" \
  test "$(jget "$TMP/turns.json" 'j["levels"][0]["turns"][2]["cached_share"] > 0')" = True

stop_server
"$KVSERVE" bench --server "$URL" --concurrency 1 --requests 2 --gen 4 --json >/dev/null 2>"$TMP/dead"
check "a dead server: exit 1 naming the failure" test $? -eq 1
check "the error is a transport error" grep -q "transport error" "$TMP/dead"
"$KVSERVE" bench --server "$URL" --concurrency 0 >/dev/null 2>&1
check "bad --concurrency exits 2" test $? -eq 2
finish
