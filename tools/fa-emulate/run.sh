#!/bin/sh
# tools/fa-emulate/run.sh: builds emulate.cpp around the flash-attention
# kernel of kernels/cuda/attention_fa.cu (its source up to the launcher, with
# __shared__ made static and the dynamic shared memory a host buffer) and
# runs it. Needs g++ and the CUDA headers (cuda_fp16.h); no GPU.
#   tools/fa-emulate/run.sh [CASE]
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk '/^#include <cuda_pipeline.h>/{next} /^#include <mma.h>/{next} /^static bool fa_prepared;/{exit} {print}' \
  "$root/kernels/cuda/attention_fa.cu" |
  sed -e 's/extern __shared__ __align__(128) unsigned char fa_smem\[\];/unsigned char *fa_smem = emu_dyn_smem;/' \
      -e 's/__shared__ /static /' -e 's/static __global__ void __launch_bounds__(FT)/void/' > "$tmp/fa_kernel.inc"
grep -q 'emu_dyn_smem' "$tmp/fa_kernel.inc" || { echo "fa-emulate: attention_fa.cu's shared memory line moved" >&2; exit 2; }
cp "$root/tools/fa-emulate/mock.h" "$root/tools/fa-emulate/emulate.cpp" "$tmp/"
g++ -O1 -std=c++17 -w -I"$root" -I"$cuda/include" -o "$tmp/emulate" "$tmp/emulate.cpp" -lpthread
"$tmp/emulate" "$@"
