#!/usr/bin/env bash
# KV capacity through the server (issue 6, item 6), small: at one --kv-memory (1 MiB) a q8_0
# KV cache keeps more 500-token sequences running at once than an f32 one. Runs
# bench/kv_capacity.sh on stories260K (1280 bytes/token for f32, 400 for q8_0: 51 and 163
# blocks of 16 tokens, so 1 and 5 sequences of 32 blocks fit) with 16 concurrent requests of
# 100 prompt + 400 generated tokens, and compares the counts it read from /metrics.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/server_lib.bash"  # jget
BENCH="$(dirname "$0")/../../bench/kv_capacity.sh"

# One engine thread and a 5 ms /metrics poll: a decode step of this model takes about a
# millisecond, so the 400-step first wave is sampled dozens of times.
bash "$BENCH" -b "$KVSERVE" -m "$STORIES" --kv-memory 1MiB --ctx 512 --prompt-tokens 100 --gen 400 \
  --requests 16 --types "f32 q8_0" --threads 1 --poll-ms 5 --out "$TMP/cap" >"$TMP/table" 2>"$TMP/log"
rc=$?
cat "$TMP/table" "$TMP/log"
check "bench/kv_capacity.sh exits 0 ($rc)" test "$rc" = 0
run() { jget "$TMP/cap/$1.run.json" "j['$2']"; }
plan() { jget "$TMP/cap/$1.plan.json" "j['$2']"; }
for t in f32 q8_0; do
  check "$t: all 16 requests answered with 100 + 400 tokens" test "$(run $t ok)" = 16
  check "$t: at least one 500-token sequence ran ($(run $t steady_running))" test "$(run $t steady_running)" -ge 1
  check "$t: no more ran at full length than the pool fits ($(run $t steady_running) <= $(plan $t max_sequences))" \
    test "$(run $t steady_running)" -le "$(plan $t max_sequences)"
done
check "the planner gives q8_0 more blocks than f32 ($(plan q8_0 num_blocks) > $(plan f32 num_blocks))" \
  test "$(plan q8_0 num_blocks)" -gt "$(plan f32 num_blocks)"
check "q8_0 keeps more sequences running at full length than f32 ($(run q8_0 steady_running) > $(run f32 steady_running))" \
  test "$(run q8_0 steady_running)" -gt "$(run f32 steady_running)"
check "q8_0 runs more at its peak than f32 ($(run q8_0 peak_running) > $(run f32 peak_running))" \
  test "$(run q8_0 peak_running)" -gt "$(run f32 peak_running)"
check "f32's pool was too small for the load: it preempted ($(run f32 preemptions_total))" \
  test "$(run f32 preemptions_total)" -gt 0
finish
