#!/usr/bin/env bash
# KV cache element types through the CLI: every type and the K8V4 mix generate, perplexity with
# q8_0 K/V stays within 0.5% of f32 (issue 6's target), K8V4 within 10%, bad types fail cleanly,
# and `inspect` lists the per-type sizes (stories260K: 5 layers x 4 KV heads x head_dim 8). On
# tiny-llama (head_dim 64) q8_0, q4_0 and K8V4 caches are tiled where the CPU has AVX-512
# (kernels/kv_tiles.h): their perplexity matches the row layout's (KVSERVE_KV_TILES=0).
source "$(dirname "$0")/lib.bash"
CORPUS="$SHARED/golden/stories-corpus.txt"
ppl() { "$KVSERVE" perplexity -m "$STORIES" -f "$CORPUS" -c 128 "$@" 2>/dev/null | tail -n 1 | sed 's/^PPL = //'; }
for t in f32 f16 bf16 q8_0 q4_0; do
  "$KVSERVE" generate -m "$STORIES" -p "Once upon a time" --temp 0 -n 40 --kv-type "$t" >"$TMP/$t" 2>/dev/null
  check "--kv-type $t generates" test -s "$TMP/$t"
done
"$KVSERVE" generate -m "$STORIES" -p "Once upon a time" --temp 0 -n 40 --kv-type-k q8_0 --kv-type-v q4_0 >"$TMP/k8v4" 2>/dev/null
check "--kv-type-k q8_0 --kv-type-v q4_0 generates" test -s "$TMP/k8v4"
check "q8_0 KV gives the f32 greedy text's first words" bash -c "[ \"\$(head -c 20 '$TMP/q8_0')\" = \"\$(head -c 20 '$TMP/f32')\" ]"
base=$(ppl)
q8=$(ppl --kv-type q8_0)
q4=$(ppl --kv-type q4_0)
k8v4=$(ppl --kv-type-k q8_0 --kv-type-v q4_0)
echo "PPL f32 $base | q8_0 $q8 | q4_0 $q4 | k8v4 $k8v4"
check "q8_0 KV perplexity within 0.5% of f32" awk -v a="$q8" -v b="$base" 'BEGIN { exit !(a <= b * 1.005 && a >= b * 0.995) }'
# 4-bit keys in groups of 8 (this model's head_dim) cost stories260K much more (measured 6.78
# vs 3.01; docs/architecture.md): a sanity bound only, the accuracy report has the figures.
check "q4_0 KV perplexity finite and below 3x f32" awk -v a="$q4" -v b="$base" 'BEGIN { exit !(a > b * 0.95 && a < b * 3) }'
check "K8V4 perplexity within 10% of f32" awk -v a="$k8v4" -v b="$base" 'BEGIN { exit !(a <= b * 1.10 && a >= b * 0.95) }'
TINY="$SHARED/models/tiny/tiny-llama-f32.gguf"
tppl() { "$KVSERVE" perplexity -m "$TINY" -f "$CORPUS" -c 128 "$@" 2>/dev/null | tail -n 1 | sed 's/^PPL = //'; }
for kv in "--kv-type q8_0" "--kv-type q4_0" "--kv-type-k q8_0 --kv-type-v q4_0"; do
  # shellcheck disable=SC2086
  tiled=$(tppl $kv)
  # shellcheck disable=SC2086
  rows=$(KVSERVE_KV_TILES=0 tppl $kv)
  echo "tiny-llama PPL $kv: default layout $tiled | rows $rows"
  check "tiny-llama $kv: perplexity of the default (tiled) layout within 0.1% of rows" \
    awk -v a="$tiled" -v b="$rows" 'BEGIN { exit !(b > 0 && a <= b * 1.001 && a >= b * 0.999) }'
done
"$KVSERVE" generate -m "$STORIES" -p hi --kv-type-k q5 >/dev/null 2>"$TMP/err"
rc=$?
check "a bad --kv-type-k fails (exit 1 or 2, no crash)" test "$rc" -eq 1 -o "$rc" -eq 2
check "the error names the flag" grep -q -- "--kv-type-k" "$TMP/err"
"$KVSERVE" inspect "$STORIES" >"$TMP/inspect" 2>/dev/null
# 5 layers x 4 KV heads x 2 (K, V) x row bytes: q8_0 rows of 8 are 10 bytes, q4_0 rows 6.
check "inspect lists q8_0 at 400 bytes/token" grep -Eq "q8_0 +400 bytes/token" "$TMP/inspect"
check "inspect lists q4_0 at 240 bytes/token" grep -Eq "q4_0 +240 bytes/token" "$TMP/inspect"
finish
