#!/usr/bin/env bash
# `kvserve perplexity` on the golden corpus: within 0.2% of the reference 3.0145.
source "$(dirname "$0")/lib.bash"
out=$("$KVSERVE" perplexity -m "$STORIES" -f "$SHARED/golden/stories-corpus.txt" -c 128 2>/dev/null)
check "perplexity exits 0" test $? -eq 0
last=$(printf '%s\n' "$out" | tail -n 1)
echo "$last"
check "last line is 'PPL = <value>'" bash -c "[[ '$last' =~ ^PPL\ =\ [0-9.]+$ ]]"
ppl=${last#PPL = }
check "PPL within 0.2% of 3.0145" awk -v p="$ppl" 'BEGIN { exit !(p >= 3.0145 * 0.998 && p <= 3.0145 * 1.002) }'
f16=$("$KVSERVE" perplexity -m "$STORIES" -f "$SHARED/golden/stories-corpus.txt" --kv-type f16 2>/dev/null | tail -n 1)
echo "f16 KV: $f16"
check "f16 KV perplexity within 0.2% of 3.0143" awk -v p="${f16#PPL = }" 'BEGIN { exit !(p >= 3.0143 * 0.998 && p <= 3.0143 * 1.002) }'

# --kl-base: the first run saves the f32-KV reference, the next ones compare with it.
CORPUS="$SHARED/golden/stories-corpus.txt"
"$KVSERVE" perplexity -m "$STORIES" -f "$CORPUS" --kl-base "$TMP/base.kl" >"$TMP/kl0" 2>/dev/null
check "--kl-base saves the reference when the file is new" grep -q '^KL base saved: ' "$TMP/kl0"
"$KVSERVE" perplexity -m "$STORIES" -f "$CORPUS" --kl-base "$TMP/base.kl" >"$TMP/kl1" 2>/dev/null
check "same KV type: KL exactly 0, top-1 100%" grep -q '^KL mean = 0, KL max = 0, top-1 agreement = 100.00%' "$TMP/kl1"
"$KVSERVE" perplexity -m "$STORIES" -f "$CORPUS" --kv-type f16 --kl-base "$TMP/base.kl" >"$TMP/kl2" 2>/dev/null
kl=$(sed -n 's/^KL mean = \([^,]*\),.*/\1/p' "$TMP/kl2")
echo "f16 KV: KL mean $kl"
check "f16 KV: small positive KL" awk -v k="$kl" 'BEGIN { exit !(k > 0 && k < 1e-4) }'
"$KVSERVE" perplexity -m "$STORIES" -f "$CORPUS" -c 64 --kl-base "$TMP/base.kl" >/dev/null 2>"$TMP/kl3"
check "a base from another chunking is refused" grep -q 'positions' "$TMP/kl3"
check "... before any chunk is scored" test "$(grep -c 'running PPL' "$TMP/kl3")" = 0
finish
