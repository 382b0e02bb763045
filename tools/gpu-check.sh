#!/usr/bin/env bash
# tools/gpu-check.sh: the CUDA backend's correctness check, in one command, on
# the GPU machine. Builds the test models with the project's mkmodel (every
# architecture x tensor type on the tiny presets, the MoE ones (tiny-qwen3moe,
# tiny-qwen2moe, tiny-mixtral) in every quantized type, tiny-gpt-oss in five
# (opt-in on CUDA: SLUICE_CUDA_GPT_OSS=1), plus a Llama-3.2-1B-shape
# Q4_K_M for timing), runs tools/cudacheck's kernel self-test and its device-
# sampler check (--sampling: against the reference sampler), then cudacheck
# on the models (CUDA vs CPU logits, greedy agreement, batched == alone
# bitwise or, where the tensor-core path ran, within tolerance with the same
# greedy tokens; decode tok/s) with the backend's default K/V storage (f16),
# again with f32 and with q8_0 K/V on a few tiny models (and the 1B shape),
# with the integer small-batch matmuls (SLUICE_CUDA_MMVQ=1) on a few,
# then compute-sanitizer memcheck and racecheck on a
# short cudacheck run and on a short serving run of `sluice serve`.
# Logs go to $OUT (or /tmp/sluice-gpu-check); exit 0 only if everything passed.
#
# usage: tools/gpu-check.sh [--quick] [BUILD_DIR]
#        (BUILD_DIR default: $SLUICE_BUILD_DIR, else build-gpu, else build)
# --quick: the kernel self-test and the tiny models only (no 1B shape, no
# compute-sanitizer runs): about a minute, for a short device lease.
# env SLUICE_TOKENIZER_DIR: the llama3 tokenizer folder for the serving run
# (default tests/data/tokenizers/llama3; its tokenizer.json.xz is expanded
# into $SLUICE_MODELS by gpu-serve-sanitize.sh).
# The build must be configured with -DSLUICE_CUDA=ON; .devlibs/ (the shared
# libraries the binaries link that the GPU machine lacks) is put on
# LD_LIBRARY_PATH when present.
set -uo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = --quick ]; then quick=1; shift; fi
build=${1:-${SLUICE_BUILD_DIR:-}}
if [ -z "$build" ]; then
  build=build-gpu
  [ -x "$build/tools/cudacheck" ] || build=build
fi
out=${OUT:-/tmp/sluice-gpu-check}
models=${SLUICE_MODELS:-/tmp/sluice-gpu-models}
mkdir -p "$out" "$models"
[ -d .devlibs ] && export LD_LIBRARY_PATH=$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mk=$build/tools/mkmodel
check=$build/tools/cudacheck
for f in "$mk" "$check" "$build/libsluice_cuda.so"; do
  [ -e "$f" ] || { echo "gpu-check: $f missing (build with -DSLUICE_CUDA=ON)" >&2; exit 2; }
done
summary=$out/summary.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
status=0
t0=$(date +%s)
say "gpu-check: $(date -u +%FT%TZ) build=$build"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true; } | tee -a "$summary"

# 0. per-kernel self-test against float64 host references (seconds)
"$check" --ops --sampling > "$out/kernels.log" 2>&1
rc=$?; say "kernel self-test and device sampler: rc=$rc"; [ $rc -eq 0 ] || status=1
grep -E '^  |^result' "$out/kernels.log" | tee -a "$summary"

# 1. models (a few seconds each; the 1B shape ~10 s)
types="F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K Q4_K_M Q5_0 Q4_1 Q5_1 Q3_K Q2_K IQ4_XS IQ4_NL Q8_1"
tiny=()
for preset in tiny-llama tiny-llama3 tiny-qwen2 tiny-qwen3 tiny-gemma2 tiny-gemma3 tiny-granite tiny-phi3 tiny-phi3-longrope; do
  for type in $types; do
    f=$models/$preset-$type.gguf
    [ -s "$f" ] || "$mk" -o "$f" --preset "$preset" --type "$type" --n-vocab 1024 --peak 8 >/dev/null \
      || { say "mkmodel failed: $preset $type"; status=1; continue; }
    tiny+=("$f")
  done
