#!/usr/bin/env bash
# KV capacity per KV type, measured through the server (issue 6, item 6): at one fixed
# --kv-memory, how many concurrent PROMPT+GEN-token sequences `kvserve serve` keeps running for
# each KV element type. For each type it starts a server (prefix cache off, so distinct prompts
# cannot share blocks anyway and nothing is counted twice), fires N concurrent
# /v1/completions requests (distinct random token-id prompts, greedy, ignore_eos) and polls
# /metrics every --poll-ms (default 50) while they run.
#
#   bench/kv_capacity.sh [-b KVSERVE] [-m MODEL] [--kv-memory 256MiB] [--requests 56]
#       [--prompt-tokens 900] [--gen 100] [--ctx 1024] [--threads 2] [--vocab N]
#       [--types "f32 f16 bf16 q8_0 q4_0 k8v4"] [--out DIR] [--poll-ms 50] [--table-only]
#
# k8v4 is --kv-type-k q8_0 --kv-type-v q4_0. Default model: /tmp/cap/smollm-q8_0.gguf, made with
#   kvserve synth --preset smollm-135m --type q8_0 -o /tmp/cap/smollm-q8_0.gguf \
#       --vocab ../shared/models/llama.cpp-vocab/ggml-vocab-llama-spm.gguf -q
# Prints a markdown table (--table-only: from the files already in DIR, measuring nothing).
# DIR (default a temporary folder) gets <type>.plan.json (kvserve plan at --ctx PROMPT+GEN) and
# <type>.run.json (the driver's figures, described in the driver below).
# Columns: bytes/token and pool blocks from `kvserve plan`; "fit" = pool blocks / blocks per
# PROMPT+GEN-token sequence (whole blocks); "peak" = most sequences running in any sample (the
# scheduler admits by the first prefill chunk, so more start than can finish together);
# "running at 1st finish" = running in the last sample before the server finished its first
# request, i.e. when the oldest sequence reached PROMPT+GEN tokens (in brackets the KV blocks used
# then; blocks × block size / running = their mean length); "min running" = the fewest running
# in the last 15% of the time before that finish (drops a newcomer admitted into blocks that a
# preemption freed, but undercounts when admission of the first wave is still going on then);
# preemptions up to the "min running" sample / in the whole run; ratios of the first and fit to f16.
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KVSERVE="$HERE/../build/bin/kvserve"
STORIES="/tmp/cap/smollm-q8_0.gguf"  # server_lib.bash's start_server serves $STORIES
KV_MEMORY=256MiB N=56 PROMPT=900 GEN=100 CTX=1024 THREADS=2 VOCAB="" OUT="" POLL_MS=50 TABLE_ONLY=0
TYPES="f32 f16 bf16 q8_0 q4_0 k8v4"
while [ $# -gt 0 ]; do
  case "$1" in
    -b) KVSERVE="$2" ;;
    -m) STORIES="$2" ;;
    --kv-memory) KV_MEMORY="$2" ;;
    --requests) N="$2" ;;
    --prompt-tokens) PROMPT="$2" ;;
    --gen) GEN="$2" ;;
    --ctx) CTX="$2" ;;
    --threads) THREADS="$2" ;;
    --vocab) VOCAB="$2" ;;
    --types) TYPES="$2" ;;
    --out) OUT="$2" ;;
    --poll-ms) POLL_MS="$2" ;;
    --table-only) TABLE_ONLY=1; shift; continue ;;
    *) echo "unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
  shift 2
done
TMP="$(mktemp -d)"
source "$HERE/../tests/e2e/server_lib.bash"
[ -n "$OUT" ] || OUT="$TMP/out"
mkdir -p "$OUT"
# Token ids of the random prompts stay below the vocabulary size (inspect: "... (N items)").
[ -n "$VOCAB" ] || VOCAB=$("$KVSERVE" inspect "$STORIES" 2>/dev/null |
  sed -n 's/^ *tokenizer\.ggml\.tokens .*(\([0-9]*\) items)]$/\1/p')

type_flags() {
  case "$1" in
    k8v4) echo "--kv-type-k q8_0 --kv-type-v q4_0" ;;
    *) echo "--kv-type $1" ;;
  esac
}

