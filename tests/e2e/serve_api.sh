#!/usr/bin/env bash
# `kvserve serve`: configuration precedence, every endpoint over real HTTP, greedy text equal
# to `kvserve generate`, SSE framing, /metrics through promtool, 400/413/429 answers and a
# graceful SIGTERM. Only 127.0.0.1; every wait is bounded; the servers are killed on exit.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/serve_common.bash"

# --- configuration -----------------------------------------------------------------------
printf 'port: 1111\nmax_queue: 3\nlog_format: json\n' >"$TMP/cfg.yaml"
KVSERVE_MAX_QUEUE=4 "$KVSERVE" serve -m "$STORIES" --config "$TMP/cfg.yaml" --port 2222 --print-config >"$TMP/pc" 2>&1
check "--print-config exits 0" test $? -eq 0
check "flag beats file (port)" grep -q '^port: 2222$' "$TMP/pc"
check "env beats file (max_queue)" grep -q '^max_queue: 4$' "$TMP/pc"
check "file beats default (log_format)" grep -q '^log_format: json$' "$TMP/pc"
printf 'max_sequences: 3\n' >"$TMP/bad.yaml"
"$KVSERVE" serve -m "$STORIES" --config "$TMP/bad.yaml" --print-config >/dev/null 2>"$TMP/badcfg"
check "unknown config key exits 2" test $? -eq 2
check "unknown config key is named" grep -q "max_sequences" "$TMP/badcfg"
"$KVSERVE" serve -m "$STORIES" --max-queue -1 --print-config >/dev/null 2>"$TMP/badflag"
check "bad flag value exits 2 naming the key" grep -q "max_queue" "$TMP/badflag"

# --- endpoints ---------------------------------------------------------------------------
if ! start_server --max-body-bytes 64KiB --log-format json; then
  fail "server did not become healthy"; cat "$TMP/srv.err"; finish; exit 1
fi
pass "server healthy"
check "start-up prints a curl example" grep -q "^curl -s http://127.0.0.1:$PORT/generate" "$TMP/srv.out"
check "/live answers 200" test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$URL/live")" = 200
# A second server on the busy port must fail, not share it (SO_REUSEPORT would let the kernel
# split connections between the two processes).
timeout 30 "$KVSERVE" serve -m "$STORIES" --port "$PORT" >"$TMP/second.out" 2>"$TMP/second.err"
rc=$?
check "a second server on the same port exits 1 (got $rc)" test $rc -eq 1
check "... saying it cannot listen" grep -q "cannot listen on 127.0.0.1:$PORT" "$TMP/second.err"

P="Once upon a time"
"$KVSERVE" generate -m "$STORIES" -p "$P" --temp 0 -n 64 >"$TMP/cli" 2>/dev/null
code=$(post /generate "{\"prompt\":\"$P\",\"max_tokens\":64,\"temperature\":0}")
check "/generate 200" test "$code" = 200
jget "$TMP/body" 'j["text"]' >"$TMP/gen_text"
check "/generate greedy text equals kvserve generate" test "$(trim <"$TMP/gen_text")" = "$(trim <"$TMP/cli")"
check "/generate reports usage and timings" test "$(jget "$TMP/body" '"%d %d %s" % (j["usage"]["prompt_tokens"] > 0, j["tokens"] > 0, "ttft_ms" in j["timings"] and "queue_ms" in j["timings"])')" = "1 1 True"

code=$(post /v1/completions "{\"prompt\":\"$P\",\"max_tokens\":32,\"temperature\":0}")
check "/v1/completions 200" test "$code" = 200
check "completion object" test "$(jget "$TMP/body" 'j["object"]')" = text_completion
check "completion has cached_tokens" test -n "$(jget "$TMP/body" 'j["usage"]["prompt_tokens_details"]["cached_tokens"]')"
check "completion finish_reason" test -n "$(jget "$TMP/body" 'j["choices"][0]["finish_reason"]')"
jget "$TMP/body" 'j["choices"][0]["text"]' >"$TMP/nonstream"

curl -s -N --max-time 60 -H 'Content-Type: application/json' "$URL/v1/completions" \
  -d "{\"prompt\":\"$P\",\"max_tokens\":32,\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" >"$TMP/sse"
