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
finish
