#!/usr/bin/env bash
# `kvserve logits`, `tokenize` and `inspect`: formats and contents.
source "$(dirname "$0")/lib.bash"
"$KVSERVE" logits -m "$STORIES" --tokens 1,403,407,261 -o "$TMP/l.bin" 2>/dev/null
check "logits --tokens exits 0" test $? -eq 0
check "logits file size = 8 + 4*4 + 4*4*512" test "$(stat -c %s "$TMP/l.bin")" -eq $((8 + 16 + 4 * 4 * 512))
check "logits header n_tokens=4 n_vocab=512" test "$(od -An -t d4 -N 8 "$TMP/l.bin" | tr -s ' ')" = " 4 512"
check "logits header holds the ids" test "$(od -An -t d4 -j 8 -N 16 "$TMP/l.bin" | tr -s ' ')" = " 1 403 407 261"
"$KVSERVE" logits -m "$STORIES" -p "Once upon a time" -o "$TMP/p.bin" 2>/dev/null
check "logits -p writes a file" test -s "$TMP/p.bin"
"$KVSERVE" logits -m "$STORIES" --tokens 1,x,3 -o "$TMP/bad.bin" >/dev/null 2>&1
check "logits rejects a bad token list" test $? -ne 0
"$KVSERVE" logits -m "$STORIES" --tokens 1,9999 -o "$TMP/bad.bin" >/dev/null 2>"$TMP/err"
check "logits rejects an out-of-vocabulary id" test $? -ne 0
check "that error names the id" grep -q "9999" "$TMP/err"

ids=$("$KVSERVE" tokenize -m "$STORIES" -p "Once upon a time")
check "tokenize starts with BOS" test "${ids%% *}" = "1"
ids2=$("$KVSERVE" tokenize -m "$STORIES" -p "Once upon a time" --no-bos)
check "tokenize --no-bos drops BOS" test "$ids2" = "${ids#1 }"
gpt=$("$KVSERVE" tokenize -m "$SHARED/models/llama.cpp-vocab/ggml-vocab-gpt-2.gguf" -p "Hello world" --no-bos)
check "tokenize works on a vocab-only gpt-2 file" test "$gpt" = "15496 995"
# --pieces: one line per token, even for a newline or a partial UTF-8 byte; BOS shown as <s>.
"$KVSERVE" tokenize -m "$STORIES" -p $'a\n\xff' --pieces >"$TMP/pieces"
check "tokenize --pieces: one line per token" test "$(wc -l <"$TMP/pieces")" = 4
check "... BOS as its text" grep -qx "1:'<s>'" "$TMP/pieces"
check "... a newline escaped" grep -qxF "13:'\n'" "$TMP/pieces"
check "... a partial UTF-8 byte as \\xNN" grep -qxF "258:'\xff'" "$TMP/pieces"

"$KVSERVE" inspect "$STORIES" >"$TMP/inspect" 2>&1
check "inspect exits 0" test $? -eq 0
for f in "general.architecture" "llama.block_count" "tokenizer.ggml.tokens" "token_embd.weight" "bytes/token" "f16"; do
  check "inspect shows '$f'" grep -q "$f" "$TMP/inspect"
done
check "inspect KV bytes/token for f32 = 2*5*4*8*4 = 1280" grep -Eq "f32 +1280 bytes/token" "$TMP/inspect"
finish