check "stream ends with data: [DONE]" test "$(grep -v '^$' "$TMP/sse" | tail -1)" = "data: [DONE]"
check "every stream line is data: or blank" test -z "$(grep -v -e '^data: ' -e '^$' "$TMP/sse")"
python3 - "$TMP/sse" >"$TMP/streamed" <<'PY'
import json, sys
text = ""
for line in open(sys.argv[1]):
    if line.startswith("data: ") and line.strip() != "data: [DONE]":
        ev = json.loads(line[6:])
        for c in ev.get("choices", []):
            text += c.get("text", "")
print(text)
PY
check "streamed text equals the non-streamed text" test "$(trim <"$TMP/streamed")" = "$(trim <"$TMP/nonstream")"
check "include_usage sends a usage chunk" grep -q '"completion_tokens"' "$TMP/sse"

code=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":16,"temperature":0}')
check "/v1/chat/completions 200" test "$code" = 200
check "chat object and role" test "$(jget "$TMP/body" 'j["object"] + " " + j["choices"][0]["message"]["role"]')" = "chat.completion assistant"
curl -s -N --max-time 60 "$URL/v1/chat/completions" \
  -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":8,"stream":true}' >"$TMP/chatsse"
check "chat stream ends with [DONE]" test "$(grep -v '^$' "$TMP/chatsse" | tail -1)" = "data: [DONE]"
check "chat stream chunks" grep -q '"chat.completion.chunk"' "$TMP/chatsse"
# A message's text never becomes a control token: "</s>" in it is text, not an end of turn.
# stories260K's chat family is plain ("User: ...\n\nAssistant:", no special markup), so the prompt
# is the rendered text tokenized as plain text.
post /v1/chat/completions '{"messages":[{"role":"user","content":"hi</s><s>"}],"max_tokens":1}' >/dev/null
chat_prompt=$(jget "$TMP/body" 'j["usage"]["prompt_tokens"]')
post /tokenize '{"content":"User: hi</s><s>\n\nAssistant:","parse_special":false}' >/dev/null
as_text=$(jget "$TMP/body" 'len(j["tokens"])')
check "chat: control-token text in a message stays text ($chat_prompt prompt tokens, $as_text as text)" \
  test -n "$as_text" -a "$chat_prompt" = "$as_text"

# response_format json_object: the answer is one JSON object, "stop" when it closed (with "}",
# stories260K's byte token 128, forced wherever it may come, at once), or cut by max_tokens the
# start of one; json_schema is refused.
code=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"JSON please"}],"max_tokens":40,"temperature":0,"response_format":{"type":"json_object"},"logit_bias":{"128":100}}')
check "json_object 200" test "$code" = 200
check "json_object answer is a JSON object ending stop" test "$(jget "$TMP/body" 'type(json.loads(j["choices"][0]["message"]["content"])).__name__ + " " + j["choices"][0]["finish_reason"]')" = "dict stop"
code=$(post /v1/completions '{"prompt":"Once","max_tokens":12,"temperature":0,"response_format":{"type":"json_object"}}')
check "json_object cut by max_tokens starts an object" \
  test "$code:$(jget "$TMP/body" 'j["choices"][0]["text"].lstrip()[:1] + " " + j["choices"][0]["finish_reason"]')" = "200:{ length"
curl -s -N --max-time 60 "$URL/v1/chat/completions" -d '{"messages":[{"role":"user","content":"JSON please"}],"max_tokens":40,"temperature":0,"stream":true,"response_format":{"type":"json_object"},"logit_bias":{"128":100}}' >"$TMP/jsonsse"
check "json_object streamed: the deltas join into the object" test "$(python3 -c '
import json, sys
text = ""
for line in open(sys.argv[1]):
    if line.startswith("data: {"):
        c = json.loads(line[6:])["choices"]
        if c: text += c[0]["delta"].get("content", "")
print(json.loads(text))' "$TMP/jsonsse")" = "{}"
check "json_schema is 400" test "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{}}}}')" = 400
check "... naming response_format" grep -q response_format "$TMP/body"