done
big=$models/1b-Q4_K_M.gguf
[ $quick -eq 1 ] || [ -s "$big" ] || "$mk" -o "$big" --preset 1b --type Q4_K_M --n-vocab 128256 --peak 8 >/dev/null \
  || { say "mkmodel failed: 1b Q4_K_M"; status=1; }
# the MoE presets: their experts go through the grouped small-batch kernel,
# which takes the quantized types only (float experts are refused at load)
moe_types="Q8_0 Q4_0 Q4_K Q5_K Q6_K Q4_K_M Q5_0 Q4_1 Q5_1 Q3_K Q2_K IQ4_XS IQ4_NL Q8_1"
for preset in tiny-qwen3moe tiny-qwen2moe tiny-mixtral; do
  for type in $moe_types; do
    f=$models/$preset-$type.gguf
    [ -s "$f" ] || "$mk" -o "$f" --preset "$preset" --type "$type" --n-vocab 1024 --peak 8 >/dev/null \
      || { say "mkmodel failed: $preset $type"; status=1; continue; }
    tiny+=("$f")
  done
done
# gpt-oss (attention sinks, biases, top-k-then-softmax routing, the clamped
# SwiGLU, MXFP4 experts): checked apart, since the backend takes it only
# with SLUICE_CUDA_GPT_OSS=1 until a run of this script passes it
oss_types="Q8_0 Q4_K_M MXFP4 Q4_0 Q6_K"
oss=()
for type in $oss_types; do
  f=$models/tiny-gpt-oss-$type.gguf
  [ -s "$f" ] || "$mk" -o "$f" --preset tiny-gpt-oss --type "$type" --n-vocab 1024 --peak 8 >/dev/null \
    || { say "mkmodel failed: tiny-gpt-oss $type"; status=1; continue; }
  oss+=("$f")
done
# gpt-oss-20b's shape (rows of 2,880, 64 heads of 64 over 8) cut to one layer of 4 experts
g20=$models/gpt-oss-20b-l1-MXFP4.gguf
[ -s "$g20" ] || "$mk" -o "$g20" --preset gpt-oss-20b --type MXFP4 --n-vocab 1024 --n-layer 1 --n-expert 4 >/dev/null \
  || { say "mkmodel failed: gpt-oss-20b one layer MXFP4"; status=1; }
say "models: ${#tiny[@]} tiny + ${#oss[@]} gpt-oss + 1b in $models ($(( $(date +%s) - t0 ))s)"

