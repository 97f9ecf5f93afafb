#!/usr/bin/env bash
# The model file under a running server. Replaced in place (`cp` over it) or truncated, it changes
# nothing the server answers and does not kill it: inference reads no byte of the file after load
# (model.h). And the server does not keep the file's pages resident next to its packed copies.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/serve_common.bash"

# smollm-135m's shapes (127 MB in q8_0), so the file's resident pages are unmistakable.
MODEL="$TMP/smollm-q8_0.gguf"
"$KVSERVE" synth --preset smollm-135m --type q8_0 -o "$MODEL" -q \
  --vocab "$SHARED/models/llama.cpp-vocab/ggml-vocab-llama-spm.gguf" >/dev/null 2>&1
check "synth wrote the model" test -s "$MODEL"
size_mb=$(( $(stat -c %s "$MODEL") / 1048576 ))
if ! SERVE_MODEL="$MODEL" start_server --ctx 256 --kv-type q8_0; then
  fail "server did not become healthy"; finish; exit 1
fi
# ask: "STATUS text" of one greedy request (the body file removed first: a failed request must
# not leave the last answer's text behind).
ask() {
  rm -f "$TMP/body"
  local code
  code=$(post /generate '{"prompt":"The history of the world","max_tokens":16,"temperature":0}')
  echo "$code $(jget "$TMP/body" 'j["text"]')"
}
first=$(ask)
check "an answer before the file changes ($first)" test "${first%% *}" = 200

# Resident KiB of the server's mapping of the model file (smaps: one entry per mapping).
mapped_kb() {
  awk -v f="$MODEL" '$0 ~ /^[0-9a-f]+-[0-9a-f]+ / { in_model = ($NF == f) } in_model && $1 == "Rss:" { kb += $2 }
                     END { print kb + 0 }' "/proc/$SRV_PID/smaps"
}
kb=$(mapped_kb)
check "the model file's pages are not kept resident (${kb} KiB of a ${size_mb} MiB file)" test "$kb" -lt 8192

cp "$STORIES" "$MODEL"  # another model's bytes, written into the same file
check "a model file overwritten in place changes no answer" test "$(ask)" = "$first"
: >"$MODEL"  # truncated: every page of the old mapping is gone
check "a truncated model file changes no answer (the server read it: SIGBUS)" test "$(ask)" = "$first"
check "... and the server is still healthy" test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$URL/health")" = 200
stop_server
check "clean shutdown after the file went away (rc $STOP_RC)" test "$STOP_RC" = 0
finish