code=$(post /tokenize "{\"content\":\"$P\"}")
check "/tokenize 200" test "$code" = 200
api_toks=$(jget "$TMP/body" '" ".join(map(str, j["tokens"]))')
cli_toks=$("$KVSERVE" tokenize -m "$STORIES" -p "$P" 2>/dev/null | trim)
check "/tokenize equals kvserve tokenize" test "$api_toks" = "$cli_toks"
toks_json=$(jget "$TMP/body" 'json.dumps(j["tokens"])')
code=$(post /detokenize "{\"tokens\":$toks_json}")
check "/detokenize round-trips" test "$(jget "$TMP/body" 'j["content"]' | trim)" = "$P"
# logit_bias: ban the greedy first token (the last token of prompt + that answer); the answer
# changes, no longer starts with it, and equals `kvserve generate --logit-bias` token for token.
post /generate "{\"prompt\":\"$P\",\"max_tokens\":1,\"temperature\":0}" >/dev/null
first=$(jget "$TMP/body" 'j["text"]')
post /tokenize "$(python3 -c 'import json,sys; print(json.dumps({"content": sys.argv[1] + sys.argv[2]}))' "$P" "$first")" >/dev/null
first_id=$(jget "$TMP/body" 'j["tokens"][-1]')
code=$(post /generate "{\"prompt\":\"$P\",\"max_tokens\":12,\"temperature\":0,\"logit_bias\":{\"$first_id\":-100}}")
check "logit_bias 200" test "$code" = 200
jget "$TMP/body" 'j["text"]' >"$TMP/banned"
check "a banned greedy token is not generated first (token $first_id, '$first')" \
  test "$(python3 -c 'import sys; print(open(sys.argv[1]).read().startswith(sys.argv[2]))' "$TMP/banned" "$first")" = False
"$KVSERVE" generate -m "$STORIES" -p "$P" -n 12 --temp 0 --logit-bias "$first_id=-100" 2>/dev/null >"$TMP/cli_banned"
check "the same ban through kvserve generate gives the same text" test "$(trim <"$TMP/banned")" = "$(trim <"$TMP/cli_banned")"
check "logit_bias on a token outside the vocabulary is 400" \
  test "$(post /v1/completions "{\"prompt\":\"x\",\"logit_bias\":{\"99999999\":1}}")" = 400
check "... naming logit_bias" grep -q logit_bias "$TMP/body"
# echo: the prompt scored token by token. The last token of P + (the greedy next token's text),
# scored by an echo with max_tokens 0, has the logprob that generating it reported.
post /v1/completions "{\"prompt\":\"$P\",\"max_tokens\":1,\"temperature\":0,\"logprobs\":1}" >/dev/null
next_text=$(jget "$TMP/body" 'j["choices"][0]["text"]')
next_lp=$(jget "$TMP/body" 'j["choices"][0]["logprobs"]["token_logprobs"][0]')
code=$(post /v1/completions "$(python3 -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": 0, "echo": True, "logprobs": 1}))' "$P$next_text")")
check "echo with max_tokens 0 is 200" test "$code" = 200
check "echo returns the prompt as the text" test "$(jget "$TMP/body" 'j["choices"][0]["text"]')" = "$P$next_text"
check "echo scores every prompt token after the BOS" \
  test "$(jget "$TMP/body" 'len(j["choices"][0]["logprobs"]["token_logprobs"]) == j["usage"]["prompt_tokens"] - 1 and j["usage"]["completion_tokens"] == 0')" = True
check "the echoed last token's logprob equals the one its generation reported" \
  test "$(jget "$TMP/body" "abs(j['choices'][0]['logprobs']['token_logprobs'][-1] - ($next_lp)) < 1e-4")" = True
post /v1/completions "{\"prompt\":\"$P\",\"max_tokens\":8,\"temperature\":0,\"echo\":true,\"logprobs\":0}" >/dev/null
jget "$TMP/body" 'j["choices"][0]["text"]' >"$TMP/echo_full"
post /v1/completions "{\"prompt\":\"$P\",\"max_tokens\":8,\"temperature\":0}" >/dev/null
check "echo text is the prompt followed by the completion" \
  test "$(trim <"$TMP/echo_full")" = "$(printf '%s%s' "$P" "$(jget "$TMP/body" 'j["choices"][0]["text"]')" | trim)"
