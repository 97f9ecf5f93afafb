#!/usr/bin/env bash
# Prefix caching over HTTP: greedy outputs with a hit equal those of a --prefix-cache off server
# (completions and chat, hits ending on a block boundary, prompts shorter than a block),
# usage.prompt_tokens_details.cached_tokens, cache_salt isolation, the /cache admin API and the
# prefix-cache metrics (through promtool); and on tiny-llama (head_dim 64) with q8_0 and q4_0 K/V,
# whose blocks are tiled on AVX-512 CPUs (kernels/kv_tiles.h), hits give the texts of no cache.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/server_lib.bash"

SHARED_TEXT="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw a big red ball under a tree."
SUFFIXES=(" She ran" " Her mom said" " A dog came" " It was")
# cmpl PROMPT [SALT]: a greedy /v1/completions body.
cmpl() { python3 -c 'import json,sys;b={"prompt":sys.argv[1],"max_tokens":20,"temperature":0};
if len(sys.argv)>2: b["cache_salt"]=sys.argv[2]
print(json.dumps(b))' "$@"; }
chat() { python3 -c 'import json,sys;print(json.dumps({"messages":[{"role":"system","content":sys.argv[1]},{"role":"user","content":sys.argv[2]}],"max_tokens":20,"temperature":0}))' "$@"; }

# run_completions TAG: the shared text with each suffix against $URL; texts to $TMP/TAG.texts,
# cached counts to $TMP/TAG.cached (both started afresh).
run_completions() {
  : >"$TMP/$1.texts"; : >"$TMP/$1.cached"
  for s in "${SUFFIXES[@]}"; do
    post /v1/completions "$(cmpl "$SHARED_TEXT$s")" >/dev/null
    jget "$TMP/body" 'j["choices"][0]["text"]' >>"$TMP/$1.texts"
    jget "$TMP/body" 'j["usage"]["prompt_tokens_details"]["cached_tokens"]' >>"$TMP/$1.cached"
  done
}

# run_all TAG: every request of the test against $URL, appended to run_completions' files.
run_all() {
  run_completions "$1"
  for u in "Tell me a story." "Tell me a joke."; do
    post /v1/chat/completions "$(chat "$SHARED_TEXT" "$u")" >/dev/null
    jget "$TMP/body" 'j["choices"][0]["message"]["content"]' >>"$TMP/$1.texts"
    jget "$TMP/body" 'j["usage"]["prompt_tokens_details"]["cached_tokens"]' >>"$TMP/$1.cached"
  done
  # Prompts of exactly 32 and 48 tokens (block boundaries) and of 5 (under a block), twice each.
  for n in 32 48 5; do
    ids=$(python3 -c "print(list(range(4 * $n, 5 * $n)))")  # no prompt shares a prefix with another
    for _ in 1 2; do
      post /v1/completions "{\"prompt\": $ids, \"max_tokens\": 12, \"temperature\": 0}" >/dev/null
      jget "$TMP/body" 'j["choices"][0]["text"]' >>"$TMP/$1.texts"
      jget "$TMP/body" 'j["usage"]["prompt_tokens_details"]["cached_tokens"]' >>"$TMP/$1.cached"
    done
  done
}

if ! start_server --prefix-cache off; then fail "server (prefix cache off) did not start"; cat "$TMP/srv.err"; finish; exit 1; fi
run_all off
stop_server
# 5 MiB = 256 blocks, twice one full-context sequence: pins may never take the blocks such a
# sequence needs, so with the default budget (exactly one) nothing could be pinned.
if ! start_server --log-level debug --kv-memory 5MiB; then fail "server (prefix cache on) did not start"; cat "$TMP/srv.err"; finish; exit 1; fi
run_all on

check "greedy texts equal with and without the prefix cache" cmp -s "$TMP/off.texts" "$TMP/on.texts"
check "cache off reports no cached tokens" test "$(sort -u "$TMP/off.cached")" = 0
mapfile -t C <"$TMP/on.cached"
check "first request has no hit" test "${C[0]}" = 0
check "later completions hit the shared prefix" test "${C[1]}" -ge 16 -a "${C[2]}" -ge 16 -a "${C[3]}" -ge 16
check "second chat hits the system prompt" test "${C[5]}" -ge 16
check "32-token repeat hits 16 (the last token is always computed)" test "${C[6]}" = 0 -a "${C[7]}" = 16
check "48-token repeat hits 32" test "${C[8]}" = 0 -a "${C[9]}" = 32
check "5-token prompt never hits" test "${C[10]}" = 0 -a "${C[11]}" = 0

# cache_salt isolates tenants.
post /v1/completions "$(cmpl "$SHARED_TEXT A cat" tenant-a)" >/dev/null
check "a new tenant does not hit another's blocks" test "$(jget "$TMP/body" 'j["usage"]["prompt_tokens_details"]["cached_tokens"]')" = 0
post /v1/completions "$(cmpl "$SHARED_TEXT A bird" tenant-a)" >/dev/null
check "the same tenant hits its own blocks" test "$(jget "$TMP/body" 'j["usage"]["prompt_tokens_details"]["cached_tokens"]')" -ge 16

# Admin API.
check "GET /cache/stats" test "$(curl -s -o "$TMP/stats" -w '%{http_code}' "$URL/cache/stats")" = 200
check "stats show cached blocks" test "$(jget "$TMP/stats" 'j["blocks"]["cached"] > 0 and j["enabled"]')" = True
check "stats show a hit rate" test "$(jget "$TMP/stats" '0 < j["hit_rate"]["since_start"] <= 1')" = True
# Byte counts are JSON integers (5242880, not 5242880.0: a Go int64 field refuses the latter).
check "stats: bytes are integers, blocks x block_bytes" test "$(jget "$TMP/stats" \
  'all(type(j["bytes"][k]) is int and j["bytes"][k] == j["blocks"][k] * j["block_bytes"] for k in ("total","used","cached","pinned"))')" = True
PIN_BODY="{\"prompt\": \"$SHARED_TEXT\"}"
check "POST /cache/pin" test "$(post /cache/pin "$PIN_BODY")" = 200
PINNED=$(jget "$TMP/body" 'j["pinned_tokens"]')
check "pin covers whole blocks" test "$PINNED" -ge 16 -a $((PINNED % 16)) = 0
curl -s -o "$TMP/stats" "$URL/cache/stats"
check "stats count the pinned blocks" test "$(jget "$TMP/stats" 'j["blocks"]["pinned"]')" = $((PINNED / 16))
check "stats give the pin cap (0.2 of 256 blocks)" test "$(jget "$TMP/stats" 'j["blocks"]["pinned_cap"]')" = 51
check "POST /cache/flush" test "$(post /cache/flush '{}')" = 200
# As documented (curl -X POST .../cache/flush): no body, no Content-Length, answered at once.
check "POST /cache/flush without a body" \
  test "$(curl -s --max-time 10 -o "$TMP/body" -w '%{http_code}' -X POST "$URL/cache/flush")" = 200
check "... says how many blocks it dropped" test "$(jget "$TMP/body" 'j["flushed_blocks"]')" = 0
curl -s -o "$TMP/stats" "$URL/cache/stats"
check "flush drops cached blocks but not pinned ones" \
  test "$(jget "$TMP/stats" 'j["blocks"]["cached"] == 0 and j["blocks"]["pinned"] > 0')" = True
post /v1/completions "$(cmpl "$SHARED_TEXT$s")" >/dev/null
check "the pinned prefix still hits after a flush" \
  test "$(jget "$TMP/body" 'j["usage"]["prompt_tokens_details"]["cached_tokens"]')" -ge "$PINNED"
check "DELETE /cache/pin" test "$(post /cache/pin "$PIN_BODY" DELETE)" = 200
check "unpin releases what pin took" test "$(jget "$TMP/body" 'j["unpinned_tokens"]')" = "$PINNED"
check "re-pin" test "$(post /cache/pin "$PIN_BODY")" = 200
check "DELETE /cache/pin {all: true} removes every pin" test "$(post /cache/pin '{"all": true}' DELETE)" = 200
check "... and says how many blocks" test "$(jget "$TMP/body" 'j["unpinned_blocks"]')" = $((PINNED / 16))
curl -s -o "$TMP/stats" "$URL/cache/stats"
check "no pins left" test "$(jget "$TMP/stats" 'j["blocks"]["pinned"]')" = 0
check "bad pin body is a 400" test "$(post /cache/pin '{"prompt": 5')" = 400

# Metrics.
curl -s "$URL/metrics" >"$TMP/metrics"
for m in 'kvserve:prefix_cache_queries_total' 'kvserve:prefix_cache_hits_total' 'kvserve:kv_cache_evictions_total' \
  'kvserve:kv_blocks{state="cached"}' 'kvserve:kv_blocks{state="pinned"}' 'kvserve:kv_blocks{state="free"}' \
  'kvserve:kv_blocks{state="used"}' 'kvserve:kv_block_lifetime_seconds_bucket'; do
  check "metric $m" grep -qF "$m" "$TMP/metrics"
done
check "hits counted in tokens" test "$(awk '/^kvserve:prefix_cache_hits_total /{print ($2 > 0)}' "$TMP/metrics")" = 1
if command -v promtool >/dev/null; then
  promtool check metrics <"$TMP/metrics" >"$TMP/promtool" 2>&1
  # promtool's style lint objects to colons in names, which the required metric names have.
  check "promtool: nothing but the colon lint" \
    test -z "$(grep -v "metric names should not contain ':'" "$TMP/promtool" | grep -v '^$')"
fi
check "cache events in the debug log" grep -q "kv cache: " "$TMP/srv.err"
stop_server
check "clean shutdown" test "$STOP_RC" = 0

# Tiled (or, without AVX-512, row) q8_0 / q4_0 blocks shared between requests.
for kv in q8_0 q4_0; do
  for pc in off on; do
    if ! SERVE_MODEL="$SHARED/models/tiny/tiny-llama-f32.gguf" start_server --kv-type "$kv" --prefix-cache "$pc"; then
      fail "tiny-llama server ($kv, prefix cache $pc) did not start"; cat "$TMP/srv.err"; continue
    fi
    run_completions "tiny-$kv-$pc"
    stop_server
  done
  check "tiny-llama $kv K/V: greedy texts equal with and without the prefix cache" \
    cmp -s "$TMP/tiny-$kv-off.texts" "$TMP/tiny-$kv-on.texts"
  check "tiny-llama $kv K/V: later requests hit the shared prefix" \
    test "$(tail -n 3 "$TMP/tiny-$kv-on.cached" | sort -n | head -1)" -ge 16
done
finish
