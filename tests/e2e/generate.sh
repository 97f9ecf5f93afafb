#!/usr/bin/env bash
# `kvserve generate`: greedy output equals the golden files; --no-cache gives the same text;
# the stderr summary names every figure.
source "$(dirname "$0")/lib.bash"
prompts=("Once upon a time" "One day, a little boy named Tim" "The sun was shining and the birds were singing. Lily" "Max had a red ball. He liked to")
for i in 1 2 3 4; do
  p="${prompts[$((i - 1))]}"
  "$KVSERVE" generate -m "$STORIES" -p "$p" --temp 0 -n 200 --echo >"$TMP/out$i" 2>"$TMP/err$i"
  check "generate p$i exits 0" test $? -eq 0
  check "generate p$i equals golden" test "$(trim <"$TMP/out$i")" = "$(trim <"$SHARED/golden/greedy/stories260K.p$i.txt")"
done
for f in "prompt tokens:" "prefill:" "generated tokens: 200" "decode:" "KV bytes in use:"; do
  check "summary has '$f'" grep -q "$f" "$TMP/err1"
done
"$KVSERVE" generate -m "$STORIES" -p "Once upon a time" --temp 0 -n 200 --echo --no-cache >"$TMP/nocache" 2>/dev/null
check "--no-cache equals cached output" cmp -s "$TMP/nocache" "$TMP/out1"
"$KVSERVE" generate -m "$STORIES" -p "Once upon a time" --temp 0 -n 200 --echo --kv-type f16 >"$TMP/f16" 2>/dev/null
check "--kv-type f16 runs" test -s "$TMP/f16"
a=$("$KVSERVE" generate -m "$STORIES" -p "Once upon a time" --temp 0.8 --seed 7 -n 40 2>/dev/null)
b=$("$KVSERVE" generate -m "$STORIES" -p "Once upon a time" --temp 0.8 --seed 7 -n 40 2>/dev/null)
check "same seed, same output" test "$a" = "$b"
"$KVSERVE" generate -m "$STORIES" -p "Once upon a time" --temp 0 -n 200 --stop "Lily" >"$TMP/stop" 2>/dev/null
check "stop string ends the text" test "$(trim <"$TMP/stop")" = ", there was a little girl named"
"$KVSERVE" generate -m "$STORIES" -p "Once upon a time" --temp 0.7 --top-k 20 --top-p 0.9 --min-p 0.1 \
  --repeat-penalty 1.1 --presence-penalty 0.2 --frequency-penalty 0.1 -n 30 --threads 1 >/dev/null 2>&1
check "all sampling flags accepted" test $? -eq 0
"$KVSERVE" generate -m "$STORIES" -p "Once upon a time" --kv-memory 64KiB -n 10 >/dev/null 2>&1
check "small --kv-memory budget still generates" test $? -eq 0
# --json: with "}" (byte token 128) forced wherever it may come, the empty object, then stop;
# cut by -n, the start of one.
"$KVSERVE" generate -m "$STORIES" -p "Once upon a time" --json --logit-bias 128=100 -n 40 >"$TMP/json" 2>"$TMP/json.err"
check "--json gives a JSON object" python3 -c 'import json,sys; assert json.loads(open(sys.argv[1]).read()) == {}' "$TMP/json"
check "... and finishes with stop" grep -q "finish: stop" "$TMP/json.err"
"$KVSERVE" generate -m "$STORIES" -p "Once upon a time" --json --temp 0 -n 8 >"$TMP/json8" 2>"$TMP/json8.err"
check "--json cut by -n starts an object" test "$(tr -d ' \n' <"$TMP/json8" | head -c 1)" = "{"
check "... finish: length" grep -q "finish: length" "$TMP/json8.err"
finish