curl -s -N --max-time 60 "$URL/v1/completions" \
  -d "{\"prompt\":\"$P\",\"max_tokens\":8,\"temperature\":0,\"echo\":true,\"logprobs\":0,\"stream\":true}" >"$TMP/echo_sse"
python3 - "$TMP/echo_sse" >"$TMP/echo_streamed" <<'PY'
import json, sys
text = ""
for line in open(sys.argv[1]):
    if line.startswith("data: ") and line.strip() != "data: [DONE]":
        for c in json.loads(line[6:]).get("choices", []):
            text += c.get("text", "")
print(text)
PY
check "streamed echo adds up to the non-streamed answer" test "$(trim <"$TMP/echo_streamed")" = "$(trim <"$TMP/echo_full")"
check "echo on /generate is 400" test "$(post /generate "{\"prompt\":\"x\",\"echo\":true}")" = 400
# Without a seed every request draws its own: repeated sampled requests differ (they were all
# the same text, from one default seed); with a seed they repeat exactly.
for i in 1 2 3 4; do
  post /v1/completions "{\"prompt\":\"$P\",\"max_tokens\":24,\"temperature\":1.5,\"ignore_eos\":true}" >/dev/null
  jget "$TMP/body" 'j["choices"][0]["text"]'
done >"$TMP/unseeded"
check "sampled requests without a seed differ ($(sort -u "$TMP/unseeded" | wc -l) distinct of 4)" \
  test "$(sort -u "$TMP/unseeded" | wc -l)" -ge 2
for i in 1 2; do
  post /v1/completions "{\"prompt\":\"$P\",\"max_tokens\":24,\"temperature\":1.5,\"ignore_eos\":true,\"seed\":9}" >/dev/null
  jget "$TMP/body" 'j["choices"][0]["text"]'
done >"$TMP/seeded"
check "... and with a seed repeat exactly" test "$(sort -u "$TMP/seeded" | wc -l)" = 1
# n choices: choice i samples as a lone request with seed + i would; usage counts all of them.
code=$(post /v1/completions "{\"prompt\":\"$P\",\"max_tokens\":12,\"temperature\":1,\"seed\":40,\"n\":3,\"ignore_eos\":true}")
check "n = 3 is 200" test "$code" = 200
cp "$TMP/body" "$TMP/n3"
check "n = 3 gives choices 0, 1, 2" test "$(jget "$TMP/n3" '[c["index"] for c in j["choices"]]')" = "[0, 1, 2]"
for i in 0 1 2; do
  post /v1/completions "{\"prompt\":\"$P\",\"max_tokens\":12,\"temperature\":1,\"seed\":$((40 + i)),\"ignore_eos\":true}" >/dev/null
  check "choice $i equals a lone request with seed 40 + $i" \
    test "$(jget "$TMP/n3" "j['choices'][$i]['text']")" = "$(jget "$TMP/body" 'j["choices"][0]["text"]')"
done
check "usage counts the prompt once and every choice's 12 tokens" \
  test "$(jget "$TMP/n3" '(j["usage"]["prompt_tokens"], j["usage"]["completion_tokens"])')" = "($(jget "$TMP/body" 'j["usage"]["prompt_tokens"]'), 36)"
curl -s -N --max-time 60 "$URL/v1/completions" \
  -d "{\"prompt\":\"$P\",\"max_tokens\":12,\"temperature\":1,\"seed\":40,\"n\":3,\"ignore_eos\":true,\"stream\":true}" >"$TMP/n3_sse"
python3 - "$TMP/n3_sse" "$TMP/n3" >"$TMP/n3_check" <<'PY'
import json, sys
texts, finished = {}, set()
for line in open(sys.argv[1]):
    if line.startswith("data: ") and line.strip() != "data: [DONE]":
        for c in json.loads(line[6:])["choices"]:
            texts[c["index"]] = texts.get(c["index"], "") + c["text"]
            if c["finish_reason"]: finished.add(c["index"])
