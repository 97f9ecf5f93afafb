#!/usr/bin/env bash
# Bad input gets a clear error and a non-zero exit, never a crash (exit codes >= 128 are signals).
source "$(dirname "$0")/lib.bash"
expect_error() {  # what, pattern, command...
  local what="$1" pattern="$2"; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  check "$what: non-zero exit" test $rc -ne 0
  check "$what: no crash (rc $rc < 128)" test $rc -lt 128
  check "$what: message matches '$pattern'" grep -qi -- "$pattern" "$TMP/err"
}
# Bad command lines: exit 2 and one "error:" line (docs/cli.md), whichever layer refuses them.
expect_usage() {  # what, pattern, command...
  local what="$1" pattern="$2"; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  check "$what: exit 2 (got $rc)" test $rc -eq 2
  check "$what: 'error: ...$pattern' on stderr" grep -qi -- "^error: .*$pattern" "$TMP/err"
}
expect_usage "no subcommand" "subcommand" "$KVSERVE"
expect_usage "an unknown subcommand is named, with the known ones" "unknown subcommand 'nosuch'.*generate" "$KVSERVE" nosuch
expect_usage "a required flag missing" "--model" "$KVSERVE" generate
expect_usage "an unknown flag" "--bogus" "$KVSERVE" tokenize -m "$STORIES" -p hi --bogus
expect_usage "a flag's bad value" "port" "$KVSERVE" serve -m "$STORIES" --port abc
expect_usage "-t past the thread limit (a failed thread creation before)" "threads.*1024" "$KVSERVE" generate -m "$STORIES" -p hi -t 100000
expect_usage "bench -t past the thread limit" "threads" "$KVSERVE" bench -m "$STORIES" -t 5000
expect_usage "a negative --ctx" "ctx.*non-negative" "$KVSERVE" generate -m "$STORIES" -p hi --ctx -1
expect_usage "--block-size 0" "block-size" "$KVSERVE" generate -m "$STORIES" -p hi --block-size 0
expect_usage "--temp nan (made every probability NaN)" "temperature must be a finite number" "$KVSERVE" generate -m "$STORIES" -p hi --temp nan
expect_usage "--top-p nan (passed the range check)" "top-p" "$KVSERVE" generate -m "$STORIES" -p hi --top-p nan
expect_usage "--repeat-penalty nan (passed the range check)" "repeat_penalty must be a finite number" "$KVSERVE" generate -m "$STORIES" -p hi --repeat-penalty nan
expect_usage "--repeat-penalty 0 (would divide the logits by zero)" "repeat-penalty" "$KVSERVE" generate -m "$STORIES" -p hi --repeat-penalty 0
"$KVSERVE" --help >"$TMP/out" 2>&1
check "--help exits 0 and prints the usage" sh -c "test $? = 0 && grep -q Usage '$TMP/out'"
# An output that cannot be written fails before the work, naming the path.
expect_error "quantize into a missing folder" "no-dir/q.gguf: cannot create" "$KVSERVE" quantize "$STORIES" "$TMP/no-dir/q.gguf" q8_0
check "... before any tensor is encoded" test ! -s "$TMP/out"
expect_error "synth into a missing folder" "no-dir/s.gguf: cannot create" "$KVSERVE" synth --preset smollm-135m --type q8_0 --vocab "$SHARED/models/llama.cpp-vocab/ggml-vocab-llama-spm.gguf" -o "$TMP/no-dir/s.gguf"
expect_error "logits into a missing folder" "error: .*no-dir/l.bin: cannot create" "$KVSERVE" logits -m "$STORIES" -p hi -o "$TMP/no-dir/l.bin"
expect_error "missing model" "no-such.gguf" "$KVSERVE" generate -m "$TMP/no-such.gguf" -p hi
head -c 1000 "$STORIES" >"$TMP/trunc.gguf"
expect_error "truncated model" "trunc.gguf" "$KVSERVE" generate -m "$TMP/trunc.gguf" -p hi
printf 'GGML\3\0\0\0' >"$TMP/magic.gguf"
expect_error "bad magic" "magic" "$KVSERVE" inspect "$TMP/magic.gguf"
expect_error "unknown architecture lists the supported ones" "supported: llama, qwen2" "$KVSERVE" generate -m "$SHARED/models/llama.cpp-vocab/ggml-vocab-gpt-2.gguf" -p hi
expect_error "vocab-only llama file has no weights" "missing tensor" "$KVSERVE" generate -m "$SHARED/models/llama.cpp-vocab/ggml-vocab-llama-spm.gguf" -p hi
expect_error "bad kv type" "kv-type" "$KVSERVE" generate -m "$STORIES" -p hi --kv-type q3
expect_error "prompt over context" "context" "$KVSERVE" generate -m "$STORIES" -p "Once upon a time there was a girl who liked to play" --ctx 8
expect_error "negative -n" "-n" "$KVSERVE" generate -m "$STORIES" -p hi -n -5
expect_error "bad kv memory" "byte" "$KVSERVE" generate -m "$STORIES" -p hi --kv-memory lots
# A KV arena is zero-filled up front: one past the memory left is refused with what to change,
# rather than ending in the OOM killer (or a bare allocation failure) mid-start.
expect_error "a context whose KV cache exceeds the memory names the largest that fits" "set --ctx to at most [0-9]" \
  "$KVSERVE" generate -m "$STORIES" -p hi --ctx 1000000000 -n 1000000000
# generate's arena holds what the run can (prompt bytes + 3 + -n), not the whole context.
"$KVSERVE" generate -m "$STORIES" -p "Once upon a time" -n 8 --temp 0 --ctx 1000000000 >"$TMP/out" 2>"$TMP/err"
check "generate with a huge --ctx and a short run needs no huge arena" test $? = 0
check "... and holds one 20 KiB block at its peak" grep -q "KV bytes peak: 20480 " "$TMP/err"
expect_error "a KV budget past the memory" "kv-memory 100TB.*memory available" "$KVSERVE" generate -m "$STORIES" -p hi --kv-memory 100TB
expect_error "serve refuses a KV budget past the memory" "kv-memory 100TB.*memory available" \
  "$KVSERVE" serve -m "$STORIES" --port 0 --kv-memory 100TB
finish
