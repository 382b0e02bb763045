#!/usr/bin/env bash
# tools/gpu-engine-vs-llamacpp.sh: engine prefill and decode tok/s of sluice's
# CUDA backend against llama.cpp's llama-bench on the same GGUF files, one
# file after the other in one run (docs/PERF.md, "Tensor types on the H200").
# Run from the repo root on the GPU machine with the release CUDA build.
#
# usage: tools/gpu-engine-vs-llamacpp.sh LLAMA_BENCH [FILE...]
#   LLAMA_BENCH  a llama-bench binary of llama.cpp built with CUDA
#   FILE...      GGUF files; none: 1B-shape files of each type in
#                $BENCH_TYPES, made with mkmodel (cached in $SLUICE_MODELS)
# Environment:
#   SLUICE_BUILD_DIR  build folder (default build-gpu)
#   SLUICE_MODELS     where the made files go (default /tmp/sluice-gpu-models)
#   BENCH_TYPES       mkmodel types (default: Q4_K_M Q8_0 Q4_1 Q5_0 Q5_1 IQ4_NL Q2_K Q3_K IQ4_XS)
#   BENCH_PRESET      mkmodel preset (default 1b, with --n-vocab 32000)
#   BENCH_PROMPT      prompt tokens (default 512)
#   BENCH_GEN         generated tokens (default 128)
#   BENCH_LLAMA_ARGS  extra llama-bench flags
# Prints one markdown row per file: prefill and decode of both, and the ratios.
# Both run batch 1: enginebench --batch 1 (best of 2), llama-bench -r 2 (mean);
# decode is measured after the prompt on both sides (llama-bench -d PROMPT).
# Exit 0 when every run succeeded, 1 otherwise, 2 on usage.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
if [ $# -lt 1 ] || [ ! -x "$1" ]; then
  sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2
fi
llama_bench=$1; shift
build=${SLUICE_BUILD_DIR:-build-gpu}
models=${SLUICE_MODELS:-/tmp/sluice-gpu-models}
prompt=${BENCH_PROMPT:-512}; gen=${BENCH_GEN:-128}
preset=${BENCH_PRESET:-1b}
[ -d .devlibs ] && export LD_LIBRARY_PATH=$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$models"
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  for t in ${BENCH_TYPES:-Q4_K_M Q8_0 Q4_1 Q5_0 Q5_1 IQ4_NL Q2_K Q3_K IQ4_XS}; do
    f=$models/$preset-$t.gguf
    if [ ! -s "$f" ]; then
      "$build/tools/mkmodel" -o "$f.tmp" --preset "$preset" --n-vocab 32000 --type "$t" --threads "$(nproc)" \
        >/dev/null || { echo "gpu-engine-vs-llamacpp: mkmodel $t failed" >&2; exit 1; }
      mv "$f.tmp" "$f"
    fi
    files+=("$f")
  done
fi
# llama_ts ARGS...: llama-bench's mean tok/s of its one test on $f
llama_ts() {
  "$llama_bench" -m "$f" -ngl 999 -r 2 -o csv "$@" 2>/dev/null | awk -F, '
    NR == 1 { for (i = 1; i <= NF; i++) { gsub(/"/, "", $i); if ($i == "avg_ts") c = i } next }
    c && NF >= c { gsub(/"/, "", $c); print $c; exit }'
}
rc=0
echo "| file | sluice prefill | llama.cpp prefill | ratio | sluice decode | llama.cpp decode | ratio |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for f in "${files[@]}"; do
  ours=$("$build/tools/enginebench" -m "$f" --device cuda --batch 1 --prompt "$prompt" --gen "$gen" --reps 2 2>&1)
  sp=$(sed -n 's/^prefill:.*: \([0-9.]*\) tok\/s.*/\1/p' <<<"$ours")
  sd=$(sed -n 's/^decode:.*: \([0-9.]*\) tok\/s.*/\1/p' <<<"$ours")
  # llama-bench's csv: a header, then one row per test; avg_ts is the mean
  # tok/s. Its decode runs at depth $prompt, after a prompt as long as ours.
  # shellcheck disable=SC2086  # BENCH_LLAMA_ARGS is a list of flags
  lp=$(llama_ts -p "$prompt" -n 0 ${BENCH_LLAMA_ARGS:-})
  # shellcheck disable=SC2086
  ld=$(llama_ts -p 0 -n "$gen" -d "$prompt" ${BENCH_LLAMA_ARGS:-})
  if [ -z "$sp" ] || [ -z "$sd" ] || [ -z "$lp" ] || [ -z "$ld" ]; then
    echo "gpu-engine-vs-llamacpp: $f: a run failed" >&2
    echo "$ours" | tail -3 >&2
    rc=1; continue
  fi
  awk -v f="$(basename "$f")" -v sp="$sp" -v lp="$lp" -v sd="$sd" -v ld="$ld" \
    'BEGIN { printf "| %s | %.0f | %.0f | %.2fx | %.0f | %.0f | %.2fx |\n", f, sp, lp, sp / lp, sd, ld, sd / ld }'
done
exit $rc