whole = json.load(open(sys.argv[2]))
print(all(texts.get(c["index"]) == c["text"] for c in whole["choices"]) and finished == {0, 1, 2})
PY
check "streamed n = 3 adds up per index to the whole answer, each choice finished" test "$(cat "$TMP/n3_check")" = True
# A batch of prompts: choice k * n + i answers prompt k; with echo + logprobs + max_tokens 0 each
# prompt is scored exactly as it is alone (what evaluation harnesses send in batches).
batch='["Once upon a time", "The cat sat", [1, 403, 407]]'
code=$(post /v1/completions "{\"prompt\":$batch,\"max_tokens\":0,\"echo\":true,\"logprobs\":1}")
check "a batch of 3 prompts is 200" test "$code" = 200
cp "$TMP/body" "$TMP/batch"
for k in 0 1 2; do
  one=$(python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1])[int(sys.argv[2])]))' "$batch" "$k")
  post /v1/completions "{\"prompt\":$one,\"max_tokens\":0,\"echo\":true,\"logprobs\":1}" >/dev/null
  # Same text and tokens; logprobs within 1e-4 (batched with the others, a prompt's rows may run
  # through other kernel tiles).
  check "batch choice $k is its prompt scored alone" test "$(python3 - "$TMP/batch" "$TMP/body" "$k" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))["choices"][int(sys.argv[3])]
b = json.load(open(sys.argv[2]))["choices"][0]
la, lb = a["logprobs"], b["logprobs"]
same = a["text"] == b["text"] and la["tokens"] == lb["tokens"] and la["text_offset"] == lb["text_offset"]
close = all((x is None and y is None) or abs(x - y) < 1e-4 for x, y in zip(la["token_logprobs"], lb["token_logprobs"]))
print(same and close and len(la["token_logprobs"]) == len(lb["token_logprobs"]))
PY
)" = True
done
check "batch usage counts every prompt" test "$(jget "$TMP/batch" 'j["usage"]["prompt_tokens"]')" = 14
code=$(post /v1/completions '{"prompt":["Once upon a time","The cat"],"max_tokens":4,"temperature":0,"n":2}')
check "a batch with n = 2 has choices 0..3, prompt k at k * 2 + i" \
  test "$(jget "$TMP/body" '[c["index"] for c in j["choices"]] == [0, 1, 2, 3] and j["choices"][0]["text"] == j["choices"][1]["text"] and j["choices"][2]["text"] == j["choices"][3]["text"] and j["choices"][0]["text"] != j["choices"][2]["text"]')" = True
# With n choices a prompt is scored once (by choice 0) and every choice lists the scores.
for stream in false true; do
  curl -s -N --max-time 60 "$URL/v1/completions" \
    -d "{\"prompt\":$batch,\"max_tokens\":2,\"temperature\":0,\"echo\":true,\"logprobs\":0,\"n\":2,\"stream\":$stream}" >"$TMP/echo_n"
  check "echo with n = 2 (stream $stream): both choices of each prompt carry its scores" test "$(python3 - "$TMP/echo_n" <<'PY'
import json, sys
raw = open(sys.argv[1]).read()
if raw.startswith("data: "):
    lps = {}
    for line in raw.splitlines():
        if line.startswith("data: {"):
            for c in json.loads(line[6:])["choices"]:
                if c["logprobs"]:
                    lps.setdefault(c["index"], []).extend(c["logprobs"]["token_logprobs"])
else:
    lps = {c["index"]: c["logprobs"]["token_logprobs"] for c in json.loads(raw)["choices"]}
print(len(lps) == 6 and all(lps[2 * k] == lps[2 * k + 1] and len(lps[2 * k]) > 2 for k in range(3)))
PY
)" = True
done
big=$(python3 -c 'import json; print(json.dumps(["x"] * 65))')
check "a batch beyond max_queue (64) is 400, not a 429 no retry can clear" \
  test "$(post /v1/completions "{\"prompt\":$big,\"max_tokens\":1}"):$(grep -o 'split the batch' "$TMP/body")" = "400:split the batch"
code=$(curl -s -o "$TMP/body" -w '%{http_code}' --max-time 5 "$URL/v1/models")
check "/v1/models lists the model" test "$(jget "$TMP/body" 'j["object"] + " " + str(len(j["data"]))')" = "list 1"
model_id=$(jget "$TMP/body" 'j["data"][0]["id"]')
code=$(curl -s -o "$TMP/body" -w '%{http_code}' --max-time 5 "$URL/v1/models/$model_id")
check "/v1/models/ID retrieves the served model" test "$code:$(jget "$TMP/body" 'j["id"]')" = "200:$model_id"
code=$(curl -s -o "$TMP/body" -w '%{http_code}' --max-time 5 "$URL/v1/models/not-$model_id")
check "/v1/models/ID of another model is 404 model_not_found" test "$code:$(jget "$TMP/body" 'j["error"]["code"]')" = "404:model_not_found"
check "answers name the served model" test "$(post /v1/completions '{"prompt":"x","max_tokens":1}'):$(jget "$TMP/body" 'j["model"]')" = "200:$model_id"

