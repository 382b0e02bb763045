#!/usr/bin/env bash
# tools/gpu-bench.sh: the served benchmark table (docs/PERF.md, "CUDA backend")
# on the GPU machine, in stages that each fit in one 10-minute call there.
# Run from the repo root with the release CUDA build in build-gpu/ (and
# .devlibs/ holding the shared libraries the binaries link that the GPU
# machine lacks, when it lacks any).
#
# usage: tools/gpu-bench.sh STAGE [SIZE] [TYPE]
#   STAGE  models  build the test models (cached: a second call reuses them)
#          check   cudacheck on each model (CUDA vs CPU logits, greedy agreement)
#          engine  engine batch-1 decode tok/s (enginebench --device cuda)
#          served  sluice serve --device cuda + loadgen at each concurrency level
#                  (and the same load against llama.cpp's llama-server when
#                  BENCH_LLAMA_SERVER is set)
#          prefix  prefix caching served (docs/PERF.md, "Prefix cache"): 64
#                  clients, one ~4096-token shared prefix + ~100-token
#                  distinct questions, max_tokens 32, run with the cache and
#                  with --no-prefix-cache: TTFT p50/p99 of both, their
#                  ratio, the hit rate from /metrics (SIZE default 8b, Q4)
#          calibrate  loadgen against tools/stubserver (no model, no GPU): the
#                  generator's own ceiling and CPU use at the served levels
#          report  rebuild report.md from the results so far
#          all     models check engine served, then report
#   SIZE   1b | 8b | 30b-a3b (mixture of experts) | all (1b and 8b; default all)
#   TYPE   q4 | q8 | all (default all)
# Every stage ends by copying all results so far and report.md to $OUT, so
# the last call's $OUT holds the whole table even though each call there gets
# an empty $OUT.
#
# Environment:
#   SLUICE_BUILD_DIR   build folder (default build-gpu; build when BENCH_TINY=1)
#   OUT                where results are copied (default /tmp/sluice-gpu-bench/out)
#   BENCH_STATE        results kept between calls (default /tmp/sluice-gpu-bench/state)
#   SLUICE_MODELS      model cache (default /tmp/sluice-gpu-bench/models)
#   BENCH_LEVELS       loadgen concurrency levels (default 1,64,256)
#   BENCH_DURATION     seconds per level (default 20; requests then run to completion)
#   BENCH_LG_THREADS   loadgen threads (default 4)
#   BENCH_SERVE_ARGS   extra flags for sluice serve
#   BENCH_EXTRA_JSON   members added to every request body (loadgen --extra-json),
#                      e.g. a response_format; results are then named with BENCH_TAG
#   BENCH_TAG          suffix of the served results' names (default none)
#   BENCH_TOKENIZER_DIR  llama3 tokenizer.json.xz + tokenizer_config.json
#                      (default tests/data/tokenizers/llama3)
#   BENCH_PREFIX_WORDS    prefix: shared words (default 4000, ~4100 tokens; tiny 400)
#   BENCH_PREFIX_CLIENTS  prefix: concurrent clients (default 64; tiny 8)
#   BENCH_LLAMA_SERVER a llama-server binary (optional): served then runs, after
#                      sluice's levels, the same load against llama-server on
#                      the same file (-m FILE --host 127.0.0.1 --port P -np LEVEL
#                      -c LEVEL*BENCH_LLAMA_CTX_PER_SLOT -ngl 999 --cont-batching
#                      BENCH_LLAMA_ARGS), one server per level; the results go to
#                      served-SIZE-TYPE-llamacpp.json and report.md's llama.cpp columns
#   BENCH_LLAMA_CTX_PER_SLOT  context per llama-server slot (default 512: a
#                      100-word prompt with its template, ~150 tokens, + 128 out)
#   BENCH_LLAMA_ARGS   extra flags for llama-server
#   BENCH_TINY=1       CPU dry run of this script: tiny-llama3 / tiny-llama stand
#                      in for 1b / 8b, --device cpu, levels 1,4,8, 3 s per level
# The load: --prompt-words 100 --max-tokens 128 --ignore-eos, streaming chat
# completions with usage, the load of docs/PERF.md's CUDA table. Exit 0 only if
# every step passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
stage=${1:-}
size_sel=${2:-all}
type_sel=${3:-all}
case "$stage" in models|check|engine|served|prefix|calibrate|report|all) ;; *)
  sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