# The driver: URL N PROMPT GEN VOCAB OUT_JSON POLL_MS. One thread per request, one polling /metrics.
# OUT_JSON: peak_running, steady_running ("min running" of the table) (+ steady_blocks_used: KV blocks held in the latest sample
# with that count; last_before_finish: running and blocks in the last sample before the first finish),
# preemptions_first_wave / preemptions_total, ok / failed requests (200 with exactly GEN tokens
# and PROMPT prompt tokens, or not), samples, wall_s.
drive() {
  python3 - "$@" <<'PY'
import http.client, json, random, sys, threading, time, urllib.parse
url = urllib.parse.urlparse(sys.argv[1])
n, prompt, gen, vocab, out = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
poll_s = float(sys.argv[7]) / 1000

def scrape():  # {metric name with labels: value} of one /metrics scrape
    c = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    c.request("GET", "/metrics")
    m = {}
    for line in c.getresponse().read().decode().splitlines():
        if line.startswith("kvserve:"):
            k, v = line.rsplit(" ", 1)
            m[k] = float(v)
    return m

# Prompt i: BOS then PROMPT-1 ids from a generator seeded with i, so all prompts differ from
# their first block on.
bodies = [json.dumps({"prompt": [1] + [random.Random(1000 + i).randrange(3, vocab) for _ in range(prompt - 1)],
                      "max_tokens": gen, "ignore_eos": True, "temperature": 0}) for i in range(n)]
results, first_finish, lock = [None] * n, [None], threading.Lock()

def client(i):
    try:
        c = http.client.HTTPConnection(url.hostname, url.port, timeout=3600)
        c.request("POST", "/v1/completions", bodies[i], {"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read().decode()
    except OSError as e:  # counted as a failure; the server cancels the request when its client goes
        with lock: results[i] = "request %d: %r" % (i, e)
        return
    with lock:
        if first_finish[0] is None: first_finish[0] = time.monotonic()
        u = json.loads(raw).get("usage", {}) if r.status == 200 else {}
        good = u.get("completion_tokens") == gen and u.get("prompt_tokens") == prompt
        results[i] = True if good else "HTTP %d %s" % (r.status, raw[:200])

# samples: (time, running, preemptions, blocks used, prompt tokens of finished requests)
samples, stop = [], threading.Event()
def poller():
    while not stop.is_set():
        t, m = time.monotonic(), scrape()
        samples.append((t, m.get("kvserve:num_requests_running", 0),
                        m.get("kvserve:num_preemptions_total", 0), m.get('kvserve:kv_blocks{state="used"}', 0),
                        m.get("kvserve:prompt_tokens_total", 0)))
        stop.wait(poll_s)

start = time.monotonic()
threads = [threading.Thread(target=poller)] + [threading.Thread(target=client, args=(i,)) for i in range(n)]
for t in threads: t.start()
for t in threads[1:]: t.join()
stop.set(); threads[0].join()
# Steady state: the fewest running in the last 15% of the time before the first request
# finished. "Before" is judged by the server: kvserve:prompt_tokens_total counts finished
# requests' prompts and comes from the same engine snapshot as the running gauge, whereas a
# client sees its answer only after the engine freed the sequence. Victims of preemption are
# the newest sequences, so the oldest ones, which have grown to ~PROMPT+GEN tokens by then, run throughout; a newcomer admitted into blocks that a
# preemption freed (and preempted again soon) only adds to some samples, never removes.
ff = next((s[0] for s in samples if s[4] > 0), first_finish[0] or time.monotonic())
before = [s for s in samples if s[0] < ff and s[4] == 0]
window = [s for s in before if s[0] >= ff - 0.15 * (ff - start)] or before[-1:] or [(0, 0, 0, 0, 0)]
low = min(s[1] for s in window)
steady = [s for s in window if s[1] == low][-1]  # the latest such sample: the longest sequences
failed = [r for r in results if r is not True]
rep = {"requests": n, "peak_running": int(max(s[1] for s in samples)), "steady_running": int(steady[1]),
       "steady_blocks_used": int(steady[3]),
       "last_before_finish": {"running": int(before[-1][1]), "blocks_used": int(before[-1][3])} if before else None,
       "preemptions_first_wave": int(steady[2]),  # read in the "steady" (min running) sample
       "preemptions_total": int(scrape().get("kvserve:num_preemptions_total", 0)),
       "ok": n - len(failed), "failed": len(failed), "first_failure": failed[0] if failed else None,
       "steady_window_samples": len(window), "samples": len(samples), "wall_s": round(time.monotonic() - start, 1)}
json.dump(rep, open(out, "w"))
print(json.dumps(rep))
PY
}

echo "model $STORIES, --kv-memory $KV_MEMORY, $N requests of $PROMPT prompt + $GEN generated tokens, --ctx $CTX, -t $THREADS" >&2
[ "$TABLE_ONLY" = 1 ] && TYPES_RUN="" || TYPES_RUN="$TYPES"
for t in $TYPES_RUN; do
  # shellcheck disable=SC2046  # type_flags is two or four words on purpose
  "$KVSERVE" plan -m "$STORIES" --memory "$KV_MEMORY" --ctx $((PROMPT + GEN)) $(type_flags "$t") --json \
    >"$OUT/$t.plan.json" 2>/dev/null
  # shellcheck disable=SC2046
  if ! start_server $(type_flags "$t") --kv-memory "$KV_MEMORY" --ctx "$CTX" --max-seqs 64 --max-queue 256 \
      --prefix-cache off --threads "$THREADS" --log-level warn; then
    echo "$t: server did not start" >&2; cat "$TMP/srv.err" >&2; exit 1
  fi
  echo "$t: $(drive "$URL" "$N" "$PROMPT" "$GEN" "$VOCAB" "$OUT/$t.run.json" "$POLL_MS")" >&2
  stop_server
done

# The table: one row per type, ratios to f16 (else to the first type).
python3 - "$OUT" $TYPES <<'PY'
import json, sys
out, types = sys.argv[1], sys.argv[2:]
rows = {t: (json.load(open(f"{out}/{t}.plan.json")), json.load(open(f"{out}/{t}.run.json"))) for t in types}
base = rows.get("f16", rows[types[0]])
name = {"k8v4": "K8V4 (K q8_0, V q4_0)"}
print("| KV type | KV bytes/token | pool blocks | fit (blocks / seq) | peak running | running at 1st finish "
      "(blocks used) | min running, last 15% before it | preemptions (1st wave / total) | at 1st finish vs f16 "
      "| fit vs f16 | requests ok | wall s |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for t in types:
    p, r = rows[t]
    last, blast = r["last_before_finish"], base[1]["last_before_finish"]
    print(f"| {name.get(t, t)} | {p['bytes_per_token']} | {p['num_blocks']} | {p['max_sequences']} "
          f"({p['num_blocks']} / {p['blocks_per_sequence']}) | {r['peak_running']} | {last['running']} "
          f"({last['blocks_used']}) | {r['steady_running']} | {r['preemptions_first_wave']} / {r['preemptions_total']} "
          f"| {last['running'] / max(1, blast['running']):.2f}x "
          f"| {p['max_sequences'] / max(1, base[0]['max_sequences']):.2f}x | {r['ok']}/{r['requests']} | {r['wall_s']} |")
PY