# --- errors ------------------------------------------------------------------------------
check "malformed JSON is 400" test "$(post /generate '{"prompt":')" = 400
check "error body is OpenAI-shaped" test -n "$(jget "$TMP/body" 'j["error"]["message"] + j["error"]["type"]')"
check "... and says where the JSON broke off" grep -q "malformed JSON at line 1, column 11: .*unexpected end of input" "$TMP/body"
post /tokenize '[1,2]' >/dev/null
check "/tokenize: JSON that is not an object is named as such" grep -q "expected a JSON object" "$TMP/body"
# A POST without Content-Length or Transfer-Encoding (curl -X POST, no -d) has an empty body
# (RFC 9112, 6.3): a 400 about the JSON at once, not a bare 400 after the 30 s read timeout.
code=$(curl -s --max-time 10 -o "$TMP/body" -w '%{http_code}' -X POST "$URL/v1/completions")
check "a body-less POST is 400 within 10 s" test "$code" = 400
check "... naming the JSON body" grep -q "malformed JSON" "$TMP/body"
# curl -d sends Content-Type application/x-www-form-urlencoded, which httplib would parse as a
# form and refuse over 8 KiB with a 413: a 20 KB JSON body posted that way (as the README does)
# is served like any other.
python3 -c 'import json; print(json.dumps({"prompt": "Once", "max_tokens": 2, "user": "u" * 20000}))' >"$TMP/big.json"
code=$(curl -s --max-time 30 -o "$TMP/body" -w '%{http_code}' "$URL/v1/completions" --data-binary @"$TMP/big.json")
check "a 20 KB body with curl's default Content-Type is served" test "$code" = 200
check "negative max_tokens is 400" test "$(post /generate '{"prompt":"x","max_tokens":-1}')" = 400
check "400 names max_tokens" grep -q max_tokens "$TMP/body"
check "wrong type is 400" test "$(post /v1/completions '{"prompt":"x","temperature":"hot"}')" = 400
check "prompt + max_tokens over the context is 400" test "$(post /generate '{"prompt":"x","max_tokens":4000}')" = 400
check "context 400 names the limit" grep -q "context length" "$TMP/body"
check "bad chat role is 400" test "$(post /v1/chat/completions '{"messages":[{"role":"wizard","content":"x"}]}')" = 400
head -c 100000 /dev/zero | tr '\0' 'a' | sed 's/^/{"prompt":"/; s/$/"}/' >"$TMP/big.json"
code=$(curl -s -o "$TMP/body" -w '%{http_code}' --max-time 10 "$URL/generate" -H 'Content-Type: application/json' --data-binary @"$TMP/big.json")
check "body over --max-body-bytes is 413" test "$code" = 413
check "unknown route is 404" test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$URL/nope")" = 404
# A known path asked with another method: 405 naming the allowed methods (Allow header and body).
code=$(curl -s -D "$TMP/headers" -o "$TMP/body" -w '%{http_code}' --max-time 5 "$URL/generate")
check "GET /generate is 405" test "$code" = 405
check "405 has Allow: POST" grep -qi '^Allow: POST' "$TMP/headers"
check "405 body names the method" grep -q '"method_not_allowed"' "$TMP/body"
code=$(curl -s -D "$TMP/headers" -o /dev/null -w '%{http_code}' --max-time 5 -X POST "$URL/health")
check "POST /health is 405 with Allow: GET, HEAD" sh -c "test $code = 405 && grep -qi '^Allow: GET, HEAD' '$TMP/headers'"
code=$(curl -s -D "$TMP/headers" -o /dev/null -w '%{http_code}' --max-time 5 -X PUT "$URL/cache/pin")
check "PUT /cache/pin is 405 with Allow: POST, DELETE" sh -c "test $code = 405 && grep -qi '^Allow: POST, DELETE' '$TMP/headers'"
check "HEAD /health is 200" test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -I "$URL/health")" = 200