[ "$stage" = prefix ] && [ $# -lt 2 ] && size_sel=8b
[ "$stage" = prefix ] && [ $# -lt 3 ] && type_sel=q4
case "$size_sel" in 1b|8b|30b-a3b|all) ;; *) echo "gpu-bench: SIZE is 1b, 8b, 30b-a3b or all" >&2; exit 2 ;; esac
case "$type_sel" in q4|q8|all) ;; *) echo "gpu-bench: TYPE is q4, q8 or all" >&2; exit 2 ;; esac

tiny=${BENCH_TINY:-0}
if [ "$tiny" = 1 ]; then
  build=${SLUICE_BUILD_DIR:-build}; device=cpu
  levels=${BENCH_LEVELS:-1,4,8}; duration=${BENCH_DURATION:-3}
  serve_extra=(--threads 2 --frontends 2 --kv-memory 256M)
  prefix_words=${BENCH_PREFIX_WORDS:-400}; prefix_clients=${BENCH_PREFIX_CLIENTS:-8}; prefix_ctx=2048
else
  build=${SLUICE_BUILD_DIR:-build-gpu}; device=cuda
  levels=${BENCH_LEVELS:-1,64,256}; duration=${BENCH_DURATION:-20}
  serve_extra=()
  prefix_words=${BENCH_PREFIX_WORDS:-4000}; prefix_clients=${BENCH_PREFIX_CLIENTS:-64}; prefix_ctx=8192
fi
root=/tmp/sluice-gpu-bench
out=${OUT:-$root/out}
state=${BENCH_STATE:-$root/state}
models=${SLUICE_MODELS:-$root/models}
lg_threads=${BENCH_LG_THREADS:-4}
mkdir -p "$out" "$state" "$models"
[ -d .devlibs ] && export LD_LIBRARY_PATH=$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for f in "$build/sluice" "$build/tools/mkmodel" "$build/tools/enginebench" "$build/tools/loadgen"; do
  [ -x "$f" ] || { echo "gpu-bench: $f missing (build first)" >&2; exit 2; }
done
if [ -n "${BENCH_LLAMA_SERVER:-}" ]; then   # refused before any model is built or server started
  [ -x "$BENCH_LLAMA_SERVER" ] && [ -f "$BENCH_LLAMA_SERVER" ] ||
    { echo "gpu-bench: BENCH_LLAMA_SERVER=$BENCH_LLAMA_SERVER is not an executable file" >&2; exit 2; }
fi
llama_ctx_per_slot=${BENCH_LLAMA_CTX_PER_SLOT:-512}
case "$llama_ctx_per_slot" in ''|*[!0-9]*|0*)
  echo "gpu-bench: BENCH_LLAMA_CTX_PER_SLOT is a positive number of tokens" >&2; exit 2 ;; esac
log=$state/gpu-bench.log
say() { echo "$*" | tee -a "$log"; }
status=0
t0=$(date +%s)
say "== gpu-bench $stage $size_sel $type_sel: $(date -u +%FT%TZ) build=$build device=$device tiny=$tiny"

sizes=(1b 8b); [ "$size_sel" != all ] && sizes=("$size_sel")
types=(Q4_K_M Q8_0)
[ "$type_sel" = q4 ] && types=(Q4_K_M)
[ "$type_sel" = q8 ] && types=(Q8_0)
preset_of() {   # size -> mkmodel preset
  if [ "$tiny" = 1 ]; then [ "$1" = 1b ] && echo tiny-llama3 || echo tiny-llama; else echo "$1"; fi
}

