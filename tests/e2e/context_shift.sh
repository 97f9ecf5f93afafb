#!/usr/bin/env bash
# --context-overflow shift (StreamingLLM) and --attention-window through the CLI and the server:
# generation goes far past the context in bounded KV memory, a prompt longer than the context
# keeps its sink tokens, the metrics count the shifts, perplexity streams a text longer than the
# context, a sliding window bounds a request's KV memory, and the two are refused together.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/server_lib.bash"

BYTES_PER_TOKEN=1280  # stories260K, f32: 2 (K, V) x 5 layers x 4 KV heads x 8 dims x 4 bytes

# sample_used_bytes FILE: in the background, appends kvserve:kv_cache_bytes{state="used"} to
# FILE about every 20 ms (SAMPLER holds its pid). max_of FILE: the largest value (-1 for none).
sample_used_bytes() {
  (while :; do
    curl -s --max-time 2 "$URL/metrics" | sed -n 's/^kvserve:kv_cache_bytes{state="used"} \([0-9.e+]*\)/\1/p'
    sleep 0.02
  done) >"$1" &
  SAMPLER=$!
}
max_of() { python3 -c "import sys; v=[float(x) for x in open(sys.argv[1]).read().split()]; print(int(max(v)) if v else -1)" "$1"; }

# ---- kvserve generate: 5,000 tokens at context 2048 ----
"$KVSERVE" generate -m "$STORIES" --ctx 2048 --context-overflow shift -n 5000 --ignore-eos --temp 0 \
  -p "Once upon a time" >"$TMP/g.out" 2>"$TMP/g.err"
check "generate: shift runs 5,000 tokens" grep -q "generated tokens: 5000 " "$TMP/g.err"
peak=$(sed -n 's/.*KV bytes peak: \([0-9]*\).*/\1/p' "$TMP/g.err")
check "generate: KV bytes peak within one context ($peak <= $((2048 * BYTES_PER_TOKEN)))" \
  test -n "$peak" -a "${peak:-0}" -le $((2048 * BYTES_PER_TOKEN)) -a "${peak:-0}" -gt 0
check "generate: the context shifted (>= 3 times)" grep -Eq "context shifts: ([3-9]|[1-9][0-9])" "$TMP/g.err"
"$KVSERVE" generate -m "$STORIES" --ctx 64 --context-overflow shift --attention-window 32 -n 8 -p "Hi" \
  >/dev/null 2>"$TMP/g2.err"
check "generate: shift with a window is refused" grep -q "window" "$TMP/g2.err"

# ---- kvserve perplexity: a chunk four times the context, streamed through shifts ----
"$KVSERVE" perplexity -m "$STORIES" -f "$SHARED/golden/stories-corpus.txt" -c 512 --ctx 128 \
  >"$TMP/p1.out" 2>"$TMP/p1.err"
check "perplexity: a chunk longer than the context fails without shift" grep -q "context" "$TMP/p1.err"
"$KVSERVE" perplexity -m "$STORIES" -f "$SHARED/golden/stories-corpus.txt" -c 512 --ctx 128 \
  --context-overflow shift >"$TMP/p2.out" 2>"$TMP/p2.err"
ppl=$(sed -n 's/^PPL = \([0-9.]*\)/\1/p' "$TMP/p2.out")
check "perplexity: shift gives a finite PPL ($ppl)" python3 -c "import sys; v=float(sys.argv[1]); sys.exit(0 if 1 < v < 20 else 1)" "${ppl:-0}"

# ---- the server: a request generates 1,000 tokens at context 256 ----
if ! start_server --ctx 256 --context-overflow shift --n-keep 4; then
  fail "server (shift) did not start"; cat "$TMP/srv.err"; finish; exit 1
fi
check "print-config shows n_keep and attention_window" \
  sh -c "'$KVSERVE' serve -m '$STORIES' --context-overflow shift --n-keep 6 --print-config | grep -q 'n_keep: 6'"
sample_used_bytes "$TMP/used"
code=$(post /v1/completions '{"prompt": "Once upon a time", "max_tokens": 1000, "ignore_eos": true, "temperature": 0}')
kill "$SAMPLER" 2>/dev/null
wait "$SAMPLER" 2>/dev/null
check "server: 1,000 tokens past a 256-token context (200)" test "$code" = 200
check "server: all of them generated" test "$(jget "$TMP/body" 'j["usage"]["completion_tokens"]')" = 1000
max_used=$(max_of "$TMP/used")
check "server: KV bytes in use never above one context ($max_used <= $((256 * BYTES_PER_TOKEN)))" \
  test "$max_used" -ge 0 -a "$max_used" -le $((256 * BYTES_PER_TOKEN))
curl -s "$URL/metrics" >"$TMP/metrics"
shifts=$(sed -n 's/^kvserve:context_shifts_total \([0-9.e+]*\)/\1/p' "$TMP/metrics")
check "server: kvserve:context_shifts_total counts the shifts ($shifts)" \
  python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 6 else 1)" "${shifts:-0}"
check "server: the access log names the shifts" grep -q "context_shifts=" "$TMP/srv.err"
LONG=$(python3 -c 'print(" ".join(["Once upon a time there was a little dog."] * 40))')
BODY=$(python3 -c 'import json,sys;print(json.dumps({"prompt":sys.argv[1],"max_tokens":16,"temperature":0}))' "$LONG")
check "server: a prompt longer than the context is answered" test "$(post /v1/completions "$BODY")" = 200
check "server: cut to the context" test "$(jget "$TMP/body" 'j["usage"]["prompt_tokens"]')" = 256
stop_server
check "clean shutdown" test "$STOP_RC" = 0

# ---- the server with a sliding window ----
if ! start_server --ctx 4096 --attention-window 32; then
  fail "server (window) did not start"; cat "$TMP/srv.err"; finish; exit 1
fi
sample_used_bytes "$TMP/used_w"
code=$(post /v1/completions '{"prompt": "Once upon a time", "max_tokens": 3000, "ignore_eos": true, "temperature": 0}')
kill "$SAMPLER" 2>/dev/null
wait "$SAMPLER" 2>/dev/null
check "window: a 3,000-token request answers" test "$code" = 200
max_used=$(max_of "$TMP/used_w")
# The window (32), a partial block at each end: 4 blocks of 16 tokens.
check "window: KV bytes in use stay O(window) ($max_used <= $((4 * 16 * BYTES_PER_TOKEN)))" \
  test "$max_used" -ge 0 -a "$max_used" -le $((4 * 16 * BYTES_PER_TOKEN))
stop_server
"$KVSERVE" serve -m "$STORIES" --context-overflow shift --attention-window 32 --port 0 >/dev/null 2>"$TMP/bad"
check "serve: shift with a window is refused at start-up" grep -q "window" "$TMP/bad"
finish