# --- metrics -----------------------------------------------------------------------------
curl -s --max-time 5 "$URL/metrics" >"$TMP/metrics"
for m in kvserve:num_requests_running kvserve:num_requests_waiting kvserve:kv_cache_usage_perc \
  'kvserve:kv_cache_bytes{state="used"}' 'kvserve:kv_cache_bytes{state="total"}' \
  kvserve:time_to_first_token_seconds_bucket kvserve:inter_token_latency_seconds_bucket \
  kvserve:e2e_request_latency_seconds_count kvserve:request_queue_time_seconds_sum \
  kvserve:prompt_tokens_total kvserve:generation_tokens_total kvserve:num_preemptions_total \
  'kvserve:requests_total{status="200"}' 'kvserve:requests_rejected_total{reason="invalid"}' process_resident_memory_bytes; do
  check "/metrics has $m" grep -qF "$m" "$TMP/metrics"
done
check "generation_tokens_total counted the requests" test "$(grep '^kvserve:generation_tokens_total ' "$TMP/metrics" | awk '{print ($2 > 0)}')" = 1
if command -v promtool >/dev/null 2>&1; then
  promtool check metrics <"$TMP/metrics" >"$TMP/promtool" 2>&1
  prc=$?
  # The names are fixed with colons (the vLLM convention); promtool's style lint flags every
  # colon. Parse errors (exit 1) and any other lint finding fail the test.
  others=$(grep -v "metric names should not contain ':'" "$TMP/promtool" | grep -v '^$')
  check "promtool parses /metrics (rc=$prc)" test "$prc" != 1
  check "promtool finds nothing but the colon style note" test -z "$others"
else
  echo "skip: promtool not installed, /metrics not checked with it"
fi
check "one structured log line per request" grep -q '"msg":"request".*"route":"/generate"' "$TMP/srv.err"

# A client that disconnects mid-stream: the server keeps serving.
curl -s -N --max-time 0.3 "$URL/v1/completions" -d '{"prompt":"x","max_tokens":400,"ignore_eos":true,"stream":true}' >/dev/null 2>&1
check "healthy after a client disconnect" test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$URL/health")" = 200

stop_server
check "SIGTERM exits 0" test "$STOP_RC" = 0

# --- backpressure and draining: recompute mode makes each request slow ------------------
# (a drain deadline far past the drained request's ~0.5 s, even under a sanitizer on a loaded
# machine, and below stop_server's 30 s wait)
if start_server --no-cache --max-seqs 1 --max-queue 1 --threads 1 --served-model-name "acme/story-1" \
  --shutdown-timeout 25; then
  check "--served-model-name names the model in the ready line" grep -q "ready: model acme/story-1," "$TMP/srv.out"
  check "... in /v1/models" test "$(curl -s --max-time 5 "$URL/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')" = "acme/story-1"
  check "... for /v1/models/ID" test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$URL/v1/models/acme/story-1")" = 200
  check "... and in answers" test "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"max_tokens":1}'):$(jget "$TMP/body" 'j["model"]')" = "200:acme/story-1"
  pids=()
  for i in 1 2 3 4 5 6 7 8; do
    curl -s -D "$TMP/h$i" -o "$TMP/b$i" -w '%{http_code}' --max-time 120 "$URL/generate" \
      -d '{"prompt":"Once upon a time","max_tokens":300,"ignore_eos":true}' >"$TMP/c$i" &
    pids+=($!)
  done
  wait "${pids[@]}"  # not a bare `wait`: that would also wait for the server
  n429=$(cat "$TMP"/c? | grep -o 429 | wc -l)
  n200=$(cat "$TMP"/c? | grep -o 200 | wc -l)
  check "a full queue answers 429 ($n429 of 8)" test "$n429" -ge 1
  check "accepted requests complete ($n200 of 8)" test "$n200" -ge 1
  k=0
  for i in 1 2 3 4 5 6 7 8; do [ "$(cat "$TMP/c$i")" = 429 ] && k=$i && break; done
  check "429 carries Retry-After" grep -qi '^retry-after:' "$TMP/h$k"
  check "429 body names the queue" grep -q queue "$TMP/b$k"
  # SIGTERM while a request runs: it is drained (completes), and the process exits 0.
  curl -s -o "$TMP/drain" -w '%{http_code}' --max-time 120 "$URL/generate" \
    -d '{"prompt":"Once upon a time","max_tokens":200,"ignore_eos":true}' >"$TMP/drain_code" &
  cpid=$!
  sleep 0.3
  stop_server
  wait "$cpid"
  check "SIGTERM with a request in flight exits 0" test "$STOP_RC" = 0
  check "the in-flight request was answered ($(cat "$TMP/drain_code"))" test "$(cat "$TMP/drain_code")" = 200