# ---- models: written to a temporary name, renamed when complete, so a call
# cut off by the time limit never leaves a half model that a later call reuses
tok_dir=${BENCH_TOKENIZER_DIR:-tests/data/tokenizers/llama3}
tok_json=$models/llama3-tokenizer.json
model_path() { echo "$models/$(preset_of "$1")-$2.gguf"; }
ensure_tokenizer() {
  [ -s "$tok_json" ] && return 0
  { xz -dc "$tok_dir/tokenizer.json.xz" 2>/dev/null ||
    python3 -c 'import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$tok_dir/tokenizer.json.xz"; } \
    > "$tok_json.tmp" && mv "$tok_json.tmp" "$tok_json"
}
ensure_model() {   # size type
  local f; f=$(model_path "$1" "$2")
  [ -s "$f" ] && return 0
  ensure_tokenizer || { say "tokenizer: cannot decompress $tok_dir/tokenizer.json.xz"; return 1; }
  local t; t=$(date +%s)
  if "$build/tools/mkmodel" -o "$f.tmp" --preset "$(preset_of "$1")" --type "$2" --tokenizer "$tok_json" \
       --tokenizer-config "$tok_dir/tokenizer_config.json" --peak 8 > "$state/mkmodel-$1-$2.log" 2>&1; then
    mv "$f.tmp" "$f"; say "model $1 $2: $f ($(( $(date +%s) - t ))s, $(du -h "$f" | cut -f1))"
  else
    rm -f "$f.tmp"; say "model $1 $2: mkmodel FAILED (see mkmodel-$1-$2.log)"; return 1
  fi
}

# ---- check: CUDA vs CPU on the model, plus cudacheck's own batch-1 timing
run_check() {   # size type
  local f; f=$(model_path "$1" "$2")
  local check=$build/tools/cudacheck
  if [ ! -x "$check" ]; then say "check $1 $2: skipped ($check not built: CUDA builds only)"; return 0; fi
  "$check" --device "$device" --prompt 100 --gen 16 --seqs 3 --bench 128 --batches 1 "$f" > "$state/check-$1-$2.log" 2>&1
  local rc=$?
  say "check $1 $2: rc=$rc $(grep -m1 '^result' "$state/check-$1-$2.log")"
  [ $rc -eq 0 ]
}

# ---- engine: batch-1 decode, 100-token prompt, 128 steps, best of 3
run_engine() {
  local f; f=$(model_path "$1" "$2")
  local thr=(); [ "$tiny" = 1 ] && thr=(--threads 2)
  "$build/tools/enginebench" -m "$f" --device "$device" --batch 1 --prompt 100 --gen 128 --reps 3 "${thr[@]}" \
    > "$state/engine-$1-$2.log" 2>&1
  local rc=$?
  say "engine $1 $2: rc=$rc $(grep -m1 '^decode' "$state/engine-$1-$2.log")"
  [ $rc -eq 0 ]
}

# ---- served: sluice serve + loadgen
serve_pid=
stop_server() {
  [ -n "$serve_pid" ] || return 0
  kill -TERM "$serve_pid" 2>/dev/null
  for _ in $(seq 200); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$serve_pid" 2>/dev/null; wait "$serve_pid" 2>/dev/null
  serve_pid=
}
trap stop_server EXIT
start_server() {   # what size type log [serve flags...]: sets port and serve_pid
  local what=$1 f; f=$(model_path "$2" "$3")
  local slog=$4
  shift 4
  setsid "$build/sluice" serve -m "$f" --device "$device" --host 127.0.0.1 --port 0 --max-seqs 256 \
    --admin-socket "$state/admin-$$.sock" --drain-delay 0 --drain-timeout 5 \
    "${serve_extra[@]}" "$@" ${BENCH_SERVE_ARGS:-} > "$slog" 2>&1 &
  serve_pid=$!
  port=""
  for _ in $(seq 1200); do   # model load + CUDA start: up to 2 minutes
    port=$(grep -m1 -o 'listening on http://[^ ]*' "$slog" | sed 's/.*://')
    [ -n "$port" ] && break
    kill -0 "$serve_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$port" ]; then say "$what: sluice serve did not start (see $(basename "$slog"))"; stop_server; return 1; fi
  wait_ready "$port" /ready || { say "$what: not ready"; stop_server; return 1; }
}
wait_ready() {   # port path: until GET path answers 200 (2 minutes at most)
  python3 - "$1" "$2" <<'EOF'
import sys, time, urllib.request
for _ in range(1200):
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}{sys.argv[2]}", timeout=1).status == 200:
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.1)
sys.exit(1)
EOF
}
metrics() {   # port file: the server's /metrics
  python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
    "http://127.0.0.1:$1/metrics" > "$2" 2>&1
}
served_load() {   # port [loadgen flags...]: the served load against 127.0.0.1:port
  local p=$1; shift
  local lg=("$build/tools/loadgen" --url "127.0.0.1:$p" --endpoint chat --prompt-words 100 --max-tokens 128
            --ignore-eos --threads "$lg_threads" --timeout 300)
  [ -n "${BENCH_EXTRA_JSON:-}" ] && lg+=(--extra-json "$BENCH_EXTRA_JSON")
  "${lg[@]}" "$@"
}
run_served() {
  start_server "served $1 $2" "$1" "$2" "$state/serve-$1-$2.log" --ctx-size 2048 || return 1
  local tag=${BENCH_TAG:+-$BENCH_TAG}
  served_load "$port" --concurrency 8 --requests 16 > "$state/warmup-$1-$2.log" 2>&1   # first requests pay one-time costs
  served_load "$port" --concurrency "$levels" --duration "$duration" --json "$state/served-$1-$2$tag.json" \
    > "$state/served-$1-$2$tag.log" 2>&1
  local rc=$?
  say "served $1 $2${BENCH_TAG:+ ($BENCH_TAG)}: loadgen rc=$rc"
  sed -n '2,$p' "$state/served-$1-$2$tag.log" | tee -a "$log"
  metrics "$port" "$state/metrics-$1-$2$tag.txt"   # the worker's counters after the load
  stop_server
  if [ -n "${BENCH_LLAMA_SERVER:-}" ]; then run_llamacpp "$1" "$2" "$tag" || rc=1; fi
  [ $rc -eq 0 ]
}

