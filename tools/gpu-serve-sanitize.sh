#!/usr/bin/env bash
# tools/gpu-serve-sanitize.sh: compute-sanitizer memcheck and racecheck on a
# short serving run of `sluice serve --device cuda`, on the GPU machine.
#
# The worker is started through SLUICE_WORKER_WRAPPER (master/worker_exec.h):
# the master execs `compute-sanitizer --tool T ... sluice __worker ...`, so
# the tool instruments the process that owns the GPU whether or not it
# follows children of the process it was started on. Each run: a tiny
# llama3-vocabulary model, three requests (streamed chat with the device
# sampler's temperature/top-p/penalties/logprobs path, greedy completion,
# a batch of four at once), SIGTERM to the master, then the tool's summary.
# Exit 0 only if both tools ran on the worker and found nothing.
#
# usage: tools/gpu-serve-sanitize.sh BUILD_DIR TOKENIZER_DIR
#   env OUT (logs; default /tmp/sluice-serve-sanitize), SLUICE_MODELS (model cache)
set -uo pipefail
build=${1:?usage: gpu-serve-sanitize.sh BUILD_DIR TOKENIZER_DIR}
tokdir=${2:?usage: gpu-serve-sanitize.sh BUILD_DIR TOKENIZER_DIR}
out=${OUT:-/tmp/sluice-serve-sanitize}
models=${SLUICE_MODELS:-/tmp/sluice-gpu-models}
mkdir -p "$out" "$models"
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$cs" ] || { echo "serve-sanitize: compute-sanitizer not found"; exit 2; }
model=$models/serve-tiny-llama3-Q4_K_M.gguf
tok_json=$tokdir/tokenizer.json
if [ ! -s "$tok_json" ]; then   # the test data keeps it compressed
  tok_json=$models/llama3-tokenizer.json
  [ -s "$tok_json" ] || { xz -dc "$tokdir/tokenizer.json.xz" 2>/dev/null ||
    python3 -c 'import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$tokdir/tokenizer.json.xz"; } \
    > "$tok_json.tmp" && mv "$tok_json.tmp" "$tok_json"
fi
[ -s "$model" ] || "$build/tools/mkmodel" -o "$model" --preset tiny-llama3 --type Q4_K_M \
  --tokenizer "$tok_json" --tokenizer-config "$tokdir/tokenizer_config.json" --peak 8 >/dev/null \
  || { echo "serve-sanitize: mkmodel failed"; exit 2; }

status=0
run_tool() {
  local tool=$1 extra=$2 gemm=$3 log=$out/serve-$1
  rm -f "$log".*.log "$log.serve.log"
  # --heartbeat-timeout-ms: an instrumented step is slow; the master must not take it for a hang
  SLUICE_CUDA_GEMM=$gemm SLUICE_WORKER_WRAPPER="$cs --tool $tool $extra --error-exitcode 99 --log-file $log.%p.log" \
    setsid "$build/sluice" serve -m "$model" --device cuda --host 127.0.0.1 --port 0 --frontends 1 \
    --max-seqs 8 --ctx-size 512 --kv-memory 64M --admin-socket "$out/admin-$tool.sock" \
    --drain-delay 0 --drain-timeout 30 --heartbeat-timeout-ms 3600000 > "$log.serve.log" 2>&1 &
  local pid=$!
  python3 - "$log.serve.log" "$pid" <<'EOF'
import json, os, re, sys, time, urllib.request
log, pid = sys.argv[1], int(sys.argv[2])
def fail(msg):
    print("serve-sanitize:", msg); sys.exit(1)
port = None
for _ in range(3000):                     # model load and CUDA start under the tool: minutes at worst
    m = re.search(r"listening on http://[^ ]*:(\d+)", open(log).read())
    if m:
        port = int(m.group(1)); break
    try: os.kill(pid, 0)
    except OSError: fail("sluice serve exited before listening")
    time.sleep(0.1)
if port is None: fail("sluice serve did not listen")
base = f"http://127.0.0.1:{port}"
for _ in range(6000):
    try:
        if urllib.request.urlopen(base + "/ready", timeout=2).status == 200: break
    except OSError: pass
    time.sleep(0.1)
else: fail("not ready")
def post(path, body):
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return r.status, r.read().decode()
st, text = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Say something."}],
    "max_tokens": 12, "stream": True, "temperature": 0.8, "top_p": 0.9, "top_k": 40,
    "presence_penalty": 0.5, "frequency_penalty": 0.2, "logprobs": True, "top_logprobs": 3, "seed": 7})
if st != 200 or "[DONE]" not in text: fail(f"chat: {st} {text[-200:]}")
st, text = post("/v1/completions", {"prompt": "The quick brown fox", "max_tokens": 12, "temperature": 0})
if st != 200 or '"text"' not in text: fail(f"completion: {st} {text[-200:]}")
import threading
res = []
def one(i):
    res.append(post("/v1/completions", {"prompt": f"Count to {i}:", "max_tokens": 8, "temperature": 1.0,
                                        "min_p": 0.05, "seed": i}))
ts = [threading.Thread(target=one, args=(i,)) for i in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
if len(res) != 4 or any(s != 200 for s, _ in res): fail(f"batch: {[s for s, _ in res]}")
print("serve-sanitize: 3 requests served")
EOF
  local rc=$?
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 3000); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$pid" 2>/dev/null
  wait "$pid"; local src=$?
  # the tool's log of the worker: the one that names the __worker command
  local wlog
  wlog=$(grep -l "__worker" "$log".*.log 2>/dev/null | head -1)
  [ -n "$wlog" ] || wlog=$(ls "$log".*.log 2>/dev/null | head -1)
  local summary
  summary=$(grep -h -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$wlog" 2>/dev/null)
  echo "compute-sanitizer $tool on sluice serve: requests rc=$rc, serve exit $src, ${summary:-no summary} ($wlog)"
  if [ $rc -ne 0 ] || [ $src -ne 0 ] || ! grep -qE '(ERROR|RACECHECK) SUMMARY: 0 ' <<<"$summary"; then
    status=1
    tail -n 20 "$log.serve.log"
  fi
}
run_tool memcheck "--leak-check full" 1
# racecheck: our kernels only, as in gpu-check.sh (it reports hazards inside
# cuBLAS's Hopper GEMM kernels, whose asynchronous copies it does not follow)
run_tool racecheck "" 0
exit $status