# 2. cudacheck: every tiny model (full check, short timing), then the 1B shape
"$check" --bench 32 "${tiny[@]}" > "$out/cudacheck-tiny.log" 2>&1
rc=$?; say "cudacheck tiny models: rc=$rc ($(grep -c PASS "$out/cudacheck-tiny.log") PASS, $(grep -c FAIL "$out/cudacheck-tiny.log") FAIL)"
[ $rc -eq 0 ] || status=1
grep -E '^result|^cudacheck' "$out/cudacheck-tiny.log" | tee -a "$summary"
# the small-batch kernels alone (tensor-core path off) are batch invariant bit for bit
SLUICE_CUDA_GEMM=0 "$check" --no-bench "${tiny[@]}" > "$out/cudacheck-tiny-strict.log" 2>&1
rc=$?; say "cudacheck tiny models, small-batch kernels only, batched == alone bitwise: rc=$rc ($(grep -c PASS "$out/cudacheck-tiny-strict.log") PASS)"
[ $rc -eq 0 ] || status=1
# gpt-oss: the full check, the small-batch kernels alone (bitwise batch
# invariance), prompts past 1,024 positions (the sinks in the split merge),
# and the refusal without SLUICE_CUDA_GPT_OSS=1
if [ ${#oss[@]} -gt 0 ]; then
  SLUICE_CUDA_GPT_OSS=1 "$check" --bench 32 "${oss[@]}" > "$out/cudacheck-gpt-oss.log" 2>&1
  rc=$?; say "cudacheck tiny-gpt-oss ($oss_types): rc=$rc ($(grep -c '^result.* PASS' "$out/cudacheck-gpt-oss.log") PASS)"
  [ $rc -eq 0 ] || status=1
  grep -E '^result|^cudacheck' "$out/cudacheck-gpt-oss.log" | tee -a "$summary"
  SLUICE_CUDA_GPT_OSS=1 SLUICE_CUDA_GEMM=0 "$check" --no-bench "${oss[@]}" > "$out/cudacheck-gpt-oss-strict.log" 2>&1
  rc=$?; say "cudacheck tiny-gpt-oss, small-batch kernels only: rc=$rc ($(grep -c '^result.* PASS' "$out/cudacheck-gpt-oss-strict.log") PASS)"
  [ $rc -eq 0 ] || status=1
  SLUICE_CUDA_GPT_OSS=1 "$check" --prompt 1100 --chunk 256 --gen 8 --seqs 3 --no-bench "${oss[0]}" \
    > "$out/cudacheck-gpt-oss-long.log" 2>&1
  rc=$?; say "cudacheck tiny-gpt-oss 1,100-token prompts (split attention with sinks): rc=$rc"
  [ $rc -eq 0 ] || status=1
  if [ -s "$g20" ]; then
    SLUICE_CUDA_GPT_OSS=1 "$check" --no-bench "$g20" > "$out/cudacheck-gpt-oss-20b-l1.log" 2>&1
    rc=$?; say "cudacheck gpt-oss-20b shape, one layer, MXFP4 experts: rc=$rc"; [ $rc -eq 0 ] || status=1
    grep -E '^result' "$out/cudacheck-gpt-oss-20b-l1.log" | tee -a "$summary"
  fi
  env -u SLUICE_CUDA_GPT_OSS "$check" --no-bench "${oss[0]}" > "$out/cudacheck-gpt-oss-refused.log" 2>&1
  rc=$?
  if [ $rc -eq 2 ] && grep -q 'SLUICE_CUDA_GPT_OSS=1' "$out/cudacheck-gpt-oss-refused.log"; then
    say "cudacheck tiny-gpt-oss without SLUICE_CUDA_GPT_OSS=1: refused at create, naming the variable (as it should be)"
  else
    say "cudacheck tiny-gpt-oss without SLUICE_CUDA_GPT_OSS=1: rc=$rc, NOT refused naming the variable"; status=1
  fi
fi
# the other K/V storage types (the passes above store the default, f16):
# float32 and q8_0 on a few tiny models of each attention kind, a few seconds
# (ones whose greedy tokens were measured to agree under q8_0: a random tiny
# model's near-tied logits can flip under its error, cudacheck's default_tol)
kvm=("$models/tiny-llama3-Q4_K_M.gguf" "$models/tiny-qwen2-Q8_0.gguf" "$models/tiny-qwen3-Q4_K_M.gguf"
     "$models/tiny-gemma2-Q4_K_M.gguf" "$models/tiny-gemma3-Q8_0.gguf")
for kv in f32 q8_0; do
  "$check" --kv-type $kv --no-bench "${kvm[@]}" > "$out/cudacheck-kv-$kv.log" 2>&1
  rc=$?; say "cudacheck K/V $kv on ${#kvm[@]} tiny models: rc=$rc ($(grep -c '^result.* PASS' "$out/cudacheck-kv-$kv.log") PASS)"
  [ $rc -eq 0 ] || status=1
  grep -E '^result' "$out/cudacheck-kv-$kv.log" | tee -a "$summary"
done
# streamed float16 weights (no resident copies: SLUICE_CUDA_F16_COPIES_MIB=0)
# on the same few models: the same checks, cuBLAS reading each matrix from the
# slab a step dequantizes it into
SLUICE_CUDA_F16_COPIES_MIB=0 "$check" --no-bench "${kvm[@]}" > "$out/cudacheck-streamed.log" 2>&1
rc=$?; say "cudacheck streamed float16 weights on ${#kvm[@]} tiny models: rc=$rc ($(grep -c '^result.* PASS' "$out/cudacheck-streamed.log") PASS)"
[ $rc -eq 0 ] || status=1
grep -E '^result' "$out/cudacheck-streamed.log" | tee -a "$summary"
# the integer small-batch matmuls (SLUICE_CUDA_MMVQ=1, off by default) on the
# types they compute: the full check, then the small-batch kernels alone
# (batched == alone bitwise); gemma3 takes the unfused gate/up (GELU),
# qwen2moe's shared expert the fused SwiGLU. Reported, not gating: the path
# is off by default, and on the H200 its logits differ from the CPU's by
# 1-3.5e-2 relative L2 on these models (the size of the 8-bit rounding
# itself, but also against the CPU's own 8-bit path: docs/CUDA.md,
# "Integer small-batch matmuls"), over the 5e-3 bound.
mq=()
for type in Q4_K Q5_K Q6_K Q8_0 Q4_K_M; do
  for preset in tiny-llama3 tiny-qwen3 tiny-gemma3 tiny-qwen2moe; do
    [ -s "$models/$preset-$type.gguf" ] && mq+=("$models/$preset-$type.gguf")
  done
done
SLUICE_CUDA_MMVQ=1 "$check" --no-bench "${mq[@]}" > "$out/cudacheck-mmvq.log" 2>&1
rc=$?; say "cudacheck SLUICE_CUDA_MMVQ=1 on ${#mq[@]} tiny models (not gating): rc=$rc ($(grep -c '^result.* PASS' "$out/cudacheck-mmvq.log") PASS)"
grep -E '^result' "$out/cudacheck-mmvq.log" | tee -a "$summary"
SLUICE_CUDA_MMVQ=1 SLUICE_CUDA_GEMM=0 "$check" --no-bench "${mq[@]}" > "$out/cudacheck-mmvq-strict.log" 2>&1
rc=$?; say "cudacheck SLUICE_CUDA_MMVQ=1, small-batch kernels only (not gating): rc=$rc ($(grep -c '^result.* PASS' "$out/cudacheck-mmvq-strict.log") PASS)"
# head_dim 48 (the kernels' generic head_dim path): f16 K/V checked in full,
# and q8_0, which needs head_dim % 32 == 0, refused at create naming it
h48=$models/tiny-llama-hd48-F16.gguf
[ -s "$h48" ] || "$mk" -o "$h48" --preset tiny-llama --head-dim 48 --type F16 --n-vocab 1024 --peak 8 >/dev/null \
  || { say "mkmodel failed: tiny-llama head_dim 48"; status=1; }
"$check" --no-bench "$h48" > "$out/cudacheck-hd48.log" 2>&1
rc=$?; say "cudacheck head_dim 48, f16 K/V: rc=$rc"; [ $rc -eq 0 ] || status=1
grep -E '^result' "$out/cudacheck-hd48.log" | tee -a "$summary"
"$check" --kv-type q8_0 --no-bench "$h48" > "$out/cudacheck-hd48-q8_0.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q 'q8_0 needs head_dim a multiple of 32.* 48' "$out/cudacheck-hd48-q8_0.log"; then
  say "cudacheck head_dim 48, q8_0 K/V: refused at create, the message naming head_dim 48 (as it should be)"
else
  say "cudacheck head_dim 48, q8_0 K/V: rc=$rc, NOT refused with a message naming head_dim 48"; status=1
fi
# long prompts: attention splits (contexts past 1,024 positions), in graphs too
"$check" --prompt 1100 --chunk 256 --gen 8 --seqs 3 --no-bench "$models/tiny-llama3-Q4_K_M.gguf" \
  "$models/tiny-qwen3-Q8_0.gguf" > "$out/cudacheck-long.log" 2>&1
rc=$?; say "cudacheck 1,100-token prompts (split attention): rc=$rc ($(grep -c PASS "$out/cudacheck-long.log") PASS)"
[ $rc -eq 0 ] || status=1
# gemma sliding windows: the tiny presets' window (8 positions) is crossed by
# every chunk of the 40-token prompts above; here a gemma2 file with a
# 1,500-position window under 2,100-token prompts splits both kinds of layer
# (the windowed ones over their window's span, offset by its start)
gw=$models/tiny-gemma2-w1500-Q8_0.gguf
[ -s "$gw" ] || "$mk" -o "$gw" --preset tiny-gemma2 --type Q8_0 --n-vocab 1024 --peak 8 --window 1500 >/dev/null \
  || { say "mkmodel failed: tiny-gemma2 window 1500"; status=1; }
"$check" --prompt 2100 --chunk 512 --gen 8 --seqs 2 --no-bench "$gw" "$models/tiny-gemma3-Q4_K_M.gguf" \
  > "$out/cudacheck-gemma-long.log" 2>&1
rc=$?; say "cudacheck gemma 2,100-token prompts (windowed split attention): rc=$rc ($(grep -c PASS "$out/cudacheck-gemma-long.log") PASS)"
[ $rc -eq 0 ] || status=1
if [ -s "$big" ]; then
  "$check" --prompt 64 --gen 16 --seqs 3 --bench 128 --batches 1,8,64 "$big" > "$out/cudacheck-1b.log" 2>&1
  rc=$?; say "cudacheck 1b Q4_K_M: rc=$rc"; [ $rc -eq 0 ] || status=1
  grep -E '^result|^cudacheck|timing' "$out/cudacheck-1b.log" | tee -a "$summary"
  for kv in f32 q8_0; do
    "$check" --kv-type $kv --prompt 64 --gen 16 --seqs 3 --bench 128 --batches 1,64 "$big" > "$out/cudacheck-1b-$kv.log" 2>&1
    rc=$?; say "cudacheck 1b Q4_K_M, K/V $kv: rc=$rc"; [ $rc -eq 0 ] || status=1
    grep -E '^result|timing' "$out/cudacheck-1b-$kv.log" | tee -a "$summary"
  done
fi

# 3. compute-sanitizer on a short run (memcheck with leak check, racecheck):
#    kernel self-test, allocation-failure sweep, three models (one MoE)
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ $quick -eq 1 ]; then
  say "compute-sanitizer: skipped (--quick)"
elif [ -x "$cs" ]; then
  short=(--ops --sampling --draws 2 --faults --prompt 20 --chunk 8 --gen 4 --seqs 2 --no-bench "$models/tiny-qwen3-Q4_K_M.gguf" "$models/tiny-llama3-Q6_K.gguf"
         "$models/tiny-qwen2moe-Q4_K_M.gguf")   # the MoE one has a shared expert
  for tool in memcheck racecheck; do
    extra=(); [ $tool = memcheck ] && extra=(--leak-check full)   # leaks on the --faults error paths too
    # racecheck: our kernels only. It reports hazards inside cuBLAS's Hopper
    # GEMM kernels (nvjet_*), whose asynchronous copies and barriers it does
    # not follow; memcheck covers the tensor-core path.
    gemm=1; [ $tool = racecheck ] && gemm=0
    # no flash-attention timing line under the tools (selftest_fa.cu): minutes, and meaningless
    SLUICE_CUDA_FA_TIMING=0 SLUICE_CUDA_GEMM=$gemm "$cs" --tool "$tool" "${extra[@]}" --error-exitcode 99 "$check" "${short[@]}" > "$out/sanitizer-$tool.log" 2>&1
    rc=$?; say "compute-sanitizer $tool: rc=$rc ($(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer-$tool.log" || echo 'no summary'))"
    [ $rc -eq 0 ] || status=1
  done
else
  say "compute-sanitizer: not found, skipped"
fi
# 4. compute-sanitizer memcheck and racecheck on a short serving run of
#    `sluice serve` (the worker started under the tool: tools/gpu-serve-sanitize.sh)
tokdir=${SLUICE_TOKENIZER_DIR:-tests/data/tokenizers/llama3}
if [ $quick -eq 0 ] && [ -x "$cs" ]; then
  OUT=$out/serve-sanitize SLUICE_MODELS=$models tools/gpu-serve-sanitize.sh "$build" "$tokdir" 2>&1 \
    | grep '^compute-sanitizer\|^serve-sanitize' | tee -a "$summary"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
say "gpu-check: $([ $status -eq 0 ] && echo PASS || echo FAIL) in $(( $(date +%s) - t0 ))s; logs in $out"
exit $status