# ---- llama.cpp: the same load against llama-server on the same file. Its
# slots are fixed at start and -c is split between them, so each level gets
# its own server: LEVEL slots of BENCH_LLAMA_CTX_PER_SLOT tokens. The levels'
# results are merged into served-SIZE-TYPE[-TAG]-llamacpp.json, laid out like
# sluice's.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
run_llamacpp() {   # size type tag
  local f; f=$(model_path "$1" "$2")
  local name=served-$1-$2$3-llamacpp rc=0 c
  rm -f "$state/$name".json "$state/$name"-c*.json
  for c in ${levels//,/ }; do
    local what="llamacpp $1 $2 c=$c" slog=$state/llama-server-$1-$2$3-c$c.log
    port=$(free_port)
    # BENCH_LLAMA_ARGS unquoted on purpose: several words, like BENCH_SERVE_ARGS
    setsid "$BENCH_LLAMA_SERVER" -m "$f" --host 127.0.0.1 --port "$port" -np "$c" -c $((c * llama_ctx_per_slot)) \
      -ngl 999 --cont-batching ${BENCH_LLAMA_ARGS:-} > "$slog" 2>&1 &
    serve_pid=$!
    if ! wait_ready "$port" /health; then
      say "$what: llama-server not ready (see $(basename "$slog"))"; stop_server; rc=1; continue
    fi
    local warm=$(( c < 8 ? c : 8 ))
    served_load "$port" --concurrency "$warm" --requests "$warm" > "$state/warmup-$name-c$c.log" 2>&1
    served_load "$port" --concurrency "$c" --duration "$duration" --json "$state/$name-c$c.json" \
      > "$state/$name-c$c.log" 2>&1
    local lrc=$?
    stop_server
    say "$what: loadgen rc=$lrc"
    sed -n '2,$p' "$state/$name-c$c.log" | tee -a "$log"
    [ $lrc -eq 0 ] || rc=1
  done
  python3 - "$state/$name" "$levels" <<'EOF' || { say "llamacpp $1 $2: no level has results"; rc=1; }
import json, sys
base, levels = sys.argv[1], sys.argv[2].split(",")
doc = None
for c in levels:
    try:
        d = json.load(open(f"{base}-c{c}.json"))
    except (OSError, ValueError):
        continue
    if doc is None:
        doc = dict(d, levels=[], server="llama.cpp llama-server")
    doc["levels"] += d["levels"]
if doc is None:
    sys.exit(1)
json.dump(doc, open(f"{base}.json", "w"), indent=1)
EOF
  return $rc
}

# ---- prefix: every client's prompt opens with the same long text (a system
# prompt, a document); the distinct question follows. Run with the cache on
# (the default) and off. The warm-up's prompts share nothing, so the measured
# load starts on an empty cache: the first arrivals find the prefix in flight
# and wait for its blocks (docs/SCHEDULER.md §5a). The hit rate is the
# /metrics counters' growth over the measured load.
run_prefix() {   # size type
  local mode rc=0
  for mode in cache nocache; do
    local name=prefix-$1-$2-$mode flags=(--ctx-size "$prefix_ctx")
    [ "$mode" = nocache ] && flags+=(--no-prefix-cache)
    start_server "prefix $1 $2 $mode" "$1" "$2" "$state/serve-$name.log" "${flags[@]}" || { rc=1; continue; }
    local lg=("$build/tools/loadgen" --url "127.0.0.1:$port" --endpoint chat --max-tokens 32 --ignore-eos
              --threads "$lg_threads" --timeout 600)
    "${lg[@]}" --prompt-words 100 --concurrency 8 --requests 16 > "$state/warmup-$name.log" 2>&1
    metrics "$port" "$state/metrics-$name-before.txt"
    "${lg[@]}" --shared-prefix-words "$prefix_words" --prompt-words 100 --concurrency "$prefix_clients" \
      --duration "$duration" --json "$state/$name.json" > "$state/$name.log" 2>&1
    local lrc=$?
    metrics "$port" "$state/metrics-$name-after.txt"
    stop_server
    say "prefix $1 $2 $mode: loadgen rc=$lrc"
    sed -n '2,$p' "$state/$name.log" | tee -a "$log"
    [ $lrc -eq 0 ] || rc=1
  done
  python3 - "$state" "$1-$2" <<'EOF' | tee -a "$log" > "$state/prefix-$1-$2.txt"
import json, re, sys
state, tag = sys.argv[1], sys.argv[2]
def counter(path, name):
    m = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", open(path).read(), re.M)
    return float(m.group(1)) if m else 0.0
res = {}
for mode in ("cache", "nocache"):
    try:
        lv = json.load(open(f"{state}/prefix-{tag}-{mode}.json"))["levels"][0]
        d = {k: counter(f"{state}/metrics-prefix-{tag}-{mode}-after.txt", k) -
                counter(f"{state}/metrics-prefix-{tag}-{mode}-before.txt", k)
             for k in ("sluice_prefix_cache_hits_total", "sluice_prefix_cache_queries_total")}
    except (OSError, ValueError, IndexError, KeyError):
        continue
    q = d["sluice_prefix_cache_queries_total"]
    res[mode] = (lv, d["sluice_prefix_cache_hits_total"] / q if q else 0.0)
    print(f"prefix {tag} {mode}: TTFT p50 {lv['ttft_ms']['p50']:.1f} ms p99 {lv['ttft_ms']['p99']:.1f} ms, "
          f"{lv['requests_ok']} requests, {lv['errors_total']} errors, prompt tokens {lv['prompt_tokens']}, "
          f"hit rate {res[mode][1]:.3f}")
if len(res) == 2:
    a, b = res["cache"][0]["ttft_ms"], res["nocache"][0]["ttft_ms"]
    print(f"prefix {tag}: TTFT with the cache / without: p50 {a['p50'] / b['p50']:.3f}, p99 {a['p99'] / b['p99']:.3f}")
EOF
  return $rc
}

# ---- calibrate: the load generator against the stub server. Unpaced (tokens
# as fast as the stub writes them: the generator's ceiling), then paced above
# twice the 1B served goals: 2,500 tok/s on one stream, and 256 streams of
# 500 tok/s (128,000 tok/s offered).
run_calibrate() {
  local stub_threads=4; [ "$tiny" = 1 ] && stub_threads=1
  local name
  for name in unpaced paced-c1 paced-c256; do
    local lv=$levels pace=()
    case $name in
      paced-c1)   lv=1;   pace=(--token-us 400) ;;
      paced-c256) lv=256; pace=(--token-us 2000) ;;
    esac
    "$build/tools/stubserver" --threads "$stub_threads" "${pace[@]}" > "$state/stub-$name.log" 2>&1 &
    local spid=$! port=""
    for _ in $(seq 50); do
      port=$(grep -m1 -o 'listening on http://[^ ]*' "$state/stub-$name.log" | sed 's/.*://')
      [ -n "$port" ] && break; sleep 0.1
    done
    "$build/tools/loadgen" --url "127.0.0.1:$port" --concurrency "$lv" --duration "${BENCH_CAL_DURATION:-10}" \
      --prompt-words 100 --max-tokens 128 --ignore-eos --threads "$lg_threads" \
      --json "$state/calibrate-$name.json" > "$state/calibrate-$name.log" 2>&1
    local rc=$?
    local cpu; cpu=$(awk '{printf "%.1f", ($14+$15)/100}' "/proc/$spid/stat" 2>/dev/null)
    kill "$spid"; wait "$spid" 2>/dev/null
    say "calibrate $name: loadgen rc=$rc; stub CPU ${cpu:-?} s (${stub_threads} threads)"
    sed -n '2,$p' "$state/calibrate-$name.log" | tee -a "$log"
    [ $rc -eq 0 ] || status=1
  done
}

