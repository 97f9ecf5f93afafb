#!/usr/bin/env bash
# `kvserve bench`: --json gives one object with every figure; the table names them; bad flags
# exit non-zero. Sizes are tiny: this checks the command, not the machine's speed.
source "$(dirname "$0")/lib.bash"
"$KVSERVE" bench -m "$STORIES" --prompt 64 --gen 8 --batch 1,2 --repeat 1 --bw-buffer 64MiB --json \
  >"$TMP/json" 2>"$TMP/json.err"
check "bench --json exits 0" test $? -eq 0
check "bench --json is one JSON object with every field" python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["prefill"]["tokens"] == 64 and j["prefill"]["tok_per_s"]["best"] > 0
assert [d["batch"] for d in j["decode"]] == [1, 2]
assert all(d["tok_per_s"]["best"] > 0 and d["steps"] == 8 and d["context"] == 64 for d in j["decode"])
assert j["weight_bytes_per_token"] > 0
assert j["bandwidth"]["gb_per_s"] > 0 and j["roofline"]["tok_per_s"] > 0
assert j["roofline"]["decode_batch1_fraction"] > 0
assert j["roofline"]["decode_batch1_bandwidth_fraction"] > j["roofline"]["decode_batch1_fraction"]
assert j["bandwidth"]["around_decode_batch1"] is True and len(j["bandwidth"]["pass_gb_per_s"]) == j["bandwidth"]["passes"]
assert all(d["kv_bytes_per_step"] > 0 and d["gb_per_s"] > 0 for d in j["decode"])
assert j["decode"][0]["vs_batch1"] == 1 and j["decode"][1]["vs_batch1"] > 0
for k in ("cpu_model", "logical_cpus", "threads", "isa"): assert k in j["machine"]
assert "cache_compare" not in j
' "$TMP/json"
"$KVSERVE" bench -m "$STORIES" --prompt 32 --gen 4 --batch 1,2 --repeat 1 --no-bandwidth --phases --cache-compare --json \
  >"$TMP/phases" 2>/dev/null
check "bench --phases --json exits 0" test $? -eq 0
check "bench --phases gives each decode row and cached context its phases" python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
names = {"qkv", "attention", "wo", "ffn_gate_up", "ffn_down", "output", "other"}
for row in j["decode"]:
    p = row["phases_ms_per_step"]
    assert set(p) == names and all(v > 0 for v in p.values()), p
    assert sum(p.values()) <= row["ms_per_step"] * 1.5, (p, row["ms_per_step"])
for row in j["cache_compare"]:
    assert set(row["cached_phases_ms"]) == names, row
' "$TMP/phases"
check "bench without --phases has no phases" python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert all("phases_ms_per_step" not in d for d in j["decode"])
' "$TMP/json"
"$KVSERVE" bench -m "$STORIES" --prompt 32 --gen 4 --batch 1 --repeat 1 --no-bandwidth --phases --cache-compare \
  >"$TMP/phases_table" 2>/dev/null
check "bench --phases table has a phases line per decode row" grep -qE '^  phases +ms/step \(mean\): qkv [0-9.]+ \| attention' "$TMP/phases_table"
check "bench --phases table has a phases line per context" grep -qE '^phases at +128, ms/tok cached' "$TMP/phases_table"
"$KVSERVE" bench -m "$STORIES" --prompt 32 --gen 4 --batch 1,2 --repeat 1 --bw-buffer 16MiB --cache-compare \
  -t 2 >"$TMP/table" 2>/dev/null
check "bench table exits 0" test $? -eq 0
for f in "machine:" "kernels:" "weights read per token:" "prefill 32" "decode batch 1" "read bandwidth:" \
  "of roofline" "of the bandwidth" "K/V per step" "around decode batch 1" "x batch 1 (median of paired runs)" \
  "no-cache ms/tok" "reduction"; do
  check "table has '$f'" grep -q "$f" "$TMP/table"
done
check "cache-compare has a 128 row" grep -qE '^ +128 ' "$TMP/table"
# The default thread count follows the CPUs this process may use (affinity, cgroup quota), not the
# machine's: one CPU allowed, one pool thread.
if command -v taskset >/dev/null && taskset -c 0 true 2>/dev/null; then
  taskset -c 0 "$KVSERVE" bench -m "$STORIES" --prompt 8 --gen 2 --batch 1 --repeat 1 --no-bandwidth >"$TMP/one_cpu" 2>/dev/null
  check "under taskset -c 0 the default is one thread" grep -q '| 1 threads |' "$TMP/one_cpu"
fi
for bad in "--batch 0" "--batch 1,x" "--prompt -1" "--prompt 0" "--gen 0" "--repeat 0" "--kv-type q9"; do
  # shellcheck disable=SC2086
  "$KVSERVE" bench -m "$STORIES" --no-bandwidth --repeat 1 $bad >/dev/null 2>&1
  check "bench $bad exits non-zero" test $? -ne 0
done
"$KVSERVE" bench -m /nonexistent.gguf --no-bandwidth >/dev/null 2>&1
check "bench on a missing model exits non-zero" test $? -ne 0
finish