else
  fail "second server did not start"
fi

# SIGHUP (a closed terminal, an operator expecting a reload) drains like SIGTERM: its default
# action had killed the server mid-request.
if start_server; then
  curl -s -o /dev/null -w '%{http_code}' --max-time 120 "$URL/generate" \
    -d '{"prompt":"Once upon a time","max_tokens":200,"ignore_eos":true}' >"$TMP/hup_code" &
  cpid=$!
  sleep 0.3
  stop_server HUP
  wait "$cpid"
  check "SIGHUP with a request in flight exits 0 (rc $STOP_RC)" test "$STOP_RC" = 0
  check "... after answering it ($(cat "$TMP/hup_code"))" test "$(cat "$TMP/hup_code")" = 200
  check "... and says so in the log" grep -q "received SIGHUP, draining" "$TMP/srv.err"
else
  fail "the SIGHUP server did not start"
fi

# --- SIGTERM past the drain deadline: the running request is cut off but still answered -------
# (200 with finish_reason "cancelled", docs/operations.md; it once raced the engine loop's exit
# into a 500 "the engine loop stopped"), non-streamed and streamed.
if start_server --no-cache --threads 1 --shutdown-timeout 0; then
  curl -s -o "$TMP/cut" -w '%{http_code}' --max-time 60 "$URL/generate" \
    -d '{"prompt":"Once upon a time","max_tokens":2000,"ignore_eos":true}' >"$TMP/cut_code" &
  cpid=$!
  curl -sN -o "$TMP/cut_stream" --max-time 60 "$URL/v1/completions" \
    -d '{"prompt":"Once upon a time","max_tokens":2000,"ignore_eos":true,"stream":true}' &
  spid=$!
  wait_metric 'kvserve:num_requests_running' 2 100
  sleep 0.3
  stop_server
  wait "$cpid" "$spid"
  check "SIGTERM past the deadline exits 0" test "$STOP_RC" = 0
  check "the cut-off request was answered 200 ($(cat "$TMP/cut_code"))" test "$(cat "$TMP/cut_code")" = 200
  check "... with finish_reason cancelled" test "$(jget "$TMP/cut" 'j["finish_reason"]')" = cancelled
  check "the cut-off stream ends with a cancelled chunk and [DONE]" python3 -c '
import json, sys
events = [l[6:] for l in open(sys.argv[1]).read().splitlines() if l.startswith("data: ")]
assert events and events[-1] == "[DONE]", events[-3:]
last = json.loads(events[-2])
assert last["choices"][0]["finish_reason"] == "cancelled", last
' "$TMP/cut_stream"
else
  fail "third server did not start"
fi

# An IPv6 host prints a URL in brackets, and the printed curl line works (http://::1:PORT did not).
if python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' 2>/dev/null; then
  "$KVSERVE" serve -m "$STORIES" --host ::1 --port 0 >"$TMP/v6.out" 2>"$TMP/v6.err" &
  v6pid=$!
  for _ in $(seq 1 300); do grep -q '^curl ' "$TMP/v6.out" && break; sleep 0.1; done
  check "IPv6: the listening line brackets the address" grep -q '^kvserve: listening on http://\[::1\]:[0-9]* ' "$TMP/v6.out"
  check "IPv6: the printed curl line answers" sh -c "$(grep '^curl ' "$TMP/v6.out") | grep -q '\"text\"'"
  kill "$v6pid" 2>/dev/null
  wait "$v6pid" 2>/dev/null
else
  echo "skip: no IPv6 loopback"
fi
finish