# ---- report: markdown from whatever results the state folder holds
report() {
  local gpu; gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  python3 - "$state" "$device" "$levels" "$tiny" "${gpu:-no GPU}" > "$state/report.md" <<'EOF'
import datetime, json, os, re, sys
state, device, levels = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")]
tiny, gpu = sys.argv[4] == "1", sys.argv[5]
# the goals of docs/PERF.md's CUDA table (Q4_K_M rows); a tiny dry run has none
goals = {} if tiny else {("1b", "Q4_K_M"): (1500, {1: 1000, 64: 20000, 256: 40000}),
                         ("8b", "Q4_K_M"): (550, {1: 400, 64: 8000, 256: 15000})}
def engine(size, typ):
    try:
        m = re.search(r"^decode: .*?: ([\d.]+) tok/s", open(f"{state}/engine-{size}-{typ}.log").read(), re.M)
        return float(m.group(1)) if m else None
    except OSError:
        return None
def check(size, typ):
    try:
        m = re.search(r"^result .*", open(f"{state}/check-{size}-{typ}.log").read(), re.M)
        return m.group(0).split()[-1] if m else "?"
    except OSError:
        return "-"
def fmt(x, goal=None):
    if x is None:
        return "-"
    s = f"{x:,.0f}"
    return s + (f" ({'ok' if x >= goal else 'below'} {goal:,})" if goal else "")
def levels_of(name):   # concurrency -> level of a loadgen JSON, {} if none
    try:
        return {x["concurrency"]: x for x in json.load(open(f"{state}/{name}.json"))["levels"]}
    except (OSError, ValueError, KeyError):
        return {}
# llama.cpp's llama-server under the same load (BENCH_LLAMA_SERVER): its columns appear when it ran
llama = {(s, t): levels_of(f"served-{s}-{t}-llamacpp") for s in ("1b", "8b") for t in ("Q4_K_M", "Q8_0")}
has_llama = any(llama.values())
rows, detail = [], []
for size in ("1b", "8b"):
    for typ in ("Q4_K_M", "Q8_0"):
        e = engine(size, typ)
        lv = levels_of(f"served-{size}-{typ}")
        if e is None and not lv and check(size, typ) == "-":
            continue
        eg, sg = goals.get((size, typ), (None, {}))
        served = [fmt(lv[c]["output_tok_s"], sg.get(c)) if c in lv else "-" for c in levels]
        ttft1 = f"{lv[levels[0]]['ttft_ms']['p50']:.1f}" if levels[0] in lv else "-"
        rows.append(f"| {size} {typ} | {check(size, typ)} | {fmt(e, eg)} | " + " | ".join(served) + f" | {ttft1} |")
        for c in levels:
            if c not in lv:
                continue
            x = lv[c]
            row = (f"| {size} {typ} | {c} | {x['output_tok_s']:,.0f} | {x['requests_ok']} | {x['errors_total']} | "
                   f"{x['ttft_ms']['p50']:.1f} / {x['ttft_ms']['p99']:.1f} | "
                   f"{x['itl_ms']['p50']:.2f} / {x['itl_ms']['p99']:.2f} | {x['e2e_ms']['p50']:.0f} | "
                   f"{x['content_chunks'] / max(1, x['completion_tokens']):.3f} | "
                   f"{x['cpu']['percent_of_one_core']:.0f} / {x['cpu']['busiest_thread_percent']:.0f} |")
            if has_llama:
                y = llama[(size, typ)].get(c)
                if y is None:
                    row += " - | - | - | - |"
                else:
                    ratio = f"{x['output_tok_s'] / y['output_tok_s']:.3g}x" if y["output_tok_s"] > 0 else "-"
                    row += (f" {y['output_tok_s']:,.0f} | {y['ttft_ms']['p50']:.1f} | {ratio} | "
                            f"{y['errors_total']} / {y.get('retried_stale', 0)} |")
            detail.append(row)
print(f"# gpu-bench results: device {device}, {gpu}, {datetime.date.today()}"
      + (" (tiny stand-in models: tiny-llama3 for 1b, tiny-llama for 8b)" if tiny else "") + "\n")
print("Output tok/s, streaming chat completions through `sluice serve`, 100-word prompts, "
      "128 output tokens, ignore_eos; engine = enginebench batch-1 decode."
      + (" llama.cpp: the same load against llama-server on the same file, as many slots as clients;"
         " retried = requests sent again after it closed a kept-alive connection." if has_llama else "") + "\n")
print("| model | check | engine batch-1 decode tok/s | " + " | ".join(f"served c={c} tok/s" for c in levels)
      + f" | TTFT p50 ms c={levels[0]} |")
print("| --- | --- | --- | " + " | ".join("---" for _ in levels) + " | --- |")
print("\n".join(rows))
print("\n| model | c | out tok/s | requests | errors | TTFT p50 / p99 ms | ITL p50 / p99 ms | E2E p50 ms "
      "| chunks/token | loadgen CPU % (all / busiest thread) |"
      + (" llama.cpp tok/s | llama.cpp TTFT p50 ms | sluice / llama.cpp tok/s | llama.cpp errors / retried |"
         if has_llama else ""))
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |" + (" --- | --- | --- | --- |" if has_llama else ""))
print("\n".join(detail))
cal = []
for name in ("unpaced", "paced-c1", "paced-c256"):
    try:
        d = json.load(open(f"{state}/calibrate-{name}.json"))
    except (OSError, ValueError):
        continue
    for x in d["levels"]:
        cal.append(f"| {name} | {x['concurrency']} | {x['output_tok_s']:,.0f} | {x['errors_total']} | "
                   f"{x['ttft_ms']['p50']:.2f} / {x['ttft_ms']['p99']:.2f} | {x['itl_ms']['p50']:.2f} / {x['itl_ms']['p99']:.2f} | "
                   f"{x['cpu']['percent_of_one_core']:.0f} / {x['cpu']['busiest_thread_percent']:.0f} |")
for tag in ("1b-Q4_K_M", "1b-Q8_0", "8b-Q4_K_M", "8b-Q8_0"):
    try:
        lines = open(f"{state}/prefix-{tag}.txt").read().strip()
    except OSError:
        continue
    print(f"\nPrefix cache, {tag}: one shared prefix + 100-word questions, max_tokens 32, with and without the cache:\n")
    print("\n".join("    " + l for l in lines.splitlines()))
if cal:
    print("\nLoad generator calibration against tools/stubserver (unpaced; paced 400 us/token at c=1, 2000 us/token at c=256):\n")
    print("| stub | c | out tok/s | errors | TTFT p50 / p99 ms | ITL p50 / p99 ms | loadgen CPU % (all / busiest thread) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(cal))
EOF
}

publish() {   # everything so far to $OUT (each call on the GPU machine gets an empty one)
  report || say "report: failed"
  [ "$(cd "$state" && pwd)" = "$(cd "$out" && pwd)" ] || cp -f "$state"/*.log "$state"/*.json "$state"/report.md "$out"/ 2>/dev/null
  say "== gpu-bench $stage: $([ $status -eq 0 ] && echo PASS || echo FAIL) in $(( $(date +%s) - t0 ))s; results in $out"
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true; } | tee -a "$log"
if [ "$stage" = calibrate ]; then
  run_calibrate
elif [ "$stage" != report ]; then
  for size in "${sizes[@]}"; do
    for type in "${types[@]}"; do
      ensure_model "$size" "$type" || { status=1; continue; }
      case "$stage" in
        check)  run_check "$size" "$type" || status=1 ;;
        engine) run_engine "$size" "$type" || status=1 ;;
        served) run_served "$size" "$type" || status=1 ;;
        prefix) run_prefix "$size" "$type" || status=1 ;;
        all)    run_check "$size" "$type" || status=1
                run_engine "$size" "$type" || status=1
                run_served "$size" "$type" || status=1 ;;
      esac
    done
  done
fi
publish
cat "$state/report.md"
exit $status
