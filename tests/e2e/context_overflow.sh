#!/usr/bin/env bash
# --context-overflow: `error` refuses a prompt + max_tokens beyond the context with a 400 that
# states the sizes; `truncate` drops the oldest prompt tokens (after the BOS) and answers.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/server_lib.bash"

LONG=$(python3 -c 'print(" ".join(["Once upon a time there was a little dog."] * 20))')
BODY=$(python3 -c 'import json,sys;print(json.dumps({"prompt":sys.argv[1],"max_tokens":16,"temperature":0}))' "$LONG")

if ! start_server --ctx 128; then fail "server (error policy) did not start"; cat "$TMP/srv.err"; finish; exit 1; fi
check "error: an overflowing prompt is a 400" test "$(post /v1/completions "$BODY")" = 400
check "error: the message states the context" grep -q "context length (128 tokens)" "$TMP/body"
stop_server

if ! start_server --ctx 128 --context-overflow truncate; then fail "server (truncate) did not start"; cat "$TMP/srv.err"; finish; exit 1; fi
check "truncate: the same request is answered" test "$(post /v1/completions "$BODY")" = 200
check "truncate: prompt cut to the room left by max_tokens" test "$(jget "$TMP/body" 'j["usage"]["prompt_tokens"]')" = 112
check "truncate: max_tokens generated" test "$(jget "$TMP/body" 'j["usage"]["completion_tokens"]')" = 16
check "truncate: max_tokens beyond the context is still a 400" \
  test "$(post /v1/completions '{"prompt": "Hi", "max_tokens": 127}')" = 400
"$KVSERVE" serve -m "$STORIES" --context-overflow shift-all --print-config >/dev/null 2>"$TMP/bad"
check "an unknown policy is refused at start-up" grep -q "context_overflow" "$TMP/bad"
stop_server
check "clean shutdown" test "$STOP_RC" = 0

# kvserve generate: the same policy on the command line.
"$KVSERVE" generate -m "$STORIES" --ctx 64 -n 8 --temp 0 -p "$LONG" >/dev/null 2>"$TMP/g1"
check "generate: a prompt longer than the context fails by default" test $? -ne 0
"$KVSERVE" generate -m "$STORIES" --ctx 64 -n 8 --temp 0 --context-overflow truncate -p "$LONG" >/dev/null 2>"$TMP/g2"
check "generate --context-overflow truncate answers" test $? -eq 0
check "generate reports the truncated prompt" grep -q "prompt tokens: 56 " "$TMP/g2"
finish
