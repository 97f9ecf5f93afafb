#!/usr/bin/env bash
# kvserve plan: the guide's example, figures from a model file, JSON, warnings, the failure when
# one full-length sequence cannot fit, and serve refusing such a configuration at start-up.
source "$(dirname "$0")/lib.bash"

out=$("$KVSERVE" plan --layers 1 --kv-heads 16 --head-dim 64 --seq-len 2048 --batch 32 --kv-type f16 2>&1)
check "guide example exits 0" test $? -eq 0
check "guide example: 256 MiB per layer for K and V" grep -q "256 MiB per layer" <<<"$out"

# stories260K: 5 layers x 4 KV heads x 8 dims, f32: 5*4*8*4*2 = 1280 bytes per token.
"$KVSERVE" plan -m "$STORIES" --ctx 512 --memory 3MiB --available 5MiB --json >"$TMP/p.json" 2>"$TMP/p.err"
check "model plan exits 0" test $? -eq 0
jq_() { python3 -c "import json,sys;j=json.load(open('$TMP/p.json'));print($1)"; }
check "1280 bytes per token" test "$(jq_ 'j["bytes_per_token"]')" = 1280
check "a 512-token sequence is 32 blocks of 20 KiB" test "$(jq_ 'j["blocks_per_sequence"], j["block_bytes"]')" = "32 20480"
check "3 MiB holds 153 blocks = 4 full-length sequences" test "$(jq_ 'j["num_blocks"], j["max_sequences"]')" = "153 4"
check "budget 60% of the memory, weights fit: no warning" test ! -s "$TMP/p.err"
check "left beside the KV: available - budget" test "$(jq_ 'j["left_bytes"]')" = $((2 * 1048576))
check "weights are the file's tensor bytes" test "$(jq_ 'j["model"]["weight_bytes"] > 0')" = True

"$KVSERVE" plan -m "$STORIES" --ctx 512 --memory-fraction 0.3 --available 10MiB >"$TMP/w.out" 2>"$TMP/w.err"
check "30% of memory warns" grep -q "^warning: the KV budget is 30.0%" "$TMP/w.err"
check "text output names the concurrent sequences" grep -q "max concurrent full-length sequences: 4" "$TMP/w.out"

"$KVSERVE" plan -m "$STORIES" --memory 1MiB --kv-type-k q8_0 --kv-type-v q4_0 --json >"$TMP/q.json" 2>/dev/null
check "K8V4 on head_dim 8: 5*4*(10+6) = 320 bytes per token" \
  test "$(python3 -c "import json;print(json.load(open('$TMP/q.json'))['bytes_per_token'])")" = 320

"$KVSERVE" plan -m "$STORIES" --memory 1MiB >"$TMP/f.out" 2>"$TMP/f.err"
check "model context 2048 in 1 MiB f32 cannot fit: exit 1" test $? -eq 1
check "the failure states the figures" grep -q "2048 tokens needs 128 blocks" "$TMP/f.err"
"$KVSERVE" plan --layers 2 >/dev/null 2>&1
check "an incomplete shape exits 2" test $? -eq 2
"$KVSERVE" plan --layers 2 --kv-heads 2 --head-dim 64 --seq-len 10 --kv-type q5_1 >/dev/null 2>&1
check "an unknown KV type exits 2" test $? -eq 2

"$KVSERVE" serve -m "$STORIES" --port 0 --kv-memory 1MiB >"$TMP/s.out" 2>"$TMP/s.err"
check "serve refuses a KV budget below one full-length sequence (exit 1)" test $? -eq 1
check "serve's refusal gives the numbers" grep -q "1280 bytes per token.*lower --ctx to at most 816" "$TMP/s.err"
finish
