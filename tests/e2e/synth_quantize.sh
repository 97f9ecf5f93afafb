#!/usr/bin/env bash
# `kvserve synth` and `kvserve quantize`: the written models load and generate; bad arguments
# fail with a clear message.
source "$(dirname "$0")/lib.bash"
VOCAB="$SHARED/models/llama.cpp-vocab/ggml-vocab-llama-spm.gguf"
TINY="$SHARED/models/tiny/tiny-llama-f32.gguf"

# synth: the smallest preset, 8-bit (about 150 MB, a few seconds).
"$KVSERVE" synth --preset smollm-135m --type q8_0 -o "$TMP/smollm.gguf" --vocab "$VOCAB" --seed 1 -q >"$TMP/synth.out" 2>&1
check "synth smollm-135m q8_0 exits 0" test $? -eq 0
check "synth prints a summary" grep -q "wrote .*preset smollm-135m, type q8_0" "$TMP/synth.out"
"$KVSERVE" generate -m "$TMP/smollm.gguf" -p "Once upon a time" -n 4 --ctx 64 >"$TMP/gen1" 2>"$TMP/gen1.err"
check "generate on the synthesized model exits 0" test $? -eq 0
check "generate reports 4 generated tokens" grep -q "generated tokens: 4" "$TMP/gen1.err"

# quantize: tiny-llama to q4_k_m, one line per tensor and a summary, then generate.
"$KVSERVE" quantize "$TINY" "$TMP/tiny-q4km.gguf" q4_k_m >"$TMP/q.out" 2>&1
check "quantize q4_k_m exits 0" test $? -eq 0
check "quantize prints one line per tensor" test "$(grep -Ec '^(token_embd|output|blk)' "$TMP/q.out")" -eq 21
check "quantize prints a summary" grep -q "quantized 21 tensors to q4_k_m" "$TMP/q.out"
check "output.weight is q6_K" grep -q "^output.weight .*-> q6_K" "$TMP/q.out"
"$KVSERVE" inspect "$TMP/tiny-q4km.gguf" >"$TMP/inspect" 2>&1
check "file_type is 15 (Q4_K_M)" grep -Eq "general.file_type +uint32 +15" "$TMP/inspect"
"$KVSERVE" generate -m "$TMP/tiny-q4km.gguf" -p "Once upon a time" -n 4 >"$TMP/gen2" 2>"$TMP/gen2.err"
check "generate on the quantized model exits 0" test $? -eq 0

# Errors: non-zero exit and a message naming the problem.
"$KVSERVE" synth --preset nope --type q8_0 -o "$TMP/x.gguf" --vocab "$VOCAB" >/dev/null 2>"$TMP/e1"
check "unknown preset fails" test $? -ne 0
check "unknown preset message" grep -q "unknown preset 'nope'" "$TMP/e1"
"$KVSERVE" synth --preset smollm-135m --type q3_k -o "$TMP/x.gguf" --vocab "$VOCAB" >/dev/null 2>"$TMP/e2"
check "unknown synth type fails" test $? -ne 0
check "unknown synth type message" grep -q "unknown type 'q3_k'" "$TMP/e2"
"$KVSERVE" synth --preset smollm-135m --type q8_0 -o "$TMP/x.gguf" --vocab "$TMP/missing-vocab.gguf" >/dev/null 2>"$TMP/e3"
check "missing vocab fails" test $? -ne 0
check "missing vocab message names the file" grep -q "missing-vocab.gguf" "$TMP/e3"
"$KVSERVE" quantize "$TMP/missing.gguf" "$TMP/y.gguf" q8_0 >/dev/null 2>"$TMP/e4"
check "missing quantize input fails" test $? -ne 0
check "missing input message names the file" grep -q "missing.gguf" "$TMP/e4"
"$KVSERVE" quantize "$TINY" "$TMP/y.gguf" q9_0 >/dev/null 2>"$TMP/e5"
check "unknown quantize type fails" test $? -ne 0
check "unknown quantize type message" grep -q "unknown type 'q9_0'" "$TMP/e5"
check "no output file after failures" test ! -e "$TMP/x.gguf" -a ! -e "$TMP/y.gguf"
finish
