#!/usr/bin/env bash
# `kvserve serve` with an API key and CORS origins: requests without the key (or with a wrong
# one) get 401 (their body read and dropped, so a keep-alive connection stays in step), probes
# and /metrics stay open, the key never shows in
# --print-config, a browser's preflight gets its answer, `bench --server` sends the key.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/serve_common.bash"

KEY="sk-test-$RANDOM$RANDOM"
KVSERVE_API_KEY="$KEY" "$KVSERVE" serve -m "$STORIES" --print-config >"$TMP/pc" 2>&1
check "--print-config does not show the key" bash -c "! grep -q -- '$KEY' '$TMP/pc'"
check "--print-config says a key is set" grep -q '^# api_key: set (not shown)$' "$TMP/pc"
printf '%s\n' "$KEY" >"$TMP/keyfile"
"$KVSERVE" serve -m "$STORIES" --api-key x --api-key-file "$TMP/keyfile" --port 0 >/dev/null 2>"$TMP/both"
check "api_key and api_key_file together: exit 2" test $? = 2
check "... naming both" grep -q "api_key and api_key_file" "$TMP/both"
"$KVSERVE" serve -m "$STORIES" --cors-origins "ui.example.com" --port 0 >/dev/null 2>"$TMP/cors"
check "a malformed origin: exit 2" test $? = 2

if ! start_server --api-key-file "$TMP/keyfile" --cors-origins "https://ui.example.com"; then
  fail "server did not become healthy"; cat "$TMP/srv.err"; finish; exit 1
fi
code() { curl -s -o "$TMP/body" -D "$TMP/head" -w '%{http_code}' --max-time 30 "$@"; }
BODY='{"prompt":"Once upon a time","max_tokens":4,"temperature":0}'
check "no key: 401" test "$(code "$URL/v1/completions" -H 'Content-Type: application/json' -d "$BODY")" = 401
check "... OpenAI-shaped, code invalid_api_key" test "$(jget "$TMP/body" 'j["error"]["code"]')" = invalid_api_key
check "... with WWW-Authenticate: Bearer" grep -qi '^www-authenticate: bearer' "$TMP/head"
check "a wrong key: 401" test "$(code "$URL/v1/completions" -H "Authorization: Bearer ${KEY}x" -d "$BODY")" = 401
check "the key from the file: 200" test "$(code "$URL/v1/completions" -H "Authorization: Bearer $KEY" -d "$BODY")" = 200
check "... with text" test -n "$(jget "$TMP/body" 'j["choices"][0]["text"]')"
for route in /generate /tokenize /cache/flush; do
  check "$route without the key: 401" test "$(code -X POST "$URL$route" -d '{"content":"x","prompt":"x"}')" = 401
done
check "/v1/models without the key: 401" test "$(code "$URL/v1/models")" = 401
for route in /health /live /metrics; do
  check "$route needs no key" test "$(code "$URL$route")" = 200
done
check "rejections are counted" test "$(metric 'kvserve:requests_rejected_total{reason="unauthorized"}')" = 6

# A browser page at an allowed origin: the preflight (no credentials) is answered, the real
# request carries the origin back; another origin gets no CORS headers.
code -X OPTIONS "$URL/v1/chat/completions" -H "Origin: https://ui.example.com" \
  -H "Access-Control-Request-Method: POST" -H "Access-Control-Request-Headers: authorization, content-type" >"$TMP/pf"
check "preflight from an allowed origin: 204" test "$(cat "$TMP/pf")" = 204
check "... allows the origin" grep -qi '^access-control-allow-origin: https://ui.example.com' "$TMP/head"
check "... the methods" grep -qi '^access-control-allow-methods: .*POST' "$TMP/head"
check "... and the requested headers" grep -qi '^access-control-allow-headers: authorization, content-type' "$TMP/head"
code "$URL/v1/models" -H "Origin: https://ui.example.com" -H "Authorization: Bearer $KEY" >/dev/null
check "a request from the allowed origin carries it back" grep -qi '^access-control-allow-origin: https://ui.example.com' "$TMP/head"
code "$URL/v1/models" -H "Origin: https://evil.example" -H "Authorization: Bearer $KEY" >/dev/null
check "another origin gets no CORS header" bash -c "! grep -qi '^access-control-allow-origin' '$TMP/head'"

# Keep-alive clients (Python's http.client, as SDKs do): an answered 401 on one connection does
# not break the next request.
python3 - "$URL" "$KEY" >"$TMP/ka" 2>&1 <<'PY'
import http.client, json, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1]); key = sys.argv[2]
c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
body = json.dumps({"prompt": "Once upon a time", "max_tokens": 3, "temperature": 0, "padding": "x" * 20000})
c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
r = c.getresponse(); r.read(); first = r.status
c.request("POST", "/v1/completions", body, {"Content-Type": "application/json", "Authorization": "Bearer " + key})
r = c.getresponse(); second = r.status; r.read()
print(first, second)
PY
check "401 then 200 through one keep-alive client ($(cat "$TMP/ka"))" test "$(cat "$TMP/ka")" = "401 200"
# The 401's body (20 KB, one line) was read as part of its request, not parsed as a next one:
# no phantom 400 or 414 was answered.
curl -s --max-time 10 "$URL/metrics" >"$TMP/m"
check "no phantom request after the 401s" test "$(grep -cE '^kvserve:requests_total\{status="(400|414)"\} [1-9]' "$TMP/m")" = 0
check "the internal 401 route is no route of the API" test "$(code "$URL/_kvserve/unauthorized" -H "Authorization: Bearer $KEY")" = 404

"$KVSERVE" bench --server "$URL" --concurrency 2 --requests 2 --prompt-words 8 --gen 4 >"$TMP/lg" 2>&1
check "bench --server without the key reports the 401s" grep -q "401" "$TMP/lg"
KVSERVE_API_KEY="$KEY" "$KVSERVE" bench --server "$URL" --concurrency 2 --requests 2 --prompt-words 8 --gen 4 --json >"$TMP/lg" 2>&1
check "bench --server with KVSERVE_API_KEY: no errors" test "$(jget "$TMP/lg" 'sum(l["errors"] for l in j["levels"])')" = 0
stop_server
check "it exits 0 ($STOP_RC)" test "$STOP_RC" = 0
finish
